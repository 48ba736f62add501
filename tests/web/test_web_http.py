"""The web board over plain HTTP (aiohttp's client against a real daemon): every bad
input the board refuses, its login and session rules, its answer headers, the event
stream's resume, and the viewer credential's limits on gRPC."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import socket
import ssl
import time
from typing import Any

import aiohttp
import grpc
import pytest
import yarl
from google.protobuf import empty_pb2

import corral
from corral.v1 import corral_pb2 as pb
from tests.support.daemons import start_refused
from tests.support.teammates import TeammateThread
from tests.support.waiting import wait_until
from tests.web.board_support import WebDaemon, run, self_signed, start_web_daemon, stop_web_daemon, watch_log

pytestmark = pytest.mark.timeout(60)

CSP = "default-src 'self'; script-src 'self'; object-src 'none'; frame-ancestors 'none'; base-uri 'none'"
# Every answer body this module saw, searched for tokens at the end.
SEEN: list[str] = []
# Every credential minted in this module, searched for at the end.
MINTED: list[str] = []


async def fetch(http: aiohttp.ClientSession, method: str, url: str, **kwargs: Any) -> tuple[int, Any, str]:
    async with http.request(method, url, allow_redirects=False, **kwargs) as response:
        text = await response.text()
        SEEN.append(text)
        SEEN.extend(f"{k}: {v}" for k, v in response.headers.items())
        return response.status, response.headers, text


async def log_in(http: aiohttp.ClientSession, daemon: WebDaemon, token: str) -> int:
    status, _, _ = await fetch(http, "POST", f"{daemon.url}/login", json={"token": token})
    return status


# ---------------------------------------------------------------- unauthenticated


def test_without_a_session_the_api_answers_401_and_pages_redirect_to_login(web_daemon):
    url = web_daemon.url

    async def body(http):
        for path in ("/api/board", "/api/events", "/api/history", "/api/tasks", "/api/tasks/x"):
            status, headers, text = await fetch(http, "GET", url + path)
            assert (status, headers["Content-Type"].split(";")[0]) == (401, "application/json"), path
        status, headers, _ = await fetch(http, "GET", url + "/")
        assert (status, headers["Location"]) == (302, "/login")
        status, _, text = await fetch(http, "GET", url + "/login")
        assert status == 200 and "login-form" in text
        http.cookie_jar.update_cookies({"corral_session": "not-a-session"})
        assert (await fetch(http, "GET", url + "/api/board"))[0] == 401

    run(body)


def test_bad_tokens_and_a_teammates_token_do_not_log_in(web_daemon):
    mate = web_daemon.lead.add_teammate("worker-not-viewer")
    MINTED.append(mate.token)

    async def body(http):
        for token in ("", "nonsense", web_daemon.token + "x", mate.token):
            assert await log_in(http, web_daemon, token) == 401
        assert (await fetch(http, "GET", web_daemon.url + "/api/board"))[0] == 401

    run(body, peer="127.0.0.3")


def test_the_session_cookie_is_httponly_strict_and_12_hours(web_daemon):
    async def body(http):
        async with http.post(f"{web_daemon.url}/login", json={"token": web_daemon.token}) as response:
            assert response.status == 200
            cookie = response.headers["Set-Cookie"]
        parts = {p.strip().split("=")[0].lower(): p.strip() for p in cookie.split(";")}
        assert "httponly" in parts and parts["samesite"] == "SameSite=Strict" and parts["path"] == "Path=/"
        assert 43_000 <= int(parts["max-age"].split("=")[1]) <= 43_200
        assert "secure" not in parts  # plain HTTP on loopback; under TLS it is Secure
        assert web_daemon.token not in cookie

    run(body)


def test_answers_carry_the_security_headers_and_api_answers_are_not_stored(web_daemon):
    async def body(http):
        await log_in(http, web_daemon, web_daemon.token)
        for path in ("/", "/login", "/api/board", "/static/board.js", "/api/nope"):
            status, headers, _ = await fetch(http, "GET", web_daemon.url + path)
            assert headers["Content-Security-Policy"] == CSP, path
            assert headers["X-Content-Type-Options"] == "nosniff"
            assert headers["Referrer-Policy"] == "no-referrer"
        assert (await fetch(http, "GET", web_daemon.url + "/api/board"))[1]["Cache-Control"] == "no-store"
        async with http.get(web_daemon.url + "/api/events") as stream:
            assert stream.headers["Cache-Control"] == "no-store"
            assert stream.headers["Content-Type"] == "text/event-stream"

    run(body)


# ---------------------------------------------------------------- hardening


def test_a_host_not_allowed_gets_421(web_daemon):
    port = web_daemon.url.rsplit(":", 1)[1]

    async def body(http):
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.nip.io", ""):
            status, _, _ = await fetch(http, "GET", web_daemon.url + "/login", headers={"Host": host})
            assert status == 421, host
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):
            assert (await fetch(http, "GET", web_daemon.url + "/login", headers={"Host": host}))[0] == 200, host

    run(body)


def test_every_write_in_read_only_mode_gets_405(web_daemon):
    async def body(http):
        await log_in(http, web_daemon, web_daemon.token)
        for method, path in (
            ("POST", "/api/board"),
            ("PUT", "/"),
            ("DELETE", "/api/tasks/x"),
            ("PATCH", "/api/board"),
            ("POST", "/api/actions/cancel-task"),
            ("POST", "/api/actions/decide-plan"),
            ("POST", "/api/actions/answer-question"),
            ("POST", "/api/actions/review-task"),
            ("POST", "/api/actions/decide-proposals"),
        ):
            status, headers, _ = await fetch(http, method, web_daemon.url + path, json={})
            assert status == 405 and headers["Allow"] == "GET, HEAD", (method, path)

    run(body)


def test_a_budget_past_int64_gets_400_naming_the_field_and_writes_nothing(tmp_path):
    daemon = start_web_daemon(tmp_path / "state", ["--web-actions"])
    try:
        daemon.lead.add_teammate("spender")

        def set_budget(*bodies: dict[str, int]) -> list[tuple[int, str]]:
            async def body(http):
                assert await log_in(http, daemon, daemon.token) == 200
                csrf = json.loads((await fetch(http, "GET", f"{daemon.url}/api/board"))[2])["session"]["csrf"]
                headers = {"Origin": daemon.url, "X-Corral-CSRF": csrf}
                url = f"{daemon.url}/api/actions/set-budget"
                answers = []
                for sent in bodies:
                    status, _, text = await fetch(
                        http, "POST", url, json={"teammate": "spender", **sent}, headers=headers
                    )
                    answers.append((status, json.loads(text).get("error", "")))
                return answers

            return run(body)

        events = watch_log(daemon.lead)
        too_big = [{field: value} for field in ("max_tokens", "max_cost_micros") for value in (2**70, 2**63)]
        for sent, (status, error) in zip(too_big, set_budget(*too_big), strict=True):
            (field,) = sent
            assert status == 400 and error.startswith(f"{field}:"), (sent, status, error)
        assert watch_log(daemon.lead) == events  # nothing written
        assert set_budget({"max_tokens": 2**63 - 1}) == [(200, "")]  # the largest int64 is a budget
        spender = next(t for t in daemon.lead.list_teammates() if t.name == "spender")
        assert spender.budget.max_tokens == 2**63 - 1
    finally:
        stop_web_daemon(daemon)


def test_oversized_urls_and_headers_get_414_and_431(web_daemon):
    async def body(http):
        assert (await fetch(http, "GET", web_daemon.url + "/login?x=" + "a" * 5000))[0] == 414
        assert (await fetch(http, "GET", web_daemon.url + "/login", headers={"X-Big": "b" * 17_000}))[0] == 431
        many = {f"X-H{i}": "c" * 200 for i in range(90)}
        assert (await fetch(http, "GET", web_daemon.url + "/login", headers=many))[0] == 431

    run(body)


def test_bad_after_values_get_400_and_an_unknown_task_404(web_daemon):
    async def body(http):
        await log_in(http, web_daemon, web_daemon.token)
        for after in ("abc", "-1", "1.5", "9" * 30, "999999999"):
            assert (await fetch(http, "GET", f"{web_daemon.url}/api/events?after={after}"))[0] == 400, after
        status, _, _ = await fetch(http, "GET", web_daemon.url + "/api/events", headers={"Last-Event-ID": "x"})
        assert status == 400
        assert (await fetch(http, "GET", web_daemon.url + "/api/tasks?limit=0"))[0] == 400
        for query in ("before=abc", "before=-1", "before=999999999", "limit=0", "limit=501"):
            assert (await fetch(http, "GET", f"{web_daemon.url}/api/history?{query}"))[0] == 400, query
        status, _, text = await fetch(http, "GET", f"{web_daemon.url}/api/history?before=1")
        assert (status, json.loads(text)) == (200, {"events": [], "older": None})
        assert (await fetch(http, "GET", web_daemon.url + "/api/tasks/no-such-task"))[0] == 404

    run(body)


def test_past_five_failed_logins_a_minute_the_next_failures_get_429(web_daemon):
    async def body(http):
        for _ in range(5):
            assert await log_in(http, web_daemon, "wrong") == 401
        status, headers, _ = await fetch(http, "POST", f"{web_daemon.url}/login", json={"token": "wrong"})
        assert status == 429 and 1 <= int(headers["Retry-After"]) <= 60
        status, _, _ = await fetch(
            http, "POST", f"{web_daemon.url}/login/ticket", headers={"Authorization": "Bearer x"}
        )
        assert status == 429
        assert await log_in(http, web_daemon, web_daemon.token) == 200  # a good credential is never refused

    run(body, peer="127.0.0.2")


def test_logging_out_ends_the_session(web_daemon):
    async def body(http):
        await log_in(http, web_daemon, web_daemon.token)
        assert (await fetch(http, "GET", f"{web_daemon.url}/api/board"))[0] == 200
        value = http.cookie_jar.filter_cookies(yarl.URL(web_daemon.url))["corral_session"].value
        logout = f"{web_daemon.url}/logout"
        assert (await fetch(http, "POST", logout, headers={"Origin": "http://evil.example"}))[0] == 403
        assert (await fetch(http, "POST", logout, headers={"Origin": web_daemon.url}))[0] == 200
        http.cookie_jar.clear()
        status, _, _ = await fetch(
            http, "GET", f"{web_daemon.url}/api/board", headers={"Cookie": f"corral_session={value}"}
        )
        assert status == 401

    run(body)


def test_a_one_time_ticket_logs_in_once(web_daemon):
    async def body(http):
        auth = {"Authorization": f"Bearer {web_daemon.token}"}
        status, _, text = await fetch(http, "POST", f"{web_daemon.url}/login/ticket", headers=auth)
        ticket = json.loads(text)["ticket"]
        assert status == 200
        assert (await fetch(http, "POST", f"{web_daemon.url}/login", json={"ticket": ticket}))[0] == 200
        assert (await fetch(http, "GET", f"{web_daemon.url}/api/board"))[0] == 200
        status, _, text = await fetch(http, "POST", f"{web_daemon.url}/login", json={"ticket": ticket})
        assert status == 401
        # The second opening of a link says what happened and where a new one comes from.
        state_dir = web_daemon.process.ready["state_dir"]
        assert json.loads(text)["error"] == (
            "this login link was already used or has expired (a link opens one session, within 2 minutes);"
            f" get a new one with: corral web --state-dir {state_dir}"
        )

    run(body, peer="127.0.0.4")


# ---------------------------------------------------------------- the event stream


async def read_events(stream: aiohttp.ClientResponse, count: int, within_s: float = 20) -> list[tuple[str, str]]:
    """The next `count` board events' (id, data) from an SSE stream, within `within_s`
    (stats events and heartbeats keep a stream busy: the bound is on the whole read)."""
    found: list[tuple[str, str]] = []
    event: dict[str, str] = {}
    deadline = asyncio.get_running_loop().time() + within_s
    while len(found) < count:
        left = deadline - asyncio.get_running_loop().time()
        line = (await asyncio.wait_for(stream.content.readline(), max(left, 0.01))).decode().rstrip("\r\n")
        if line == "":
            if event.get("event") == "board":
                found.append((event["id"], event["data"]))
            event = {}
        elif not line.startswith(":"):
            key, _, value = line.partition(": ")
            event[key] = value
    return found


def test_the_stream_resumes_after_its_last_event_id_with_no_gap(web_daemon):
    lead = web_daemon.lead
    lead.create_tasks([corral.TaskSpec(id=f"r{i}", title=f"resume {i}") for i in range(6)])
    log = watch_log(lead, 0, quiet_s=0.5)

    async def body(http):
        await log_in(http, web_daemon, web_daemon.token)
        async with http.get(f"{web_daemon.url}/api/events?after=0") as stream:
            first = await read_events(stream, 3)
        resume_from = first[-1][0]
        async with http.get(f"{web_daemon.url}/api/events", headers={"Last-Event-ID": resume_from}) as stream:
            rest = await read_events(stream, len(log) - 3)
        return [int(i) for i, _ in first + rest]

    assert run(body) == log


def test_a_snapshot_and_the_events_after_its_seq_reproduce_the_final_board(web_daemon):
    lead = web_daemon.lead
    lead.create_tasks(
        [
            corral.TaskSpec(id=f"churn-{i}", title=f"churn {i}", depends_on=[f"churn-{i - 20}"] if i >= 20 else [])
            for i in range(300)
        ]
    )
    mates = [TeammateThread(lead, f"churner-{i}", lambda task: b"ok", max_idle_polls=6).start() for i in range(20)]
    MINTED.extend(mate.new.token for mate in mates)

    def completed() -> int:
        return lead.get_stats().tasks_by_state.get(corral.TaskState.COMPLETED, 0)

    wait_until(lambda: completed() >= 60, 20, "the churn under way")

    async def snapshot(http):
        await log_in(http, web_daemon, web_daemon.token)
        return json.loads((await fetch(http, "GET", f"{web_daemon.url}/api/board"))[2])

    snap = run(snapshot)
    for mate in mates:
        mate.result(timeout=60)
    # The board is still once every churner is offline: a snapshot then marks the log's end.
    wait_until(
        lambda: all(t.status is corral.TeammateStatus.OFFLINE for t in lead.list_teammates()), 20, "churners offline"
    )
    log = watch_log(lead, snap["seq"], through_seq=run(snapshot)["seq"])
    assert log, "the churn went on after the snapshot"

    async def replay(http):
        await log_in(http, web_daemon, web_daemon.token)
        async with http.get(f"{web_daemon.url}/api/events?after={snap['seq']}") as stream:
            return await read_events(stream, len(log))

    board = {task["id"]: task for task in snap["tasks"]}
    for _, data in run(replay):
        event = json.loads(data)
        if event["kind"] == "task":
            board[event["task"]["id"]] = event["task"]
    final = {t.id: (t.state.name, t.owner, t.attempt) for t in lead.list_tasks()}
    assert {i: (t["state"], t["owner"], t["attempt"]) for i, t in board.items()} == final


def test_a_revoked_viewers_stream_is_closed_by_the_revocation(web_daemon):
    lead = web_daemon.lead
    token = lead.add_viewer("leaving")
    MINTED.append(token)

    async def body(http):
        assert await log_in(http, web_daemon, token) == 200
        async with http.get(f"{web_daemon.url}/api/events") as stream:
            await stream.content.readline()  # the stream is open
            await asyncio.to_thread(lead.remove_viewer, "leaving")
            while await asyncio.wait_for(stream.content.readline(), 5):  # ends, not only goes quiet
                pass
        assert (await fetch(http, "GET", f"{web_daemon.url}/api/board"))[0] == 401

    run(body)
    assert web_daemon.lead.list_viewers() == [] or all(v.name != "leaving" for v in web_daemon.lead.list_viewers())


def test_a_board_that_stops_reading_is_disconnected_not_buffered(tmp_path):
    """The socket's buffers and one page are all a stalled board holds: past the send
    timeout its stream ends (and its browser would resume from its last id)."""
    daemon = start_web_daemon(tmp_path / "state")
    try:

        async def cookie(http):
            async with http.post(f"{daemon.url}/login", json={"token": daemon.token}) as response:
                return response.cookies["corral_session"].value

        session = run(cookie)
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
        stalled.connect(("127.0.0.1", int(daemon.url.rsplit(":", 1)[1])))
        stalled.sendall(
            f"GET /api/events HTTP/1.1\r\nHost: {daemon.host}\r\nCookie: corral_session={session}\r\n\r\n".encode()
        )
        assert stalled.recv(64).startswith(b"HTTP/1.1 200")  # then it reads no more

        def boards_open() -> int:
            return run(lambda http: _boards_open(http, daemon))

        assert boards_open() == 1
        title = "x" * 190
        for batch in range(3):  # about 18 MB of events, far past any socket buffer
            daemon.lead.create_tasks([corral.TaskSpec(id=f"s{batch}-{i}", title=title) for i in range(10_000)])
        wait_until(lambda: boards_open() == 0, 30, "the stalled board's stream ended")
        stalled.close()
    finally:
        stop_web_daemon(daemon)


async def _boards_open(http, daemon) -> int:
    await log_in(http, daemon, daemon.token)
    return json.loads((await fetch(http, "GET", f"{daemon.url}/api/board"))[2])["stats"]["boards_open"]


def test_past_64_open_boards_the_next_gets_503(web_daemon):
    async def body(http):
        await log_in(http, web_daemon, web_daemon.token)

        async def boards_open() -> int:
            return json.loads((await fetch(http, "GET", f"{web_daemon.url}/api/board"))[2])["stats"]["boards_open"]

        deadline = time.monotonic() + 5
        while await boards_open() and time.monotonic() < deadline:  # earlier tests' streams, closed
            await asyncio.sleep(0.05)
        streams = []
        try:
            while len(streams) < 64:
                stream = await http.get(f"{web_daemon.url}/api/events")
                assert stream.status == 200, len(streams)
                streams.append(stream)
            status, headers, _ = await fetch(http, "GET", f"{web_daemon.url}/api/events")
            assert status == 503 and int(headers["Retry-After"]) > 0
        finally:
            for stream in streams:
                stream.close()

    run(body)


# ---------------------------------------------------------------- the viewer on gRPC


def _every_rpc() -> list[tuple[str, Any, bool]]:
    calls = []
    for service in pb.DESCRIPTOR.services_by_name.values():
        for method in service.methods:
            request = getattr(pb, method.input_type.name)
            calls.append((f"/{service.full_name}/{method.name}", request, method.server_streaming))
    return calls


def test_a_viewer_may_only_read_the_board_on_grpc(web_daemon):
    token = web_daemon.lead.add_viewer("reader")
    MINTED.append(token)
    reads = {
        f"/corral.v1.BoardService/{name}"
        for name in ("GetTask", "ListTasks", "ListTeammates", "GetStats", "GetIdentity", "TailOutput", "GetArtifact")
    }
    metadata = (("authorization", f"Bearer {token}"),)
    path = web_daemon.process.address
    with grpc.insecure_channel(path) as channel:
        refused = []
        for name, request, streaming in _every_rpc():
            call = (channel.unary_stream if streaming else channel.unary_unary)(
                name,
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=empty_pb2.Empty.FromString,
            )
            try:
                answer = call(request(), metadata=metadata, timeout=5)
                if streaming:
                    next(iter(answer))
                code = grpc.StatusCode.OK
            except grpc.RpcError as error:
                code = error.code()
            if name in reads:
                assert code in (grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND), name
            else:
                assert code == grpc.StatusCode.PERMISSION_DENIED, (name, code)
                refused.append(name)
        assert len(refused) == len(_every_rpc()) - len(reads)
    viewer = corral.Lead.connect(path, token)
    try:
        assert isinstance(list(viewer.list_tasks()), list)
        assert viewer.get_identity() == corral.Identity("reader", "viewer")  # any credential may ask
        with pytest.raises(corral.PermissionDenied):
            viewer.send_message("lead", "hi")
    finally:
        viewer.close()


# ---------------------------------------------------------------- serving rules


def _listening_tcp_ports(pid: int) -> list[int]:
    inodes = set()
    for fd in pathlib.Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd) if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in pathlib.Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                ports.append(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_without_web_nothing_listens_on_tcp(tmp_path):
    with corral.Lead.launch(tmp_path / "state") as lead:
        assert lead.pid is not None
        assert _listening_tcp_ports(lead.pid) == []
        assert not (tmp_path / "state" / "web.address").exists()


def test_with_web_the_daemon_listens_where_its_ready_line_says(web_daemon):
    port = int(web_daemon.url.rsplit(":", 1)[1])
    assert _listening_tcp_ports(web_daemon.process.pid) == [port]
    state = pathlib.Path(web_daemon.process.state_dir)
    assert (state / "web.address").read_text().strip() == web_daemon.url


def test_under_tls_the_board_is_https_and_its_cookie_secure(tmp_path):
    cert, key = self_signed(tmp_path)
    daemon = start_web_daemon(tmp_path / "state", ["--tls-cert", str(cert), "--tls-key", str(key)])
    try:
        assert daemon.url.startswith("https://127.0.0.1:")

        async def body(http):
            trust = ssl.create_default_context(cafile=str(cert))
            async with http.post(f"{daemon.url}/login", json={"token": daemon.token}, ssl=trust) as response:
                assert response.status == 200
                cookie = response.headers["Set-Cookie"]
            async with http.get(f"{daemon.url}/api/board", ssl=trust) as response:
                assert response.status == 200
            return cookie

        assert "Secure" in [part.strip() for part in run(body).split(";")]
    finally:
        stop_web_daemon(daemon)


def test_web_on_a_non_loopback_address_without_tls_is_refused(tmp_path):
    status, stderr = start_refused(tmp_path / "state", ["--web", "0.0.0.0:0"])
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert status == 2 and lines == ["corrald: --web on non-loopback '0.0.0.0' requires --tls-cert and --tls-key"]


def test_the_cli_prints_the_board_and_a_one_time_link_and_manages_viewers(web_daemon):
    from click.testing import CliRunner

    from corral.cli import main

    state = ["--state-dir", str(web_daemon.process.state_dir)]
    runner = CliRunner()
    shown = runner.invoke(main, ["web", *state])
    assert shown.exit_code == 0, shown.output
    url, link = shown.stdout.splitlines()[:2]
    assert url == web_daemon.url and link.startswith(f"{url}/login#ticket=corral-ticket-")
    assert web_daemon.token not in shown.output
    added = runner.invoke(main, ["viewers", "add", "cli-viewer", *state])
    token = added.stdout.strip()
    assert added.exit_code == 0 and token.startswith("corral-view-")
    listed = runner.invoke(main, ["viewers", "list", "--json", *state])
    assert "cli-viewer" in [v["name"] for v in json.loads(listed.stdout)] and token not in listed.stdout
    assert run(lambda http: log_in(http, web_daemon, token), peer="127.0.0.5") == 200
    assert runner.invoke(main, ["viewers", "remove", "cli-viewer", *state]).exit_code == 0
    assert run(lambda http: log_in(http, web_daemon, token), peer="127.0.0.5") == 401


# ---------------------------------------------------------------- last: what was seen


def test_no_token_appears_in_any_answer_or_log(web_daemon):
    lead = web_daemon.lead
    tokens = [web_daemon.token, lead.add_viewer("late"), *MINTED]
    assert len(tokens) >= 5  # the lead's, viewers' and a teammate's (this module's tests minted them)
    run(lambda http: log_in(http, web_daemon, tokens[1]))
    logs = web_daemon.log_file.read_text()
    for token in tokens:
        assert token not in logs
        assert not [text for text in SEEN if token in text]
    assert SEEN  # the module's answers were recorded
