"""`GET /api/events`: the Watch log as server-sent events, live with no polling.

Each stream is the Watch stream's loop (read the log after the last seq sent,
send, wait for the wake hub's "board moved"; the reads of all streams are
shared, see `recent`), written as SSE with `id:` the
event's seq, so the browser's EventSource resumes with `Last-Event-ID` and
misses nothing. Stats go out once a second as a `stats` event, one read for
all streams. What one stream holds unsent is bounded by the socket's buffer:
a write that cannot drain within `SEND_TIMEOUT_S` ends the stream, and the
page resumes from its last id.

Streams are bounded per identity (see config and `slots`): each viewer's, all
viewers' together below the whole, so the lead's board always finds a free slot.
What the feed shares with a drawer's output stream (the slots, the response, the pump's
task and its end) is `sse`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import Sized

from aiohttp import web
from aiohttp_sse import EventSourceResponse

from .. import failpoints
from ..board import Board
from ..credentials import Identity
from ..wake import WakeHub
from . import shapes
from .config import WebConfig
from .guard import json_error
from .recent import RecentEvents
from .sse import RECONNECT_MS, SEND_TIMEOUT_S, SseStreams, resumed_from

STATS_INTERVAL_S = 1.0


class StatsTicker:
    """The board's stats once a second while any stream is open: one read for them all."""

    def __init__(self, board: Board, hub: WakeHub, clients: Sized, outputs: Sized) -> None:
        self._board = board
        self._hub = hub
        self._clients = clients
        self._outputs = outputs
        self.latest = ""
        self.tick = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="corrald-web-stats")

    async def _run(self) -> None:
        while self._clients and not self._hub.closing:
            stats = await self._board.stats()
            shaped = shapes.stats(stats, self._hub.open_streams, len(self._clients), len(self._outputs))
            self.latest = json.dumps(shaped)
            tick, self.tick = self.tick, asyncio.Event()
            tick.set()
            await asyncio.sleep(STATS_INTERVAL_S)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class Feed:
    def __init__(self, board: Board, hub: WakeHub, config: WebConfig, outputs: Sized) -> None:
        self._board = board
        self._hub = hub
        self._streams = SseStreams(config, "boards", "board event stream", "corrald-web-feed", drop_on_failure=True)
        # The drawers' output streams are counted in the stats (see `output`).
        self._stats = StatsTicker(board, hub, self._streams, outputs)
        self._recent = RecentEvents(board, hub)

    async def history(self, before: int, limit: int) -> tuple[list[tuple[int, str]], int | None]:
        """A page of the log before `before`, newest first (see `RecentEvents.before`)."""
        return await self._recent.before(before, limit)

    @property
    def client_count(self) -> int:
        return len(self._streams)

    def end_for(self, identity: Identity | None = None) -> None:
        """Ends the open streams of `identity` (every stream with None)."""
        self._streams.end_for(identity)

    async def close(self) -> None:
        self.end_for(None)
        await self._stats.close()

    async def _start_after(self, request: web.Request) -> int | web.Response:
        text = resumed_from(request) or request.query.get("after", "0")
        if not (text.isascii() and text.isdigit() and len(text) <= 18):
            return json_error(400, "after (or Last-Event-ID) must be a non-negative integer")
        after = int(text)
        if after > await self._board.last_event_seq():
            return json_error(400, "after is beyond the end of the event log")
        return after

    async def serve(self, request: web.Request, identity: Identity) -> web.StreamResponse:
        after = await self._start_after(request)
        if isinstance(after, web.Response):
            return after
        pump = functools.partial(self._pump, after=after, identity=identity)
        return await self._streams.serve(request, identity, pump, on_open=self._stats.ensure_running)

    async def _pump(self, stream: EventSourceResponse, after: int, identity: Identity) -> None:
        sent_point = f"web_event_sent:{identity.name}"  # a failpoint per caller, as for writer jobs
        await stream.send(json.dumps({"after": after}), event="hello", retry=RECONNECT_MS)
        look = True
        while not self._hub.closing:
            moved = self._hub.board_moved()  # taken before reading, so no change slips between
            if look:
                events, more = await self._recent.after(after)
                if events:
                    for _ in events:
                        failpoints.hit(sent_point)
                    await _send_all(stream, events)
                    after = events[-1][0]
                if more:
                    continue
            tick = self._stats.tick
            await self._wait(moved, tick)
            look = moved.is_set()  # a stats tick alone brings no event
            if tick.is_set() and self._stats.latest:
                await stream.send(self._stats.latest, event="stats")

    async def _wait(self, moved: asyncio.Event, tick: asyncio.Event) -> None:
        waits = [asyncio.ensure_future(moved.wait()), asyncio.ensure_future(tick.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()


async def _send_all(stream: EventSourceResponse, events: list[tuple[int, str]]) -> None:
    """A page of board events in one write: a commit's events cost each board one
    send, not one each. The framing is `EventSourceResponse.send`'s, for data that is
    one line (JSON from json.dumps has no raw line break) and an integer id; the
    send timeout is the same, and a write that times out drops the connection."""
    frames = "".join(f"id: {seq}\r\nevent: board\r\ndata: {text}\r\n\r\n" for seq, text in events)
    async with asyncio.timeout(SEND_TIMEOUT_S):
        await stream.write(frames.encode())
