"""Section 7: what the web board costs and how live it is (#18).

* Cycles: Session claim -> complete cycles/s at `web_teammates` teammates on a
  daemon serving `--web`, with no board open and with `web_boards` boards open
  (SSE clients logged in as the lead, reading every event). Rounds alternate;
  the ratio with/without is taken per round. The daemon's RSS is read with the
  boards idle and open, for the memory one board costs.
* Commit -> page update: in Chromium (the machine's, through Playwright), one
  CreateTasks of one task at a time; the time from just before the call to the
  moment the page's table shows the new row (a MutationObserver's Date.now(),
  after the page's frame batching), one sample after the other.
* First render: a board of each of `web_render_sizes` tasks opened in a fresh
  page, from navigation to the page's ready mark (snapshot, tables, graph
  layout; past 2,000 tasks the frontier).
* Page weight: the bytes of the page's own files and of the vendored scripts,
  as served.

Browser figures are recorded as unavailable when no Chromium or Playwright is found.
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import threading
import time
import urllib.request

from corral.v1 import corral_pb2 as pb
from tests import support
from tests.support.browser import CHROMIUM_FLAGS, chromium_path

from . import e2e, teamworker
from .daemon import Daemon, Lead, run_async
from .stats import latency_fields, summary

WEB = ("--web", "127.0.0.1:0")
STATIC = pathlib.Path(__file__).resolve().parents[1] / "server" / "corrald" / "web" / "static"
PAGE_FILES = ("index.html", "board.js", "board.css")
VENDOR_FILES = ("vendor/cytoscape.min.js", "vendor/cytoscape-dagre.min.js")


# ---------------------------------------------------------------- open boards (SSE clients)


class Boards:
    """`count` boards reading the event stream on a loop of their own, until `close`."""

    def __init__(self, url: str, token: str, count: int) -> None:
        self.url, self.token, self.count = url, token, count
        self.events = 0
        self.heard = 0  # boards that have received their first line (the snapshot's stats)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="bench-boards")
        self._tasks: list[asyncio.Future] = []

    def __enter__(self) -> Boards:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._open_all(), self._loop)
        future.result(timeout=30)
        return self

    async def _open_all(self) -> None:
        import aiohttp  # noqa: PLC0415 (a daemon dependency; only this section needs it here)

        opened = asyncio.Event()
        ready = 0

        async def board() -> None:
            nonlocal ready
            async with aiohttp.ClientSession() as http:
                async with http.post(f"{self.url}/login", json={"token": self.token}) as response:
                    response.raise_for_status()
                async with http.get(f"{self.url}/api/events", timeout=aiohttp.ClientTimeout(total=None)) as stream:
                    ready += 1
                    if ready == self.count:
                        opened.set()
                    first = True
                    async for line in stream.content:
                        if first:
                            self.heard, first = self.heard + 1, False
                        if line.startswith(b"id:"):
                            self.events += 1

        self._tasks = [asyncio.ensure_future(board()) for _ in range(self.count)]
        await asyncio.wait_for(opened.wait(), 30)

    def wait_heard(self, timeout: float = 10.0) -> None:
        """Until every board has received its first line, for at most `timeout` seconds."""
        support.wait_until(lambda: self.heard >= self.count, timeout, "every board's first event")

    def __exit__(self, *exc) -> None:
        async def close_all() -> None:  # cancelled, and their connections closed, before the loop stops
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close_all(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


def _cycles(daemon: Daemon, members, tasks: int, prefix: str, sizes) -> dict:
    e2e._create(daemon, "independent", tasks, prefix)
    tally = teamworker.run_clients(
        "session",
        daemon.address,
        members,
        target=tasks,
        deadline_s=sizes.run_deadline_s,
        processes=sizes.client_processes,
    )
    return {"throughput": tally["throughput"], **latency_fields(tally["latencies"]), "errors": tally["errors"]}


def cycles(sizes, runs: int, log) -> dict:
    rounds = []
    with Daemon(extra_args=WEB) as daemon:
        url = str(daemon.ready["web"])
        members, _ = e2e._setup(daemon, sizes.web_teammates, session=False)
        for index in range(runs):
            without = _cycles(daemon, members, sizes.web_tasks, f"r{index}a-", sizes)
            idle_rss = daemon.rss_mib()  # just before the boards open: what they add, not the round's growth
            with Boards(url, daemon.token, sizes.web_boards) as boards:
                boards.wait_heard()  # each board has its first event: then its memory is steady
                open_rss = daemon.rss_mib()
                with_boards = _cycles(daemon, members, sizes.web_tasks, f"r{index}b-", sizes)
                received = boards.events
            ratio = with_boards["throughput"] / max(without["throughput"], 1e-9)
            rounds.append(
                {
                    "without": without,
                    "with": with_boards,
                    "ratio": ratio,
                    "rss_per_board_mib": (open_rss - idle_rss) / sizes.web_boards,
                    "events_per_board": received / sizes.web_boards,
                }
            )
            log(
                f"web cycles  {sizes.web_teammates} teammates: {without['throughput']:7.0f} cycles/s with no board,"
                f" {with_boards['throughput']:7.0f} with {sizes.web_boards} open ({ratio:.3f}x);"
                f" RSS {rounds[-1]['rss_per_board_mib']:.2f} MiB per board"
            )
    return {
        "teammates": sizes.web_teammates,
        "boards": sizes.web_boards,
        "tasks_per_run": sizes.web_tasks,
        "rounds": rounds,
        "without": summary([r["without"]["throughput"] for r in rounds], "cycles/s"),
        "with": summary([r["with"]["throughput"] for r in rounds], "cycles/s"),
        "ratio": summary([r["ratio"] for r in rounds], "with/without"),
        "rss_per_board_mib": summary([r["rss_per_board_mib"] for r in rounds], "MiB"),
    }


# ---------------------------------------------------------------- the browser


@contextlib.contextmanager
def _browser():
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 (the test extra; optional here)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
        try:
            yield browser
        finally:
            browser.close()


def _page(browser, url: str, token: str):
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    page.goto(f"{url}/login#token={token}")
    page.wait_for_selector("body[data-ready='true']", timeout=120_000)
    page.wait_for_selector("#conn[data-conn='live']", timeout=30_000)
    return page


WATCH_ROWS = """
window.__shown = {};
new MutationObserver((records) => {
  for (const r of records) for (const node of r.addedNodes) {
    const id = node.dataset && node.dataset.taskId;
    if (id && !(id in window.__shown)) window.__shown[id] = Date.now();
  }
}).observe(document.querySelector('#tasks tbody'), { childList: true });
"""


def updates(sizes, log) -> dict:
    import corral  # noqa: PLC0415 (the SDK's sync Lead: one channel for every sample)

    samples = []
    with Daemon(extra_args=WEB) as daemon, _browser() as browser:
        page = _page(browser, str(daemon.ready["web"]), daemon.token)
        page.evaluate(WATCH_ROWS)
        with corral.Lead.connect(daemon.address, daemon.token) as lead:
            # One at a time: each sample's task is created after the last one showed.
            for index in range(sizes.web_update_samples):
                task_id = f"u{index}"
                started = time.time()
                lead.create_tasks([corral.TaskSpec(id=task_id, title=task_id)])
                # A function, not a string: the board's CSP forbids eval.
                page.wait_for_function("(id) => id in window.__shown", arg=task_id, timeout=10_000)
                samples.append(page.evaluate(f"window.__shown['{task_id}']") / 1000 - started)
    figure = latency_fields(samples)
    log(f"web update  commit -> page row: p50 {figure['p50_ms']:.1f} ms  p99 {figure['p99_ms']:.1f} ms")
    return figure


def renders(sizes, log) -> dict:
    found = {}
    for count in sizes.web_render_sizes:
        with Daemon(extra_args=WEB) as daemon:
            run_async(_create_chains(daemon, count))  # before Playwright's loop runs on this thread
            with _browser() as browser:
                found[str(count)] = _first_render(browser, daemon, count, log)
    return found


def _first_render(browser, daemon: Daemon, count: int, log) -> dict:
    started = time.monotonic()
    page = _page(browser, str(daemon.ready["web"]), daemon.token)
    elapsed = time.monotonic() - started
    drawn = page.evaluate("window.corral.tasks.size")
    log(f"web render  {count:>6,} tasks: first render {elapsed:.2f} s ({drawn} drawn)")
    return {"first_render_s": elapsed, "graph_nodes": drawn}


async def _create_chains(daemon: Daemon, count: int) -> None:
    lead = Lead(daemon.address, daemon.token)
    try:
        for start in range(0, count, 10_000):
            specs = [
                pb.TaskSpec(id=f"t{i:06d}", title=f"task {i}", depends_on=[f"t{i - 1:06d}"] if i % 50 else [])
                for i in range(start, min(count, start + 10_000))
            ]
            await lead.create(specs)
    finally:
        await lead.close()


def weight(log) -> dict:
    with Daemon(extra_args=WEB) as daemon:
        url = str(daemon.ready["web"])
        sizes = {}
        for name in (*PAGE_FILES, *VENDOR_FILES):
            path = "/login" if name == "index.html" else f"/static/{name}"
            with urllib.request.urlopen(url + path, timeout=10) as response:  # noqa: S310 (the bench's own daemon)
                sizes[name] = len(response.read())
    page = sum(sizes[n] for n in PAGE_FILES)
    vendored = sum(sizes[n] for n in VENDOR_FILES)
    total = page + vendored
    log(f"web weight  page {page / 1024:.1f} KiB + vendored {vendored / 1024:.1f} KiB = {total / 1024:.1f} KiB")
    return {"files": sizes, "page_bytes": page, "vendored_bytes": vendored, "total_bytes": page + vendored}


def run(sizes, runs: int, log) -> dict:
    result: dict = {"cycles": cycles(sizes, runs, log), "weight": weight(log)}
    try:
        import playwright  # noqa: F401, PLC0415
    except ImportError:
        result["browser"] = {"unavailable": "playwright is not installed (pip install -e '.[test]')"}
        return result
    if chromium_path() is None:
        result["browser"] = {"unavailable": "no chromium on this machine (make browser)"}
        return result
    result["browser"] = {"updates": updates(sizes, log), "renders": renders(sizes, log)}
    return result
