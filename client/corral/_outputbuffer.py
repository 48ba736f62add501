"""A claim's output waiting to be appended: what the sync and asyncio flushers share.

Writes (`Claim.output`, `corral.output`, captured log records) land here from any
thread and never wait on the network; the claim's flusher takes them in batches. A
batch is due `FLUSH_SECONDS` after the first byte written since the last batch, at
once when `FLUSH_BYTES` wait, and at once when the claim is about to finish. Time
is a parameter (`now`, seconds of a monotonic clock), so the policy is tested
without waiting.

Back-pressure: at most `BUFFER_MAX_BYTES` wait. A write that does not fit is
dropped whole, and so is every write after it until the flusher takes the next
batch; that batch ends with one line saying how many bytes were dropped. The oldest
text is kept (it leads to what follows), a handler or a logging call never blocks
on a slow daemon (a flusher on the event loop could not make room while the loop's
thread waited), memory stays bounded, and a reader sees where the gap is.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = [
    "APPEND_MAX_BYTES",
    "Append",
    "AsyncAppend",
    "BUFFER_MAX_BYTES",
    "FLUSH_BYTES",
    "FLUSH_SECONDS",
    "OutputBuffer",
    "dropped_notice",
]

FLUSH_SECONDS = 0.2
FLUSH_BYTES = 32 * 1024
# The daemon's limit on one AppendOutput (AppendOutputRequest.data).
APPEND_MAX_BYTES = 64 * 1024
BUFFER_MAX_BYTES = 1024 * 1024

AsyncAppend = Callable[[bytes], Awaitable[tuple[int, int]]]
"""How a `corral.aio` claim's flusher appends one piece of output: (attempt, size after)."""
Append = Callable[[bytes], tuple[int, int]]
"""How a `corral` claim's flusher appends one piece of output."""


def dropped_notice(dropped: int) -> bytes:
    """The line a batch ends with when writes were dropped before it."""
    return f"\n[corral: {dropped} bytes of output dropped: appends fell behind]\n".encode()


class _State(enum.Enum):
    OPEN = enum.auto()  # batches come on their own schedule
    STOPPED = enum.auto()  # the claim ended or its output is refused: nothing more is sent


class OutputBuffer:
    """What a claim's handler wrote and the flusher has not taken yet. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending = bytearray()
        self._since: float | None = None  # when the first pending byte was written
        self._dropped = 0
        self._state = _State.OPEN
        self._sending = False  # a batch was taken and is not sent yet (`take` .. `sent`)
        # Waiters of `flush`: resolved once what was written before they asked is sent.
        self._flush_waiters: list[Any] = []

    def write(self, data: bytes, now: float) -> bool:
        """Add `data`; True when the flusher should look now (a batch's timer starts,
        or one is due), False when nothing changed for it (or the write was dropped)."""
        if not data:
            return False
        with self._lock:
            if self._state is _State.STOPPED:
                return False
            if self._dropped or len(self._pending) + len(data) > BUFFER_MAX_BYTES:
                first_dropped = not self._dropped
                self._dropped += len(data)
                return first_dropped  # the notice is due with the next batch
            first = not self._pending
            self._pending += data
            if first:
                self._since = now
            return first or len(self._pending) >= FLUSH_BYTES

    def ask_flush(self, waiter: Any) -> bool:
        """Make what waits due now; `waiter` (a future) is resolved once it is sent.
        False (and no waiter kept) when nothing is buffered or on its way: a batch
        taken but not sent yet counts, so a flush never returns ahead of it."""
        with self._lock:
            if self._state is _State.STOPPED or not (self._pending or self._dropped or self._sending):
                return False
            self._flush_waiters.append(waiter)
            return True

    def take(self, now: float) -> tuple[list[bytes], list[Any]]:
        """The batch due now, in pieces of at most APPEND_MAX_BYTES (empty when none is
        due), and the flush waiters it settles."""
        with self._lock:
            if self._state is _State.STOPPED or self.seconds_until_due_locked(now) != 0.0:
                return [], []
            data = bytes(self._pending)
            if self._dropped:
                data += dropped_notice(self._dropped)
            self._pending.clear()
            self._since, self._dropped = None, 0
            self._sending = True
            waiters, self._flush_waiters = self._flush_waiters, []
        pieces = [data[at : at + APPEND_MAX_BYTES] for at in range(0, len(data), APPEND_MAX_BYTES)]
        return pieces, waiters

    def sent(self) -> list[Any]:
        """The batch `take` gave is sent (or given up on): the flush waiters that asked while
        it was on its way with nothing more written, which it settles too."""
        with self._lock:
            self._sending = False
            if self._pending or self._dropped:
                return []  # the next batch, due at once for them, settles them
            waiters, self._flush_waiters = self._flush_waiters, []
        return waiters

    def seconds_until_due(self, now: float) -> float | None:
        """How long until the next batch is due: 0.0 now, None while nothing waits."""
        with self._lock:
            return self.seconds_until_due_locked(now)

    def seconds_until_due_locked(self, now: float) -> float | None:
        if not (self._pending or self._dropped):
            return None
        if self._flush_waiters or len(self._pending) >= FLUSH_BYTES or self._since is None:
            return 0.0
        return max(self._since + FLUSH_SECONDS - now, 0.0)

    def stop(self) -> None:
        """Drop what waits and every later write (the flush waiters stay for the flusher
        to settle: `drain_waiters`)."""
        with self._lock:
            self._state = _State.STOPPED
            self._pending.clear()
            self._since, self._dropped = None, 0

    def drain_waiters(self) -> list[Any]:
        """The flush waiters not settled yet, handed over to be settled."""
        with self._lock:
            waiters, self._flush_waiters = self._flush_waiters, []
        return waiters

    @property
    def stopped(self) -> bool:
        """True once `stop` was called: nothing more is taken."""
        return self._state is _State.STOPPED
