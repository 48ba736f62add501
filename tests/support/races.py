"""Calls let go at once, each in a thread of its own: what a race between callers leaves."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any


def race(calls: Sequence[Callable[[], Any]], outcomes_of: tuple[type[BaseException], ...], timeout: float = 30) -> list:
    """Runs every call at the same instant (a barrier lets them go); returns each one's value,
    or the error it raised when that error is one of `outcomes_of`. Any other error, or a
    call still running after `timeout` seconds, fails the test."""
    gate = threading.Barrier(len(calls))
    outcomes: list = [None] * len(calls)
    unexpected: list[BaseException] = []

    def run(index: int) -> None:
        gate.wait(10)
        try:
            outcomes[index] = calls[index]()
        except outcomes_of as error:
            outcomes[index] = error
        except BaseException as error:  # noqa: BLE001 (reported below, on the test's thread)
            unexpected.append(error)

    threads = [threading.Thread(target=run, args=(n,), name=f"racer{n}") for n in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not [t.name for t in threads if t.is_alive()], "a call did not return"
    assert not unexpected, unexpected
    return outcomes
