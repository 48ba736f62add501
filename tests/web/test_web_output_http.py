"""`GET /api/tasks/{id}/output` over plain HTTP (aiohttp's client, a real daemon): its
refusals (401 without a session, 404 for a task or attempt that is not there, 400 for a
bad offset, attempt or Last-Event-ID), a viewer's read, a stream that sends what is
stored, follows appends and ends with the attempt, a resumed stream with no gap, no
repeat and no split character, the window of a long output, and a reader that leaves
taking its follower with it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

import corral
from tests.web.board_support import Mate, WebDaemon, run

pytestmark = pytest.mark.timeout(60)

Event = tuple[str, str, Any]  # (event, id, data)


async def log_in(http: aiohttp.ClientSession, daemon: WebDaemon, token: str | None = None) -> None:
    async with http.post(f"{daemon.url}/login", json={"token": token or daemon.token}) as response:
        assert response.status == 200


async def read_events(stream: aiohttp.ClientResponse, count: int | None = None, within_s: float = 10) -> list[Event]:
    """The stream's events until `count` of them or, with None, its `end` (after which
    the stream must close)."""
    found: list[Event] = []
    fields: dict[str, str] = {}
    async with asyncio.timeout(within_s):
        while count is None or len(found) < count:
            line = (await stream.content.readline()).decode()
            assert line, f"the stream closed after {found}"
            line = line.rstrip("\r\n")
            if line == "":
                if "event" in fields:
                    found.append((fields["event"], fields.get("id", ""), json.loads(fields["data"])))
                    if count is None and fields["event"] == "end":
                        assert await stream.content.read() == b""  # and then it ends
                        return found
                fields = {}
            elif not line.startswith(":"):
                key, _, value = line.partition(": ")
                fields[key] = value
    return found


def text_of(events: list[Event]) -> str:
    return "".join(data["text"] for kind, _, data in events if kind == "output")


async def outputs_open(http: aiohttp.ClientSession, daemon: WebDaemon) -> int:
    async with http.get(f"{daemon.url}/api/board") as response:
        return (await response.json())["stats"]["outputs_open"]


async def until_outputs_open(http: aiohttp.ClientSession, daemon: WebDaemon, count: int, within_s: float = 10) -> None:
    """Polls the board's stats until `count` output streams are open, failing at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while (last := await outputs_open(http, daemon)) != count:
        assert loop.time() < deadline, f"{last} output streams open, not {count}"
        await asyncio.sleep(0.02)  # the poll's pace; the deadline bounds the wait


def claimed(daemon: WebDaemon, task_id: str) -> tuple[Mate, corral.Claim]:
    daemon.lead.create_tasks([corral.TaskSpec(id=task_id, title=task_id, required_role=task_id)])
    mate = Mate(daemon, f"mate-{task_id}", [task_id])
    return mate, mate.claim()


def test_refusals_answer_json_with_their_status(web_daemon):
    mate, claim = claimed(web_daemon, "refused-1")
    size = mate.append(claim, b"twelve bytes")
    unclaimed = corral.TaskSpec(id="unclaimed-1", title="no claim yet", required_role="nobody-has-it")
    web_daemon.lead.create_tasks([unclaimed])
    url = f"{web_daemon.url}/api/tasks"
    cases = [
        ("/nope/output", {}, 404),
        ("/unclaimed-1/output", {}, 404),
        ("/refused-1/output?attempt=7", {}, 404),
        ("/refused-1/output?offset=-1", {}, 400),
        ("/refused-1/output?offset=abc", {}, 400),
        ("/refused-1/output?offset=1e3", {}, 400),
        (f"/refused-1/output?offset={size + 1}", {}, 400),
        ("/refused-1/output?offset=" + "9" * 19, {}, 400),
        ("/refused-1/output?attempt=x", {}, 400),
        (f"/refused-1/output?attempt={2**31}", {}, 400),
        ("/refused-1/output", {"Last-Event-ID": "junk"}, 400),
        ("/refused-1/output", {"Last-Event-ID": "1:"}, 400),
        ("/refused-1/output", {"Last-Event-ID": f"1:{size + 1}"}, 400),
        ("/nope/output", {"Last-Event-ID": "1:0"}, 404),
    ]

    async def body(http):
        async with http.get(f"{url}/refused-1/output") as response:  # no session yet
            assert response.status == 401 and "error" in await response.json()
        await log_in(http, web_daemon)
        async with http.get(f"{web_daemon.url}/api/board") as response:
            seq = (await response.json())["seq"]
        for path, headers, status in cases:
            async with http.get(url + path, headers=headers) as response:
                answer = await response.json()
                assert (response.status, sorted(answer)) == (status, ["error"]), (path, headers, answer)
        async with http.get(f"{url}/refused-1/output?offset={size}") as response:  # the end itself is fine
            assert response.status == 200
        async with http.get(f"{web_daemon.url}/api/board") as response:
            assert (await response.json())["seq"] == seq  # a read writes nothing

    run(body)
    claim.complete(b"ok")
    mate.close()


def test_the_stream_sends_what_is_stored_follows_appends_and_ends_with_the_attempt(web_daemon):
    mate, claim = claimed(web_daemon, "stream-1")
    mate.append(claim, b"first\n")
    mate.append(claim, b"second\n")

    async def body(http):
        await log_in(http, web_daemon)
        async with http.get(f"{web_daemon.url}/api/tasks/stream-1/output") as stream:
            assert (stream.status, stream.headers["Content-Type"]) == (200, "text/event-stream"), await stream.text()
            assert stream.headers["Cache-Control"] == "no-store"
            # What is stored comes in one read (a chunk is up to 64 KiB, whatever the appends were).
            first = await read_events(stream, 2)
            assert first == [
                ("start", "", {"attempt": 1, "offset": 0, "omitted": 0}),
                ("output", "1:13", {"text": "first\nsecond\n"}),
            ]
            await asyncio.to_thread(mate.append, claim, b"third\n")
            assert await read_events(stream, 1) == [("output", "1:19", {"text": "third\n"})]
            await asyncio.to_thread(claim.complete, b"ok")
            assert await read_events(stream) == [("end", "1:19", {"attempt": 1, "offset": 19})]
        # An ended attempt's stream sends it all and ends at once.
        async with http.get(f"{web_daemon.url}/api/tasks/stream-1/output?offset=6") as stream:
            rest = await read_events(stream)
        assert text_of(rest) == "second\nthird\n" and rest[-1][0] == "end"

    run(body)
    mate.close()


def test_a_stream_resumed_at_its_last_id_skips_nothing_repeats_nothing_and_splits_no_character(web_daemon):
    mate, claim = claimed(web_daemon, "resume-1")
    mate.append(claim, b"ab\xe2\x82")  # "ab" and two bytes of a euro sign

    async def body(http):
        await log_in(http, web_daemon)
        url = f"{web_daemon.url}/api/tasks/resume-1/output"
        async with http.get(url) as stream:
            first = await read_events(stream, 2)
        assert first[1] == ("output", "1:2", {"text": "ab"})  # the half character waits
        await asyncio.to_thread(mate.append, claim, b"\xac!")
        async with http.get(url, headers={"Last-Event-ID": first[1][1]}) as stream:
            resumed = await read_events(stream, 2)
        assert resumed == [("start", "", {"attempt": 1, "offset": 2, "omitted": 0}), ("output", "1:6", {"text": "€!"})]

    run(body)
    claim.complete(b"ok")
    mate.close()


def test_a_long_output_starts_at_its_last_256_kib_on_a_character_boundary(web_daemon):
    mate, claim = claimed(web_daemon, "window-1")
    # The window's first byte falls inside the euro sign: the rest of it is not shown.
    before, after = b"a" * 40_000, b"b" * (256 * 1024 - 2)
    whole = before + "€".encode() + after
    for start in range(0, len(whole), 64 * 1024):
        mate.append(claim, whole[start : start + 64 * 1024])

    async def body(http):
        await log_in(http, web_daemon)
        async with http.get(f"{web_daemon.url}/api/tasks/window-1/output") as stream:
            events = await read_events(stream, 1)
            while len(text_of(events)) < len(after):  # in chunks of at most 64 KiB
                events += await read_events(stream, 1)
        assert events[0] == ("start", "", {"attempt": 1, "offset": len(before) + 1, "omitted": len(before) + 1})
        assert text_of(events) == after.decode()
        assert events[-1][1] == f"1:{len(whole)}"

    run(body)
    claim.complete(b"ok")
    mate.close()


def test_a_viewer_reads_output_and_its_stream_ends_when_it_is_removed(web_daemon):
    mate, claim = claimed(web_daemon, "viewed-1")
    mate.append(claim, b"for viewers too\n")
    token = web_daemon.lead.add_viewer("output-reader")

    async def body(http):
        await log_in(http, web_daemon, token)
        async with http.get(f"{web_daemon.url}/api/tasks/viewed-1/output") as stream:
            assert text_of(await read_events(stream, 2)) == "for viewers too\n"
            await asyncio.to_thread(web_daemon.lead.remove_viewer, "output-reader")
            async with asyncio.timeout(5):
                assert await stream.content.read() == b""  # ended, not only quiet

    run(body)
    claim.complete(b"ok")
    mate.close()


def test_a_reader_that_disconnects_leaves_no_follower_behind(web_daemon):
    mate, claim = claimed(web_daemon, "leaving-1")
    mate.append(claim, b"still running\n")

    async def body(http):
        await log_in(http, web_daemon)
        await until_outputs_open(http, web_daemon, 0)  # earlier tests' streams, closed
        streams = [await http.get(f"{web_daemon.url}/api/tasks/leaving-1/output") for _ in range(3)]
        for stream in streams:
            await read_events(stream, 2)
        assert await outputs_open(http, web_daemon) == 3
        for stream in streams:
            stream.close()
        await until_outputs_open(http, web_daemon, 0)  # the followers gone with their readers

    run(body)
    claim.complete(b"ok")
    mate.close()
