"""Time as a parameter: read once per request, passed down as integer ms.

The daemon's clock is monotonic, labelled in Unix-epoch milliseconds: it
reads the host's wall clock once, when it is made, and from then on advances
only by the host's monotonic clock. Every lease, grace and deadline is
measured on it, so an NTP step of the wall clock while the daemon runs moves
none of them. Across restarts the same state directory keeps one time base:
the board moves a new daemon's clock up to the last instant the previous one
recorded (`not_before`), so no stored instant lies ahead of "now".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch, never decreasing."""

    def not_before(self, ms: int) -> int:
        """Moves the clock forward, if needed, so it never reads less than `ms`.

        Returns how many milliseconds it moved (0 if it was already there).
        """


class SystemClock:
    """The host's wall time at construction, then advanced by its monotonic clock.

    The instants it shows differ from the host's wall clock by the sum of the
    wall clock's steps since construction (and by any `not_before` move):
    Linux slews CLOCK_MONOTONIC at NTP's rate, so slewing adds no drift.
    Clients measure their own leases on their own monotonic clocks, so the
    shown instants are labels, as design §2 says ("daemon clock").
    """

    def __init__(
        self, wall: Callable[[], int] = time.time_ns, monotonic: Callable[[], int] = time.monotonic_ns
    ) -> None:
        self._monotonic = monotonic
        # Epoch ns at monotonic 0. Only ever grows (`not_before`), and one
        # attribute store is atomic, so readers on any thread need no lock.
        self._origin_ns = wall() - monotonic()

    def now_ms(self) -> int:
        return (self._origin_ns + self._monotonic()) // 1_000_000

    def not_before(self, ms: int) -> int:
        behind = ms - self.now_ms()
        if behind <= 0:
            return 0
        self._origin_ns += behind * 1_000_000
        return behind


class FakeClock:
    """A clock that moves only when told to; thread-safe for writer tests."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now

    def not_before(self, ms: int) -> int:
        with self._lock:
            behind = max(0, ms - self._now)
            self._now += behind
            return behind

    def advance(self, ms: int) -> int:
        with self._lock:
            self._now += ms
            return self._now

    def set(self, ms: int) -> None:
        with self._lock:
            self._now = ms
