"""Waiting with a deadline: the one helper every test and the bench use instead of `sleep()`.

`wait_until` polls a predicate (or waits on a `threading.Event`) until it holds;
`wait_until_async` does the same on an event loop (or awaits an `asyncio.Event`).
Both return the predicate's truthy value and fail at the deadline with an
AssertionError that names what was awaited and the last value seen.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 5.0
POLL_INTERVAL_S = 0.02
# On an event loop the awaited state usually moves within a few callbacks.
ASYNC_POLL_INTERVAL_S = 0.001


def _timed_out(what: str, timeout: float, last: object) -> AssertionError:
    return AssertionError(f"timed out after {timeout:g}s waiting for {what}; last value {last!r}")


def wait_until(
    condition: Callable[[], T] | threading.Event,
    timeout: float = DEFAULT_TIMEOUT_S,
    what: str = "condition",
    *,
    interval: float = POLL_INTERVAL_S,
) -> T | bool:
    """Calls `condition` until it returns something truthy (or waits for the Event); returns that value."""
    if isinstance(condition, threading.Event):
        if not condition.wait(timeout):
            raise _timed_out(what, timeout, False)
        return True
    deadline = time.monotonic() + timeout
    pause = threading.Event()  # never set: its wait() paces the polls
    while True:
        last = condition()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout, last)
        pause.wait(interval)


async def wait_until_async(
    condition: Callable[[], Any] | asyncio.Event,
    timeout: float = DEFAULT_TIMEOUT_S,
    what: str = "condition",
    *,
    interval: float = ASYNC_POLL_INTERVAL_S,
) -> Any:
    """`wait_until` on the running event loop: polls `condition` (or awaits the asyncio.Event)."""
    if isinstance(condition, asyncio.Event):
        try:
            await asyncio.wait_for(condition.wait(), timeout)
        except TimeoutError:
            raise _timed_out(what, timeout, False) from None
        return True
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        last = condition()
        if last:
            return last
        if loop.time() >= deadline:
            raise _timed_out(what, timeout, last)
        await asyncio.sleep(interval)
