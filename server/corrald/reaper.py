"""Reclaims expired leases and runs out shutdown graces, on a timer.

The timer is set to the next deadline the writer reports after each commit,
so reclaim happens within milliseconds of a lease's end, not a poll later.
"""

from __future__ import annotations

import asyncio
import logging

from . import errors
from .board import Board

log = logging.getLogger("corrald.reaper")


class Reaper:
    def __init__(self, board: Board) -> None:
        self._board = board
        self._next_ms: int | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._running: asyncio.Task | None = None
        self._closed = False

    def schedule(self, deadline_ms: int) -> None:
        """Arms the timer for `deadline_ms` unless an earlier one is armed."""
        if self._closed or (self._next_ms is not None and self._next_ms <= deadline_ms):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._next_ms = deadline_ms
        loop = asyncio.get_running_loop()
        # One ms late rather than early: at the end instant the lease is dead.
        # The board's clock advances with the monotonic clock, as the loop's
        # timers do, so a wall-clock step cannot make this fire early or late.
        delay = max(0.0, (deadline_ms - self._board.clock.now_ms() + 1) / 1000)
        self._timer = loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer, self._next_ms = None, None
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(self._reap())

    async def _reap(self) -> None:
        try:
            deadline = await self._board.reap()
        except Exception as error:  # overload, draining or a failed commit: try again shortly
            # A failed commit was logged by the writer, once for its whole batch.
            log.log(
                logging.DEBUG if isinstance(error, errors.Unavailable) else logging.WARNING,
                "reaper could not run: %s",
                error,
            )
            if not self._closed:
                self.schedule(self._board.clock.now_ms() + 200)
            return
        if deadline is not None:
            self.schedule(deadline)

    async def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        if self._running is not None:
            await asyncio.gather(self._running, return_exceptions=True)
