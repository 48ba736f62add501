"""Fake clocks for tests: time moves only when the test moves it."""

from __future__ import annotations


class SecondsClock:
    """A monotonic clock in float seconds (like `time.monotonic`) that moves only when a test sets `now`.

    For the admission pacer, whose steps are finer than corrald's millisecond
    FakeClock, and for the writer's batch-budget timer. It starts well clear of
    0 so that no reading looks like "never".
    """

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class SteppingHost:
    """A host's two clocks in ns, for `corrald.clock.SystemClock(wall=host.wall, monotonic=host.monotonic)`.

    `elapse` is real time passing (both clocks move); `step_wall` is NTP
    stepping the wall clock (only it moves).
    """

    def __init__(self, wall_ms: int = 1_700_000_000_000, monotonic_ms: int = 5_000_000) -> None:
        self.wall_ns = wall_ms * 1_000_000
        self.monotonic_ns = monotonic_ms * 1_000_000

    def wall(self) -> int:
        return self.wall_ns

    def monotonic(self) -> int:
        return self.monotonic_ns

    def elapse(self, ms: int) -> None:
        self.wall_ns += ms * 1_000_000
        self.monotonic_ns += ms * 1_000_000

    def step_wall(self, ms: int) -> None:
        self.wall_ns += ms * 1_000_000
