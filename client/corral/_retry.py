"""Retry policies for the run_teammate loops (sync and async), built on tenacity.

Only transient failures are retried: the daemon being unreachable or
draining (UNAVAILABLE), refusing work to protect itself (OVERLOADED, which
guarantees the call was not executed), or a deadline passing. Every retry
waits with exponential backoff and full jitter, or the daemon's RetryInfo
hint, and gives up after a bounded total time.
"""

from __future__ import annotations

import logging

import grpc
import tenacity

from corral._errors import CorralError, Overloaded, Unavailable

__all__ = ["async_retrying", "is_transient", "retrying"]

_log = logging.getLogger("corral.retry")

_BACKOFF = tenacity.wait_random_exponential(multiplier=0.1, max=5.0)


def is_transient(exc: BaseException) -> bool:
    """True for failures worth retrying after a pause."""
    if isinstance(exc, (Unavailable, Overloaded)):
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


def _options(max_seconds: float) -> dict[str, object]:
    return {
        "retry": tenacity.retry_if_exception(is_transient),
        "wait": _wait,
        "stop": _StopAfterOutage(max_seconds),
        "before_sleep": _log_retry,
        "reraise": True,
    }


def retrying(max_seconds: float) -> tenacity.Retrying:
    """A sync retry policy giving up (re-raising the last error) after `max_seconds`."""
    return tenacity.Retrying(**_options(max_seconds))  # type: ignore[arg-type]


def async_retrying(max_seconds: float) -> tenacity.AsyncRetrying:
    """The same policy for coroutines."""
    return tenacity.AsyncRetrying(**_options(max_seconds))  # type: ignore[arg-type]
