"""Pieces the sync and async `run_teammate` loops share: options, the tally,
and how a handler's return value or exception becomes a CompleteTask or FailTask."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from corral._errors import PermanentFailure
from corral._types import ExitReason, Message, RunSummary, ShutdownRequest, Task, Verdict

Result = bytes | str | None
Handler = Callable[[Task], Result]
"""A `corral.run_teammate` handler: the task in, its result out."""
AsyncHandler = Callable[[Task], Result | Awaitable[Result]]
"""A `corral.aio.run_teammate` handler: a coroutine function or a plain one."""
Reviewer = Callable[[Task, bytes], Verdict]
"""A `corral.run_teammate` reviewer: the task under review and its result in, a verdict out."""
AsyncReviewer = Callable[[Task, bytes], Verdict | Awaitable[Verdict]]
"""A `corral.aio.run_teammate` reviewer: a coroutine function or a plain one."""

# FailTask's error text is for people and agents reading the board: keep it
# far below the daemon's message limits.
MAX_ERROR_CHARS = 8 * 1024


@dataclass(frozen=True)
class RunOptions:
    """Everything `run_teammate` was asked to do, besides the handler."""

    plan: str | None = None
    slots: int = 1
    max_idle_polls: int | None = None
    poll_interval: datetime.timedelta | float | None = None
    on_message: Callable[[Message], Any] | None = None
    stop_on_idle_timeout: bool = True
    reconnect_timeout: float = 60.0
    reviewer: Callable[..., Any] | None = None
    capture_logs: bool = False

    def __post_init__(self) -> None:
        if self.slots < 1:
            raise ValueError(f"slots must be at least 1, got {self.slots}")


class Tally:
    """Thread-safe counts of what happened to each claim."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._summary = RunSummary(exit_reason=ExitReason.IDLE_TIMEOUT)

    def add(
        self, *, completed: int = 0, failed: int = 0, lost: int = 0, asked: int = 0, reviewed: int = 0, split: int = 0
    ) -> None:
        """Count finished claims."""
        with self._lock:
            s = self._summary
            self._summary = replace(
                s,
                completed=s.completed + completed,
                failed=s.failed + failed,
                lost=s.lost + lost,
                asked=s.asked + asked,
                reviewed=s.reviewed + reviewed,
                split=s.split + split,
            )

    def summary(self, exit_reason: ExitReason, *, plan_id: str = "", plan_feedback: str = "") -> RunSummary:
        """The final RunSummary."""
        with self._lock:
            return replace(self._summary, exit_reason=exit_reason, plan_id=plan_id, plan_feedback=plan_feedback)


def encode_result(value: object) -> bytes:
    """A handler's return value as CompleteTask's result: bytes, str (UTF-8) or None."""
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise PermanentFailure(f"handler returned {type(value).__name__}; return bytes, str or None")


def describe_failure(exc: BaseException) -> str:
    """FailTask's error text: what went wrong, in one bounded message.

    A `PermanentFailure` is stored as its message alone; any other exception
    as `Type: message`. The traceback is the SDK's and the handler's stack,
    useful to whoever debugs the teammate, not to an agent reading the board:
    `run_teammate` logs it on the teammate's side instead (`corral.runner`).
    """
    message = str(exc).strip()
    if not isinstance(exc, PermanentFailure):
        message = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    message = message or "PermanentFailure"
    return message if len(message) <= MAX_ERROR_CHARS else message[: MAX_ERROR_CHARS - 1] + "…"


def is_retryable(exc: BaseException) -> bool:
    """Handler failures are retried unless the handler raised PermanentFailure."""
    return not isinstance(exc, PermanentFailure)


def shutdown_reason(request: ShutdownRequest) -> str:
    """The answer text for an approved shutdown."""
    return f"finished current work; stopping ({request.reason})" if request.reason else "finished current work"
