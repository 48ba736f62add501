"""Helpers for the web board tests: a real corrald serving the web board (`--web 127.0.0.1:0`, the URL read from its
ready line), the Lead connected to it, and a Chromium driven by Playwright.

The browser is the machine's own (`/usr/bin/chromium`, put there by `make test`'s
browser step); Playwright never downloads one. One browser per module.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import pathlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import aiohttp
import grpc

import corral
from corral._launch import DaemonProcess, launch_daemon
from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc
from tests.support.tls import self_signed as _self_signed
from tests.support.waiting import wait_until

ARTIFACTS = pathlib.Path(__file__).resolve().parents[1] / "artifacts" / "web"
VIEWPORT = {"width": 1280, "height": 800}
ARTIFACT_PART_BYTES = 1024 * 1024  # the most one PutArtifact data message may carry


@dataclasses.dataclass
class WebDaemon:
    process: DaemonProcess
    lead: corral.Lead
    url: str
    token: str
    log_file: pathlib.Path

    @property
    def host(self) -> str:
        return self.url.removeprefix("http://").removeprefix("https://")


def start_web_daemon(
    state_dir: pathlib.Path,
    extra_args: Sequence[str] = (),
    env: dict[str, str | None] | None = None,
    web: str = "127.0.0.1:0",
) -> WebDaemon:
    log_file = state_dir.parent / f"{state_dir.name}.log"
    process = launch_daemon(
        state_dir,
        extra_args=["--web", web, *extra_args],
        log_file=log_file,
        env={"CORRAL_FAILPOINTS": None, **(env or {})},
    )
    url = str(process.ready["web"])
    token = process.read_lead_token()
    lead = corral.Lead.connect(process.address, token)
    return WebDaemon(process, lead, url, token, log_file)


def stop_web_daemon(daemon: WebDaemon) -> None:
    daemon.lead.close()
    daemon.process.stop()


def open_board(browser, daemon: WebDaemon, token: str | None = None, ready_timeout_s: float = 10):
    """A page in a context of its own, logged in through the fragment link, showing the live board."""
    page = browser.new_context(viewport=VIEWPORT).new_page()
    page.set_default_timeout(10_000)
    page.add_init_script(
        "window.__csp = [];"
        " document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective));"
    )
    page.goto(f"{daemon.url}/login#token={token or daemon.token}")
    page.wait_for_selector("body[data-ready='true']", timeout=ready_timeout_s * 1000)
    page.wait_for_selector("#conn[data-conn='live']")
    return page


def screenshot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def watch_log(
    lead: corral.Lead, after_seq: int = 0, quiet_s: float = 1.0, *, through_seq: int | None = None
) -> list[int]:
    """The seqs of the Watch log after `after_seq`. With `through_seq` (a seq the board is known
    to have reached, e.g. a snapshot's), read up to it: the log has no end, and a marker cannot be
    cut short by a slow machine. Without, read until the board is quiet for `quiet_s` (the
    stream's deadline), for callers whose boards have stopped moving."""
    seqs: list[int] = []
    if through_seq is not None and through_seq <= after_seq:
        return seqs
    try:
        for event in lead.watch(after_seq, timeout=quiet_s if through_seq is None else 30.0):
            seqs.append(event.seq)
            if through_seq is not None and event.seq >= through_seq:
                return seqs
    except TimeoutError:
        if through_seq is not None:
            reached = seqs[-1] if seqs else after_seq
            raise AssertionError(f"the Watch log stopped at seq {reached}, short of {through_seq}") from None
    return seqs


def run(body: Callable[[aiohttp.ClientSession], Awaitable[Any]], peer: str = "127.0.0.1") -> Any:
    """`body` with a fresh client session (no cookies) connecting from loopback address `peer`
    (the login limit counts per peer, so a test that spends it takes one of its own)."""

    async def main() -> Any:
        connector = aiohttp.TCPConnector(local_addr=(peer, 0), limit=100)
        async with aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            return await body(http)

    # A thread of its own: Playwright's sync API keeps an event loop running on this one.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, main()).result()


@dataclasses.dataclass
class ActionSession:
    """A web session posting one of the board's actions (`/api/actions/NAME`) as the task
    drawer does: with its CSRF token and the board's Origin, unless told otherwise."""

    http: aiohttp.ClientSession
    board_url: str
    action: str
    csrf: str = ""

    async def log_in(self, token: str) -> None:
        """Logs in with `token` (the session is that credential's from now on) and keeps its CSRF token."""
        async with self.http.post(f"{self.board_url}/login", json={"token": token}) as response:
            assert response.status == 200
        self.csrf = (await self.board())["session"]["csrf"]

    async def board(self) -> dict[str, Any]:
        async with self.http.get(f"{self.board_url}/api/board") as response:
            return json.loads(await response.text())

    async def seq(self) -> int:
        """The board's last event: unchanged when nothing was written."""
        return (await self.board())["seq"]

    async def post(self, sent: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        """The action's status and its JSON answer (`{}` when it has none)."""
        if headers is None:
            headers = {"Origin": self.board_url, "X-Corral-CSRF": self.csrf}
        async with self.http.post(f"{self.board_url}/api/actions/{self.action}", json=sent, headers=headers) as reply:
            text = await reply.text()
            return reply.status, json.loads(text) if text else {}


def assert_state_shown(page, task_id: str, state: str, colour: str):
    """A task in `state` (the wire's name, e.g. "IN_REVIEW") is counted and coloured like
    every state: its row in the tasks table, the header's count, the graph, the legend.
    Returns its row; leaves the page on the tasks tab."""
    shown, words = state.lower(), state.lower().replace("_", " ")
    page.click("button[data-tab='tasks']")
    row = page.locator(f"#tasks tr[data-task-id='{task_id}']")
    wait_until(lambda: row.get_attribute("data-state") == state, 10, f"the row {state}")
    assert row.get_attribute("data-shown") == shown
    assert row.locator(f".state.{shown}").inner_text() == words
    assert page.locator(f"#counts .count.{shown}").inner_text() == f"1 {words}"
    # A task new to the page is drawn with the next layout (at most one a second).
    drawn = f"window.corral.graphColor('{task_id}')"
    wait_until(lambda: page.evaluate(drawn) == colour, 10, f"the node drawn {colour}")
    swatch = page.eval_on_selector(f"#counts .count.{shown}", "n => getComputedStyle(n).getPropertyValue('--swatch')")
    assert swatch.strip() == colour
    assert words in page.locator(".legend").inner_text()
    return row


class Mate:
    """A teammate through the SDK, for the gate tests: its claims from `idle`, completed,
    asked about (`Claim.ask`) or, a review's, decided (`Claim.decide`)."""

    def __init__(self, daemon: WebDaemon, name: str, roles: list[str]) -> None:
        self.token = daemon.lead.add_teammate(name, roles=roles).token
        self.address = daemon.lead.address
        self.teammate = corral.Teammate.connect(daemon.lead.address, self.token)

    def claim(self) -> corral.Claim:
        """The first claim of a new stream (which is then closed; the claim stays held)."""
        with contextlib.closing(self.teammate.idle(max_idle_polls=40, poll_interval=0.05)) as events:
            for event in events:
                if isinstance(event, corral.Claim):
                    return event
        raise AssertionError("the stream ended with no claim")

    def ask(self, claim: corral.Claim, question: str) -> corral.Task:
        return claim.ask(question)

    def complete(self, claim: corral.Claim, result: bytes) -> None:
        claim.complete(result)

    def review(self, claim: corral.Claim, approve: bool, feedback: str = "") -> None:
        claim.decide(corral.Approve(feedback) if approve else corral.Reject(feedback))

    def propose(
        self, *specs: pb.TaskSpec, claim: corral.Claim | None = None, block: bool = False
    ) -> pb.ProposeTasksResponse:
        """`TeammateService.ProposeTasks` on the wire with this teammate's credential, from
        `claim` when given (splitting its task with `block`)."""
        request = pb.ProposeTasksRequest(
            tasks=specs,
            task_id=claim.task.id if claim else "",
            claim_token=claim.token if claim else "",
            block_claimed_task=block,
        )
        with grpc.insecure_channel(self.address) as channel:
            stub = pb_grpc.TeammateServiceStub(channel)
            return stub.ProposeTasks(request, metadata=(("authorization", f"Bearer {self.token}"),), timeout=10)

    def append(self, claim: corral.Claim, data: bytes) -> int:
        """`TeammateService.AppendOutput` on the wire, one append of `data` to the claim's
        output (the SDK buffers; a test needs each append as sent): the output's size after."""
        request = pb.AppendOutputRequest(task_id=claim.task.id, claim_token=claim.token, data=data)
        with grpc.insecure_channel(self.address) as channel:
            stub = pb_grpc.TeammateServiceStub(channel)
            return stub.AppendOutput(request, metadata=(("authorization", f"Bearer {self.token}"),), timeout=10).size

    def put_artifact(self, claim: corral.Claim, name: str, data: bytes, media_type: str = "") -> pb.Artifact:
        """`TeammateService.PutArtifact` on the wire: the header, then `data` in parts of 1 MiB."""

        def requests() -> Iterator[pb.PutArtifactRequest]:
            header = pb.ArtifactHeader(task_id=claim.task.id, claim_token=claim.token, name=name, media_type=media_type)
            yield pb.PutArtifactRequest(header=header)
            for start in range(0, len(data), ARTIFACT_PART_BYTES):
                yield pb.PutArtifactRequest(data=data[start : start + ARTIFACT_PART_BYTES])

        with grpc.insecure_channel(self.address) as channel:
            stub = pb_grpc.TeammateServiceStub(channel)
            return stub.PutArtifact(requests(), metadata=(("authorization", f"Bearer {self.token}"),), timeout=60)

    def close(self) -> None:
        self.teammate.close()


def board_get(daemon: WebDaemon, path: str) -> Any:
    """`path` of the board's HTTP API, read by a fresh session logged in as the Lead."""

    async def body(http):
        async with http.post(f"{daemon.url}/login", json={"token": daemon.token}) as response:
            assert response.status == 200
        async with http.get(f"{daemon.url}{path}") as response:
            assert response.status == 200, path
            return json.loads(await response.text())

    return run(body)


def task_state(daemon: WebDaemon, task_id: str) -> str:
    return board_get(daemon, f"/api/tasks/{task_id}")["state"]


def self_signed(directory: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """The web tests' certificate for 127.0.0.1 and localhost (tests/support/tls.py)."""
    return _self_signed(directory, "corral-web-test")
