"""The SDK's exceptions, and the one mapping that turns a failed call into one.

The daemon puts a `google.rpc.Status` in the `grpc-status-details-bin`
trailer of a failed call, and in the `status` of a failed Session op result;
either way its `ErrorInfo.reason` (domain "corral") picks the subclass, a
`RetryInfo` becomes `Overloaded.retry_after`, a `BadRequest` becomes
`InvalidArgument.field_violations`.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import message as _message
from google.rpc import error_details_pb2, status_pb2

from corral._types import ClaimEndReason, DoneSummary

__all__ = [
    "AlreadyExists",
    "AttemptTimedOut",
    "ClaimEndedError",
    "ClaimRevoked",
    "ClaimTokenMismatch",
    "CorralError",
    "FailedPrecondition",
    "FieldViolation",
    "GitError",
    "InvalidArgument",
    "LeaseExpired",
    "LeaseLost",
    "LimitExceeded",
    "NeedsInput",
    "NotFound",
    "Overloaded",
    "PermanentFailure",
    "PermissionDenied",
    "TaskCanceled",
    "Unauthenticated",
    "Unavailable",
    "error_from_rpc",
    "error_from_status",
]

ERROR_DOMAIN = "corral"
_STATUS_DETAILS_KEY = "grpc-status-details-bin"


class CorralError(Exception):
    """Root of every error the SDK raises.

    `code` is the gRPC status code (None when the error did not come from an
    RPC, e.g. a daemon that failed to start), `reason` the daemon's
    `ErrorInfo.reason` ("" when absent), `details` the status message.
    """

    def __init__(
        self,
        details: str,
        *,
        code: grpc.StatusCode | None = None,
        reason: str = "",
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(details)
        self.details = details
        self.code = code
        self.reason = reason
        self.metadata: Mapping[str, str] = dict(metadata or {})

    def __str__(self) -> str:
        label = self.reason or (self.code.name if self.code else "")
        return f"{label}: {self.details}" if label else self.details


@dataclass(frozen=True)
class FieldViolation:
    """One bad field of a refused request (`field` is a path like `tasks[3].id`)."""

    field: str
    description: str


class InvalidArgument(CorralError):
    """The request was malformed or out of range; nothing was written."""

    def __init__(self, details: str, *, field_violations: Iterable[FieldViolation] = (), **kwargs: Any) -> None:
        super().__init__(details, **kwargs)
        self.field_violations: tuple[FieldViolation, ...] = tuple(field_violations)


class NotFound(CorralError):
    """No such task, teammate, plan or shutdown request (see `reason`)."""


class AlreadyExists(CorralError):
    """An id already exists with a different spec."""


class PermissionDenied(CorralError):
    """The credential is valid but its role may not make this call."""


class Unauthenticated(CorralError):
    """The credential is missing, invalid, or was revoked."""


class FailedPrecondition(CorralError):
    """The call does not apply to the task's current state."""


class LeaseExpired(FailedPrecondition):
    """The claim's lease ended; the task may already belong to someone else."""


class ClaimTokenMismatch(FailedPrecondition):
    """The token is not the task's live claim (stale, foreign or reused)."""


class TaskCanceled(FailedPrecondition):
    """The task was canceled while this claim held it."""


class ClaimRevoked(FailedPrecondition):
    """The Lead took the claim away (RevokeClaim); the task is PENDING again."""


class AttemptTimedOut(FailedPrecondition):
    """The attempt ran past its task's `attempt_timeout` and counts as a failure."""


class Overloaded(CorralError):
    """The daemon refused the call to protect itself; try again after `retry_after`.

    The call was not executed, so retrying is always safe.
    """

    def __init__(self, details: str, *, retry_after: datetime.timedelta | None = None, **kwargs: Any) -> None:
        super().__init__(details, **kwargs)
        self.retry_after = retry_after


class LimitExceeded(CorralError):
    """A limit of the board refused the call (`reason` names it: OUTPUT_LIMIT, an
    attempt's output full); nothing of it was stored, and sent again it is refused again."""


class Unavailable(CorralError):
    """The daemon is down, unreachable or draining."""


class LeaseLost(CorralError):
    """A claim's keepalive could not keep the lease; stop working on the task.

    `cause` is the error that proved the loss (LeaseExpired,
    ClaimTokenMismatch, TaskCanceled, ...) or None when the lease ran out
    while the daemon could not be reached.
    """

    def __init__(self, task_id: str, cause: CorralError | None) -> None:
        why = str(cause) if cause else "lease ran out while the daemon was unreachable"
        super().__init__(
            f"lease on task {task_id!r} lost: {why}",
            code=cause.code if cause else None,
            reason=cause.reason if cause else "",
        )
        self.task_id = task_id
        self.cause = cause

    def __str__(self) -> str:
        return self.details  # already names the cause's reason


class ClaimEndedError(LeaseLost):
    """The claim ended under its holder: the daemon ended it (revoke, cancel, attempt
    time limit, lease expiry), or the lease ran out while the daemon could not be
    reached. `claim.check()` raises it once `claim.ended` is set; stop working on
    the task, whose outcome is dropped.

    `end_reason` is the daemon's reason when known, else None; `cause` is as for LeaseLost.
    """

    def __init__(self, task_id: str, cause: CorralError | None, end_reason: ClaimEndReason | None = None) -> None:
        super().__init__(task_id, cause)
        self.end_reason = end_reason


class TasksFailed(CorralError):
    """`Lead.wait_until_done(raise_on_failure=True)` found failed tasks; `summary` has the whole outcome."""

    def __init__(self, summary: DoneSummary) -> None:
        shown = ", ".join(summary.failed_ids[:10]) + (", …" if summary.failed > 10 else "")
        super().__init__(f"{summary.failed} task(s) failed: {shown}")
        self.summary = summary


class GitError(CorralError):
    """A git command of the worktree per claim (`corral.GitWorktree`) failed, or git
    is not installed. The message names the command, the directory and what git
    wrote to stderr; `command`, `stderr` and `returncode` (None when git could not be
    run) hold them apart."""

    def __init__(
        self, details: str, *, command: tuple[str, ...] = (), stderr: str = "", returncode: int | None = None
    ) -> None:
        super().__init__(details)
        self.command = command
        self.stderr = stderr
        self.returncode = returncode


class PermanentFailure(Exception):
    """Raise from a `run_teammate` handler to fail the task without a retry."""


class NeedsInput(Exception):
    """Raise from a `run_teammate` handler to ask the Lead `question` instead of
    guessing: the runner ends the claim with `Claim.ask` (no attempt used) and the
    task waits NEEDS_INPUT until the Lead answers; its next claim carries every
    answer so far (`current_claim().answers`), so the handler can go on from there.
    """

    def __init__(self, question: str) -> None:
        super().__init__(question)
        self.question = question


# ---------------------------------------------------------------- mapping

_BY_CODE: dict[grpc.StatusCode, type[CorralError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.RESOURCE_EXHAUSTED: Overloaded,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
}

_BY_REASON: dict[str, type[CorralError]] = {
    "LEASE_EXPIRED": LeaseExpired,
    "CLAIM_TOKEN_MISMATCH": ClaimTokenMismatch,
    "TASK_CANCELED": TaskCanceled,
    "CLAIM_REVOKED": ClaimRevoked,
    "ATTEMPT_TIMEOUT": AttemptTimedOut,
}


def error_from_rpc(error: grpc.RpcError) -> CorralError:
    """Turn a failed call (sync or `grpc.aio`) into the matching CorralError."""
    code = _call_attr(error, "code") or grpc.StatusCode.UNKNOWN
    details = _call_attr(error, "details") or code.name
    if code is grpc.StatusCode.INTERNAL and details == _LOST_WRITE_DETAILS:
        # The daemon's status was lost, not an error of its own: the stream is
        # gone, and the next one learns why (or goes on).
        return Unavailable(_LOST_WRITE_EXPLAINED, code=grpc.StatusCode.UNAVAILABLE)
    return _error(code, details, _rich_status(_call_attr(error, "trailing_metadata") or ()))


# What grpc.aio puts in place of the server's status when a write on a
# client-streaming call loses the race with the call's end (grpc/grpc#36066).
_LOST_WRITE_DETAILS = "Internal error from Core"
_LOST_WRITE_EXPLAINED = "the stream ended while a request was being written; its status was lost"


def error_from_status(status: status_pb2.Status) -> CorralError:
    """Turn the `google.rpc.Status` of a failed Session op into the CorralError
    the same call made as a unary RPC would have raised."""
    code = _CODES_BY_NUMBER.get(status.code, grpc.StatusCode.UNKNOWN)
    return _error(code, status.message or code.name, status)


_CODES_BY_NUMBER: dict[int, grpc.StatusCode] = {code.value[0]: code for code in grpc.StatusCode}
# How gRPC words a message over a receive or send limit ("Received message larger than max (…)").
_TOO_LARGE = "message larger than max"


def _error(code: grpc.StatusCode, details: str, status: status_pb2.Status | None) -> CorralError:
    info = _unpack(status, error_details_pb2.ErrorInfo)
    reason = info.reason if info is not None and info.domain in ("", ERROR_DOMAIN) else ""
    cls = _BY_REASON.get(reason) if code is grpc.StatusCode.FAILED_PRECONDITION else None
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED and not reason and _TOO_LARGE in details:
        # gRPC's own refusal of a message over the daemon's limit (or the channel's): not
        # an overload, and not transient, since the same message is refused again.
        cls = InvalidArgument
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED and reason not in ("", "OVERLOADED"):
        cls = LimitExceeded  # not an overload: waiting does not help
    cls = cls or _BY_CODE.get(code, CorralError)
    kwargs: dict[str, Any] = {
        "code": code,
        "reason": reason,
        "metadata": dict(info.metadata) if info is not None else {},
    }
    if cls is Overloaded:
        kwargs["retry_after"] = _retry_after(status)
    elif cls is InvalidArgument:
        kwargs["field_violations"] = _field_violations(status)
    return cls(details, **kwargs)


def _call_attr(error: grpc.RpcError, name: str) -> Any:
    # A bare grpc.RpcError (e.g. raised by an interceptor) has no call methods.
    method = getattr(error, name, None)
    return method() if callable(method) else None


def _rich_status(trailing_metadata: Iterable[tuple[str, Any]]) -> status_pb2.Status | None:
    # Parsed by hand rather than with grpc_status.rpc_status.from_call: that
    # helper raises ValueError when the status message differs from the call's
    # details (proxies rewrite it), and we would rather keep the details.
    for key, value in trailing_metadata:
        if key == _STATUS_DETAILS_KEY and isinstance(value, bytes):
            try:
                return status_pb2.Status.FromString(value)
            except _message.DecodeError:
                return None
    return None


def _unpack(status: status_pb2.Status | None, message_type: Any) -> Any:
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(message_type.DESCRIPTOR):
            unpacked = message_type()
            detail.Unpack(unpacked)
            return unpacked
    return None


def _retry_after(status: status_pb2.Status | None) -> datetime.timedelta | None:
    info = _unpack(status, error_details_pb2.RetryInfo)
    if info is None or not info.HasField("retry_delay"):
        return None
    delay: datetime.timedelta = info.retry_delay.ToTimedelta()
    return delay


def _field_violations(status: status_pb2.Status | None) -> tuple[FieldViolation, ...]:
    bad_request = _unpack(status, error_details_pb2.BadRequest)
    if bad_request is None:
        return ()
    return tuple(FieldViolation(v.field, v.description) for v in bad_request.field_violations)
