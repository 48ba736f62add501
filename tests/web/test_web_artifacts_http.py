"""`GET /api/tasks/{id}/artifacts/{name}` over plain HTTP (aiohttp's client, a real daemon):
every artifact a download whatever its stored type (attachment, octet-stream, nosniff,
a sandboxing CSP, Content-Length, the SHA-256 as ETag), names that are paths and hold
characters a URL escapes, the task's detail listing what the drawer shows, refusals as
JSON (401 without a session, 404 for a task or a name that is not there, 405 for a
write), a viewer's read, and a 50 MiB file streamed with the daemon's memory bounded."""

from __future__ import annotations

import asyncio
import hashlib
import urllib.parse

import aiohttp
import pytest

import corral
from tests.support.memory import peak_rss
from tests.web.board_support import Mate, WebDaemon, run

pytestmark = pytest.mark.timeout(90)

HOSTILE_HTML = b"<!doctype html><script>window.__pwned = 'artifact'</script><h1>hi</h1>"
SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>window.__pwned = "svg"</script></svg>'
ARTIFACT_CSP = "default-src 'none'; sandbox"


def path_of(task_id: str, name: str) -> str:
    """The download's path as the drawer builds it: each segment of the name percent-encoded."""
    segments = "/".join(urllib.parse.quote(segment, safe="") for segment in name.split("/"))
    return f"/api/tasks/{urllib.parse.quote(task_id, safe='')}/artifacts/{segments}"


async def log_in(http: aiohttp.ClientSession, daemon: WebDaemon, token: str | None = None) -> None:
    async with http.post(f"{daemon.url}/login", json={"token": token or daemon.token}) as response:
        assert response.status == 200


def claimed(daemon: WebDaemon, task_id: str) -> tuple[Mate, corral.Claim]:
    daemon.lead.create_tasks([corral.TaskSpec(id=task_id, title=task_id, required_role=task_id)])
    mate = Mate(daemon, f"mate-{task_id}", [task_id])
    return mate, mate.claim()


def test_an_artifact_downloads_as_an_attachment_whatever_its_type(web_daemon):
    mate, claim = claimed(web_daemon, "dl-1")
    uploads = {
        "report/index.html": (HOSTILE_HTML, "text/html"),
        "pictures/logo.svg": (SVG, "image/svg+xml"),
        "raw.bin": (bytes(range(256)) * 10, ""),
    }
    for name, (data, media_type) in uploads.items():
        mate.put_artifact(claim, name, data, media_type)

    async def body(http):
        await log_in(http, web_daemon)
        for name, (data, _) in uploads.items():
            async with http.get(web_daemon.url + path_of("dl-1", name)) as response:
                assert response.status == 200, name
                assert await response.read() == data
                headers = response.headers
                basename = name.rpartition("/")[2]
                assert headers["Content-Type"] == "application/octet-stream"
                named = f"attachment; filename=\"{basename}\"; filename*=UTF-8''{basename}"
                assert headers["Content-Disposition"] == named
                assert headers["X-Content-Type-Options"] == "nosniff"
                assert headers["Content-Security-Policy"] == ARTIFACT_CSP
                assert headers["Cross-Origin-Resource-Policy"] == "same-origin"
                assert headers["Content-Length"] == str(len(data))
                assert headers["ETag"] == f'"{hashlib.sha256(data).hexdigest()}"'
                assert headers["Cache-Control"] == "no-store"
        # HEAD: the same headers, no body.
        async with http.head(web_daemon.url + path_of("dl-1", "raw.bin")) as response:
            assert response.status == 200
            assert response.headers["Content-Length"] == "2560"
            assert response.headers["Content-Disposition"].startswith("attachment;")
            assert await response.read() == b""

    run(body)
    mate.close()


def test_names_that_a_url_escapes_round_trip_and_the_detail_lists_the_current_artifacts(web_daemon):
    mate, claim = claimed(web_daemon, "names-1")
    names = ["<b>bold</b>/page.html", "50% sure?#yes.txt", "a%2Fb", "über/naïve résumé.md", "deep/er/still.log"]
    for number, name in enumerate(names):
        mate.put_artifact(claim, name, f"artifact {number}".encode(), "text/plain")
    # A second upload of a name supersedes the first in the detail and the download.
    latest = mate.put_artifact(claim, "deep/er/still.log", b"the second upload", "text/x-log")

    async def body(http):
        await log_in(http, web_daemon)
        for number, name in enumerate(names[:-1]):
            async with http.get(web_daemon.url + path_of("names-1", name)) as response:
                assert response.status == 200, name
                assert await response.read() == f"artifact {number}".encode()
                basename = name.rpartition("/")[2]
                disposition = response.headers["Content-Disposition"]
                assert disposition.endswith("filename*=UTF-8''" + urllib.parse.quote(basename, safe="")), disposition
        async with http.get(web_daemon.url + path_of("names-1", "deep/er/still.log")) as response:
            assert await response.read() == b"the second upload"
        async with http.get(f"{web_daemon.url}/api/tasks/names-1") as response:
            listed = (await response.json())["artifacts"]
        assert sorted(a["name"] for a in listed) == sorted(names)
        shown = next(a for a in listed if a["name"] == "deep/er/still.log")
        assert shown == {
            "name": "deep/er/still.log",
            "media_type": "text/x-log",
            "size": len(b"the second upload"),
            "sha256": hashlib.sha256(b"the second upload").hexdigest(),
            "attempt": 1,
            "create_ms": latest.create_time.ToMilliseconds(),
        }

    run(body)
    mate.close()


def test_refusals_answer_json_and_a_viewer_reads_as_the_lead_does(web_daemon):
    mate, claim = claimed(web_daemon, "refused-a")
    mate.put_artifact(claim, "notes.txt", b"some notes", "text/plain")
    viewer_token = web_daemon.lead.add_viewer("artifact-reader")

    async def status_of(http, method: str, path: str) -> tuple[int, str]:
        """The answer's status and type; a refusal's JSON must name what went wrong."""
        async with http.request(method, web_daemon.url + path) as response:
            content_type = response.headers.get("Content-Type", "").split(";")[0]
            if response.status != 200:
                assert (await response.json())["error"], path
            return response.status, content_type

    async def body(http):
        # No session: 401, as every read of the board.
        assert await status_of(http, "GET", path_of("refused-a", "notes.txt")) == (401, "application/json")
        await log_in(http, web_daemon)
        assert await status_of(http, "GET", path_of("refused-a", "nope.txt")) == (404, "application/json")
        assert await status_of(http, "GET", path_of("no-such-task", "notes.txt")) == (404, "application/json")
        assert await status_of(http, "GET", path_of("refused-a", "NOTES.txt")) == (404, "application/json")
        assert await status_of(http, "POST", path_of("refused-a", "notes.txt")) == (405, "application/json")
        assert await status_of(http, "DELETE", path_of("refused-a", "notes.txt")) == (405, "application/json")
        assert await status_of(http, "GET", path_of("refused-a", "notes.txt")) == (200, "application/octet-stream")

    async def as_viewer(http):
        await log_in(http, web_daemon, viewer_token)
        async with http.get(web_daemon.url + path_of("refused-a", "notes.txt")) as response:
            assert response.status == 200
            assert await response.read() == b"some notes"
        await asyncio.to_thread(web_daemon.lead.remove_viewer, "artifact-reader")
        async with http.get(web_daemon.url + path_of("refused-a", "notes.txt")) as response:
            assert response.status == 401  # the removed viewer's session ended with it

    run(body)
    run(as_viewer)
    mate.close()


BIG_BYTES = 50 * 1024 * 1024
GROWTH_LIMIT_MIB = 24  # half the file: a daemon that held it whole would pass this


def test_a_50_mib_artifact_streams_with_the_daemons_memory_bounded(web_daemon):
    mate, claim = claimed(web_daemon, "big-1")
    # Bytes no compression or page sharing could shrink: a chunk of random data, repeated
    # with a counter so no two MiB are alike.
    seed = hashlib.sha256(b"big").digest() * (1024 * 1024 // 32)
    data = b"".join(i.to_bytes(8, "big") + seed[8:] for i in range(BIG_BYTES // len(seed)))
    assert len(data) == BIG_BYTES
    sent = mate.put_artifact(claim, "big/blob.bin", data)
    digest = hashlib.sha256(data).hexdigest()
    assert sent.sha256 == digest
    del data

    async def body(http):
        await log_in(http, web_daemon)
        read, hashed = 0, hashlib.sha256()
        with peak_rss(web_daemon.process.pid) as memory:
            async with http.get(web_daemon.url + path_of("big-1", "big/blob.bin")) as response:
                assert response.status == 200
                assert response.headers["Content-Length"] == str(BIG_BYTES)
                assert response.headers["ETag"] == f'"{digest}"'
                async for part in response.content.iter_chunked(64 * 1024):
                    read += len(part)
                    hashed.update(part)
        assert (read, hashed.hexdigest()) == (BIG_BYTES, digest)
        growth = memory["peak"] - memory["start"]
        assert growth < GROWTH_LIMIT_MIB, f"RSS grew {growth:.0f} MiB ({memory['start']:.0f} -> {memory['peak']:.0f})"

    run(body)
    mate.close()
