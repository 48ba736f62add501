"""Retry policies, built on tenacity: for the run_teammate loops (sync and async), and
for the writes every client sends with a request id.

The loops retry only transient failures: the daemon being unreachable or
draining (UNAVAILABLE), refusing work to protect itself (OVERLOADED, which
guarantees the call was not executed), or a deadline passing. A write is sent
again only while its outcome is in doubt (UNAVAILABLE, a deadline passing):
its request id makes that safe, and an OVERLOADED refusal is the caller's to
hear. Every retry waits with exponential backoff and full jitter, or the
daemon's RetryInfo hint, and gives up after a bounded total time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import grpc
import tenacity

from corral._errors import CorralError, Overloaded, Unavailable

__all__ = ["async_retrying", "async_write_retrying", "is_in_doubt", "is_transient", "retrying", "write_retrying"]

_log = logging.getLogger("corral.retry")

_BACKOFF = tenacity.wait_random_exponential(multiplier=0.1, max=5.0)


def is_transient(exc: BaseException) -> bool:
    """True for failures worth retrying after a pause."""
    if isinstance(exc, (Unavailable, Overloaded)):
        return True
    return isinstance(exc, CorralError) and exc.code is grpc.StatusCode.DEADLINE_EXCEEDED


def is_in_doubt(exc: BaseException) -> bool:
    """True for a write that may or may not have been applied: the daemon unreachable,
    draining or restarting, its commit in doubt, or no answer in time. (OVERLOADED is
    not: the write was refused unread, and the caller hears when to try again.)"""
    if isinstance(exc, Unavailable):
        return True
    return isinstance(exc, CorralError) and exc.code is grpc.StatusCode.DEADLINE_EXCEEDED


def _wait(retry_state: tenacity.RetryCallState) -> float:
    exc = retry_state.outcome.exception() if retry_state.outcome else None
    if isinstance(exc, Overloaded) and exc.retry_after is not None:
        return exc.retry_after.total_seconds()
    return float(_BACKOFF(retry_state))


def _log_retry(retry_state: tenacity.RetryCallState) -> None:
    exc = retry_state.outcome.exception() if retry_state.outcome else None
    delay = retry_state.next_action.sleep if retry_state.next_action else 0.0
    _log.info("%s failed (%s); retrying in %.2fs", getattr(retry_state.fn, "__name__", "call"), exc, delay)


class _StopAfterOutage:
    """Give up once failures have lasted `max_seconds`.

    Unlike tenacity's stop_after_delay, the clock starts at the first
    failure, not the first attempt: a stream that ran for an hour before
    breaking still gets the whole budget to reconnect.
    """

    def __init__(self, max_seconds: float) -> None:
        self._max_seconds = max_seconds
        self._first_failure = 0.0

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        now = retry_state.outcome_timestamp or 0.0
        if retry_state.attempt_number == 1:
            self._first_failure = now
        return now - self._first_failure >= self._max_seconds


def _options(
    max_seconds: float,
    retry_on: Callable[[BaseException], bool] = is_transient,
    on_unavailable: Callable[[], None] | None = None,
) -> dict[str, object]:
    def before_sleep(retry_state: tenacity.RetryCallState) -> None:
        _log_retry(retry_state)
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        if on_unavailable is not None and retry_state.attempt_number == 1 and isinstance(exc, Unavailable):
            on_unavailable()

    return {
        "retry": tenacity.retry_if_exception(retry_on),
        "wait": _wait,
        "stop": _StopAfterOutage(max_seconds),
        "before_sleep": before_sleep,
        "reraise": True,
    }


def retrying(max_seconds: float, *, on_unavailable: Callable[[], None] | None = None) -> tenacity.Retrying:
    """A sync retry policy giving up (re-raising the last error) after `max_seconds`;
    `on_unavailable()` is called when the first failure of an outage is Unavailable."""
    return tenacity.Retrying(**_options(max_seconds, on_unavailable=on_unavailable))  # type: ignore[arg-type]


def async_retrying(max_seconds: float, *, on_unavailable: Callable[[], None] | None = None) -> tenacity.AsyncRetrying:
    """The same policy for coroutines."""
    return tenacity.AsyncRetrying(**_options(max_seconds, on_unavailable=on_unavailable))  # type: ignore[arg-type]


def async_write_retrying(max_seconds: float) -> tenacity.AsyncRetrying:
    """For a write sent with a request id: sent again, with the same id, while its outcome
    is in doubt (`is_in_doubt`), for up to `max_seconds`."""
    return tenacity.AsyncRetrying(**_options(max_seconds, is_in_doubt))  # type: ignore[arg-type]


def write_retrying(max_seconds: float) -> tenacity.Retrying:
    """`async_write_retrying` for threads."""
    return tenacity.Retrying(**_options(max_seconds, is_in_doubt))  # type: ignore[arg-type]
