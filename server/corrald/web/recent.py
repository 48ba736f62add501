"""The latest events of the log, read and shaped once for every open board.

Ten boards waking on one commit would otherwise read the same events ten
times and turn each into JSON ten times. Here the first board to ask reads
them (under a lock, so the others wait for that read rather than repeat it)
and keeps them, shaped, in a bounded run of the log; the others are served
from it. A board further behind than the run reads the log itself. The run
is a contiguous slice of the log: it only grows at its end, from reads that
start where it ends, and drops its oldest events past its bounds.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import json

from ..board import Board
from ..service import watch_convert
from ..service.lead import FEED_BYTES, FEED_PAGE
from ..wake import WakeHub
from . import shapes

RECENT_EVENTS_MAX = 4096
RECENT_BYTES_MAX = 4 * 1024 * 1024
HISTORY_PAGE_MAX = 500


class RecentEvents:
    def __init__(self, board: Board, hub: WakeHub) -> None:
        self._board = board
        self._hub = hub
        self._seqs: collections.deque[int] = collections.deque()
        self._texts: collections.deque[str] = collections.deque()
        self._bytes = 0
        # The run holds every event after `_starts_after` up to `_ends_at`.
        self._starts_after = self._ends_at = -1
        # The hub's board-moved event when the last read that reached the log's end began.
        self._read_as_of: asyncio.Event | None = None
        self._lock = asyncio.Lock()

    async def after(self, seq: int) -> tuple[list[tuple[int, str]], bool]:
        """Up to a page of shaped events after `seq`, as (seq, JSON), and whether more may follow."""
        found = self._cached(seq)
        if found is not None:
            return found
        if seq < self._starts_after:
            return await self._read(seq)  # behind the run: from the log, not kept
        async with self._lock:
            found = self._cached(seq)
            if found is not None:
                return found
            if seq != self._ends_at:  # ahead of a run nobody extended: start a new one here
                self._seqs.clear()
                self._texts.clear()
                self._bytes = 0
                self._starts_after = self._ends_at = seq
            moved = self._hub.board_moved()  # taken before reading, so no commit slips between
            events, more = await self._read(seq)
            self._extend(events)
            self._read_as_of = None if more else moved
            return events, more

    async def before(self, seq: int, limit: int) -> tuple[list[tuple[int, str]], int | None]:
        """A page of history for a board opened after the events: those with seqs in
        `[seq - limit, seq)`, newest first, and the `seq` that asks for the page before
        it (None when this page reaches the log's start). A page covers a range of seqs,
        not a count of events, so each costs at most `limit` events of reading."""
        start = max(0, seq - 1 - limit)
        found: list[tuple[int, str]] = []
        after = start
        while True:
            events, more = await self._read(after)
            kept = [event for event in events if event[0] < seq]
            found.extend(kept)
            if not more or not kept or len(kept) < len(events):
                break
            after = kept[-1][0]
        found.reverse()
        return found, start + 1 if start > 0 else None

    def _cached(self, seq: int) -> tuple[list[tuple[int, str]], bool] | None:
        if not self._starts_after <= seq <= self._ends_at or self._ends_at < 0:
            return None
        if seq == self._ends_at:
            # At the run's end: nothing new while no commit moved the board since a read
            # found the log's end.
            return ([], False) if self._read_as_of is self._hub.board_moved() else None
        start = bisect.bisect_right(self._seqs, seq)
        stop = min(start + FEED_PAGE, len(self._seqs))
        return [(self._seqs[i], self._texts[i]) for i in range(start, stop)], True

    async def _read(self, seq: int) -> tuple[list[tuple[int, str]], bool]:
        page = await self._board.read_feed(seq, FEED_PAGE, FEED_BYTES)
        shaped = [
            (event.seq, json.dumps(shapes.event(watch_convert.watch_response(event, task, mate))))
            for event, task, mate in page.items
        ]
        return shaped, page.more

    def _extend(self, events: list[tuple[int, str]]) -> None:
        for seq, text in events:
            self._seqs.append(seq)
            self._texts.append(text)
            self._bytes += len(text)
            self._ends_at = seq
        while self._seqs and (len(self._seqs) > RECENT_EVENTS_MAX or self._bytes > RECENT_BYTES_MAX):
            self._starts_after = self._seqs.popleft()
            self._bytes -= len(self._texts.popleft())
