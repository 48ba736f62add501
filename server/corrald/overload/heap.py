"""The memory a big request leaves behind is given back to the system.

A request of megabytes is copied a few times on its way in: gRPC core's
buffers, the Python bytes handed to the handler, the parsed message. Once the
call is answered all of it is free, but glibc's malloc keeps freed memory for
reuse, in two ways that a burst of big requests makes large:

* Its threshold for giving a block pages of its own (mmap, returned when the
  block is freed) starts at 128 KiB and rises to the size of each such block
  freed, up to 32 MiB, and the threshold for shrinking an arena's free top to
  twice that. After one 6 MiB request, the next ones come from the arenas,
  and each arena (one per thread that allocates) keeps up to 12 MiB free at
  its top. `fix_thresholds` pins the first at 1 MiB, so the second stays at
  its 128 KiB.
* Freed blocks inside an arena stay in its free lists. So a call that carried
  a big request asks for `malloc_trim(0)`, which hands their pages back; one
  runs on a worker thread a moment later, whatever the number of calls that
  asked meanwhile.

24 concurrent CompleteTask calls of 6 MiB, answered (refused), twice with a
teammate's credential and twice with a bogus one, left the daemon 90-130 MiB
larger 2 s later; 50-120 MiB with the threshold pinned alone, 25-40 MiB with
the trims alone (arenas' tops of 11 MiB each), under 1 MiB with both
(server/DESIGN.md, "Memory per client").

On a C library without `mallopt` or `malloc_trim` (musl, macOS) this does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
from collections.abc import Callable
from typing import Literal

log = logging.getLogger("corrald")

# A request this big is worth a trim after it: a task's 1 MiB result or payload.
# Smaller ones come from the arenas' free lists and go back to them.
BIG_REQUEST_BYTES = 1024 * 1024
# How long after the first big request a trim runs: a burst's calls are
# answered within it, and one trim gives back what all of them left.
TRIM_DELAY_S = 0.25
# A block this big or bigger gets pages of its own, given back as it is freed.
MMAP_THRESHOLD_BYTES = 1024 * 1024
_M_MMAP_THRESHOLD = -3  # mallopt's parameter (malloc.h)


def _libc_function(name: str, *argtypes: type) -> Callable[..., int] | None:
    try:
        function = getattr(ctypes.CDLL(ctypes.util.find_library("c")), name)
    except (OSError, AttributeError, TypeError):
        return None
    function.argtypes = list(argtypes)
    function.restype = ctypes.c_int
    return function


def fix_thresholds() -> bool:
    """Pins glibc's mmap threshold at `MMAP_THRESHOLD_BYTES` (see above), which also
    keeps its trim threshold at 128 KiB; False where that cannot be done."""
    mallopt = _libc_function("mallopt", ctypes.c_int, ctypes.c_int)
    return mallopt is not None and mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1


def _malloc_trim() -> Callable[[int], int] | None:
    return _libc_function("malloc_trim", ctypes.c_size_t)


class HeapTrim:
    """Event-loop side: `after_request(size)` for each request a call carried. One trim
    waits or runs at a time; a big request answered while one runs gets another after it."""

    def __init__(self, trim: Callable[[int], int] | None = None, *, delay_s: float = TRIM_DELAY_S) -> None:
        self._trim = trim if trim is not None else _malloc_trim()
        self._delay_s = delay_s
        self._state: Literal["idle", "waiting", "running"] = "idle"
        self._again = False  # a big request was answered while a trim ran: trim once more
        self._running: asyncio.Task[None] | None = None  # held: the loop keeps only a weak reference
        self._idle = asyncio.Event()  # no trim waiting or running
        self._idle.set()
        self.trims = 0  # how many have run

    @property
    def idle(self) -> bool:
        """No trim waits or runs."""
        return self._idle.is_set()

    async def until_idle(self) -> None:
        """Returns once no trim waits or runs (for tests)."""
        await self._idle.wait()

    def after_request(self, size: int) -> None:
        if size < BIG_REQUEST_BYTES or self._trim is None:
            return
        if self._state == "idle":
            self._schedule()
        elif self._state == "running":
            self._again = True

    def _schedule(self) -> None:
        self._state = "waiting"
        self._idle.clear()
        loop = asyncio.get_running_loop()
        loop.call_later(self._delay_s, self._start, loop)

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._state = "running"
        self._running = loop.create_task(self._run())

    async def _run(self) -> None:
        try:
            await asyncio.to_thread(self._trim_now)
        finally:
            self._state = "idle"
            if self._again:
                self._again = False
                self._schedule()
            else:
                self._idle.set()

    def _trim_now(self) -> None:
        assert self._trim is not None
        try:
            self._trim(0)
        except Exception:  # noqa: BLE001 (never let memory housekeeping fail a call)
            log.exception("malloc_trim failed")
        self.trims += 1
