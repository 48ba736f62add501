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
