"""The writer queue's bound: its depth levels, refusal past the limit, and the
room where async callers wait a little for a place.

The writer's queue holds at most `WriterLevels.refuse` jobs. A job submitted
past that is refused with Overloaded (RESOURCE_EXHAUSTED + RetryInfo), and
nothing is written. An RPC that meets a full queue first waits in the room,
up to `WriterConfig.room_wait_ms`, for the writer to take a job: a burst is
absorbed while a sustained overload is still refused. The room is bounded
too: past half as many callers as the queue holds, a caller is refused at once
instead of parked in memory. Taking a job frees one place and wakes one
waiting caller (waking them all would make a sustained overload spin the loop).

Thread-safe: the writer thread frees places, event loops wait for them.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable

from ..config import WriterLevels
from ..errors import Overloaded

# The depth levels of the single-writer proposal, least loaded first; the
# metrics endpoint and GetStats report which one the queue is at.
LEVELS = ("normal", "record", "warn", "degraded", "refuse")


def level(depth: int, levels: WriterLevels) -> str:
    """The level a queue of `depth` jobs is at."""
    for name, limit in zip(LEVELS[:-1], (levels.record, levels.warn, levels.degraded, levels.refuse), strict=True):
        if depth <= limit:
            return name
    return LEVELS[-1]


class QueueBound:
    """Refuses jobs past the writer queue's limit and keeps the room where callers wait for a place."""

    def __init__(self, levels: WriterLevels, room_wait_ms: int) -> None:
        self._levels = levels
        self._room_wait_s = room_wait_ms / 1000
        self._lock = threading.Lock()
        self._room: collections.deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = collections.deque()
        self._in_room = 0  # async callers waiting for a place
        self.refused = 0  # jobs refused, counted once per job

    def check(self, depth: int, *, count: bool = True) -> None:
        """Raises Overloaded when a queue of `depth` jobs has no place for another;
        `count=False` for a caller that will wait in the room and try again."""
        if depth >= self._levels.refuse:
            if count:
                with self._lock:
                    self.refused += 1
            raise Overloaded(f"writer queue holds {depth} jobs", retry_after_ms=50)

    async def wait_for_room(self, enqueue: Callable[[bool], None]) -> None:
        """Waits for a place and takes it with `enqueue(final)`, which raises Overloaded
        while the queue is still full (counting the refusal only when `final`)."""
        with self._lock:
            if self._in_room >= self._levels.refuse // 2:
                self.refused += 1
                raise Overloaded("writer queue and its waiting room are full", retry_after_ms=200)
            self._in_room += 1
        try:
            await self._wait(enqueue)
        finally:
            with self._lock:
                self._in_room -= 1

    async def _wait(self, enqueue: Callable[[bool], None]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._room_wait_s
        while True:
            freed: asyncio.Future[None] = loop.create_future()
            with self._lock:
                self._room.append((loop, freed))
            try:
                await asyncio.wait_for(freed, max(0.0, deadline - loop.time()))
            except TimeoutError:
                pass
            final = loop.time() >= deadline
            try:
                enqueue(final)
                return
            except Overloaded:
                if final:
                    raise

    def place_freed(self) -> None:
        """The writer took a job: wake one caller waiting in the room, if any."""
        with self._lock:
            if not self._room:
                return
            loop, freed = self._room.popleft()
        try:
            loop.call_soon_threadsafe(_set_if_pending, freed)
        except RuntimeError:  # loop closed
            pass

    @property
    def waiting(self) -> int:
        return self._in_room


def _set_if_pending(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
