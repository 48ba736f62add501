"""The daemon's domain errors. The gRPC layer maps them in one table."""

from __future__ import annotations


class CorralError(Exception):
    """Root of every error the board reports to a caller."""

    reason: str = "INTERNAL"

    def __init__(self, message: str, **metadata: str) -> None:
        super().__init__(message)
        self.message = message
        self.metadata = {k: str(v) for k, v in metadata.items()}


class InvalidArgument(CorralError):
    reason = "INVALID_ARGUMENT"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}", field=field)
        self.field = field
        self.description = message


class NotFound(CorralError):
    reason = "NOT_FOUND"


class TaskNotFound(NotFound):
    reason = "TASK_NOT_FOUND"


class TeammateNotFound(NotFound):
    reason = "TEAMMATE_NOT_FOUND"


class PlanNotFound(NotFound):
    reason = "PLAN_NOT_FOUND"


class ShutdownRequestNotFound(NotFound):
    reason = "SHUTDOWN_REQUEST_NOT_FOUND"


class AttemptNotFound(NotFound):
    reason = "ATTEMPT_NOT_FOUND"


class ArtifactNotFound(NotFound):
    reason = "ARTIFACT_NOT_FOUND"


class AlreadyExists(CorralError):
    reason = "ALREADY_EXISTS"


class ClaimError(CorralError):
    """A call about a claim that is not the caller's live claim."""


class LeaseExpired(ClaimError):
    reason = "LEASE_EXPIRED"


class ClaimTokenMismatch(ClaimError):
    reason = "CLAIM_TOKEN_MISMATCH"


class TaskCanceled(ClaimError):
    reason = "TASK_CANCELED"


class ClaimRevoked(ClaimError):
    """The Lead took the claim away (RevokeClaim, or its holder was removed)."""

    reason = "CLAIM_REVOKED"


class AttemptTimedOut(ClaimError):
    """The attempt ran past its task's attempt_timeout."""

    reason = "ATTEMPT_TIMEOUT"


class FailedPrecondition(CorralError):
    reason = "FAILED_PRECONDITION"


class Overloaded(CorralError):
    reason = "OVERLOADED"

    def __init__(self, message: str, retry_after_ms: int = 100) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms


class ResourceExhausted(CorralError):
    reason = "RESOURCE_EXHAUSTED"


class OutputLimit(ResourceExhausted):
    """An append would take an attempt's output past the daemon's limit."""

    reason = "OUTPUT_LIMIT"


class ArtifactLimit(ResourceExhausted):
    """An upload's bytes passed the daemon's limit of one artifact."""

    reason = "ARTIFACT_LIMIT"


class ArtifactQuota(ResourceExhausted):
    """An upload's new content would take the board's stored artifacts past its quota."""

    reason = "ARTIFACT_QUOTA"


class Unauthenticated(CorralError):
    reason = "UNAUTHENTICATED"


class PermissionDenied(CorralError):
    reason = "PERMISSION_DENIED"


class Unavailable(CorralError):
    reason = "UNAVAILABLE"


class CommitInDoubt(Unavailable):
    """The write's COMMIT was sent and no answer came back, and the daemon could not learn
    within its bound whether it took effect: it may have. Retrying is safe only with the
    call's request id (or claim token), which makes a second call return the first's outcome."""

    reason = "COMMIT_IN_DOUBT"


class SlowConsumer(Unavailable):
    """A stream's client stopped taking messages; it is ended so that it holds nothing."""

    reason = "SLOW_CONSUMER"


class ReentrantSubmit(RuntimeError):
    """A writer job tried to submit another job: it would wait on itself."""


class Aborted(CorralError):
    """The call lost a race it cannot win, e.g. a superseded Idle stream."""

    reason = "ABORTED"


def _kinds() -> dict[str, type[CorralError]]:
    found: dict[str, type[CorralError]] = {}
    pending: list[type[CorralError]] = [CorralError]
    while pending:
        kind = pending.pop()
        found[kind.__name__] = kind
        pending.extend(kind.__subclasses__())
    return found


def replay(kind: str, message: str, metadata: dict[str, str]) -> CorralError:
    """The error `kind` (a class name) with `message` and `metadata`, as recorded of an
    earlier call, so that call's outcome can be given again without running it."""
    cls = _kinds().get(kind, CorralError)
    if issubclass(cls, InvalidArgument):
        field = metadata.get("field", "")
        return cls(field, metadata.get("description", message.removeprefix(f"{field}: ")))
    if issubclass(cls, Overloaded):
        return cls(message)
    error = cls.__new__(cls)
    CorralError.__init__(error, message, **metadata)
    return error
