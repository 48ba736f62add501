"""Domain failures as tool results: the design's reason first, then one sentence of
what to do. A domain failure is never a protocol error; the model reads it and acts."""

from __future__ import annotations

import corral

__all__ = ["ToolFailure", "failure_from_error"]


class ToolFailure(Exception):
    """A tool call that failed for a reason the model can act on (an `isError` result)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


# What the model should do after each claim error: never finish a claim it lost.
_CLAIM_ERRORS: tuple[tuple[type[corral.CorralError], str, str], ...] = (
    (
        corral.LeaseExpired,
        "LEASE_EXPIRED",
        "the lease ended and the task may be someone else's now; do not complete it; call next_item",
    ),
    (
        corral.ClaimTokenMismatch,
        "CLAIM_TOKEN_MISMATCH",
        "this claim is no longer the task's live one; drop the task and call next_item",
    ),
    (corral.TaskCanceled, "TASK_CANCELED", "the Lead canceled the task; stop working on it and call next_item"),
    (corral.ClaimRevoked, "CLAIM_REVOKED", "the Lead took the task back; stop working on it and call next_item"),
    (
        corral.AttemptTimedOut,
        "ATTEMPT_TIMEOUT",
        "the attempt ran past its time limit and counts as failed; call next_item",
    ),
)


def failure_from_error(exc: corral.CorralError, *, task_id: str = "") -> ToolFailure:
    """The tool result for a failed SDK call."""
    about = f"task {task_id!r}: " if task_id else ""
    for kind, reason, advice in _CLAIM_ERRORS:
        if isinstance(exc, kind):
            return ToolFailure(reason, f"{about}{advice}")
    if isinstance(exc, corral.Overloaded):
        after = exc.retry_after.total_seconds() if exc.retry_after else 1.0
        return ToolFailure("OVERLOADED", f"retry after {after:g} s (the daemon is shedding load; nothing was done)")
    if isinstance(exc, corral.LimitExceeded):
        return ToolFailure(
            exc.reason or "RESOURCE_EXHAUSTED",
            f"{about}{exc.details}; nothing of it was stored, and more is refused too",
        )
    if isinstance(exc, corral.Unavailable):
        return ToolFailure(
            "UNAVAILABLE", "the daemon cannot be reached; the bridge is reconnecting, call again shortly"
        )
    if isinstance(exc, corral.InvalidArgument):
        fields = ", ".join(f"{v.field}: {v.description}" for v in exc.field_violations) or exc.details
        return ToolFailure("INVALID_ARGUMENT", f"{about}{fields}; fix the argument and call again")
    if isinstance(exc, corral.PermissionDenied):
        return ToolFailure("PERMISSION_DENIED", f"{exc.details}; this credential may not do that")
    if isinstance(exc, corral.Unauthenticated):
        return ToolFailure(
            "UNAUTHENTICATED", "this bridge's credential was revoked or is unknown; stop and tell your operator"
        )
    if isinstance(exc, corral.NotFound):
        return ToolFailure("NOT_FOUND", f"{exc.details}; check the name or id")
    if isinstance(exc, corral.AlreadyExists):
        return ToolFailure("ALREADY_EXISTS", f"{exc.details}; use another id or the same spec")
    if isinstance(exc, corral.FailedPrecondition):
        return ToolFailure(exc.reason or "FAILED_PRECONDITION", f"{about}{exc.details}")
    label = exc.reason or (exc.code.name if exc.code else "ERROR")
    return ToolFailure(label, f"{about}{exc.details}")
