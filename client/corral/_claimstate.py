"""What the sync and asyncio claim handles share: a claim's data, its lease
bookkeeping, and the rules for when a failed renew means the claim is lost."""

from __future__ import annotations

import datetime
import time
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

from corral._errors import (
    AttemptTimedOut,
    ClaimRevoked,
    ClaimTokenMismatch,
    CorralError,
    FieldViolation,
    InvalidArgument,
    LeaseExpired,
    LeaseLost,
    Overloaded,
    TaskCanceled,
)
from corral._outputbuffer import APPEND_MAX_BYTES
from corral._primitives import Flag
from corral._retry import is_transient
from corral._types import (
    Approve,
    Attempt,
    ClaimEnded,
    ClaimEndReason,
    ClaimInfo,
    DependencyArtifact,
    QuestionAnswer,
    Reject,
    ReviewItem,
    Task,
    Usage,
)

__all__ = [
    "DEAD_CLAIM_ERRORS",
    "FEEDBACK_MAX_BYTES",
    "MIN_RENEW_INTERVAL",
    "PROGRESS_MAX_BYTES",
    "QUESTION_MAX_BYTES",
    "ClaimState",
    "check_complete",
    "check_decide",
    "check_feedback",
    "check_output",
    "check_progress",
    "check_question",
    "check_usage",
    "check_verdict",
    "claim_ended_error",
    "end_reason_of",
    "lease_seconds",
    "retry_delay_after_renew_error",
    "seconds_until",
]

# Errors proving the claim is dead: keepalive stops and records LeaseLost.
DEAD_CLAIM_ERRORS = (LeaseExpired, ClaimTokenMismatch, TaskCanceled, ClaimRevoked, AttemptTimedOut)
MIN_RENEW_INTERVAL = 0.05
# The daemon refuses longer progress text (RenewLeaseRequest.progress).
PROGRESS_MAX_BYTES = 1024


def check_progress(text: str, fraction: float | None) -> None:
    """Refuse, before any call, progress the daemon would refuse (InvalidArgument)."""
    if len(text.encode("utf-8")) > PROGRESS_MAX_BYTES:
        _refuse("progress", f"longer than {PROGRESS_MAX_BYTES} bytes of UTF-8")
    if fraction is not None and not 0.0 <= fraction <= 1.0:  # NaN fails both comparisons
        _refuse("progress_fraction", f"{fraction} is outside [0, 1]")


def check_output(data: bytes) -> None:
    """Refuse, before any call, an append the daemon would refuse (InvalidArgument):
    empty, or longer than APPEND_MAX_BYTES."""
    if not data:
        _refuse("data", "must not be empty")
    if len(data) > APPEND_MAX_BYTES:
        _refuse("data", f"longer than {APPEND_MAX_BYTES} bytes of UTF-8")


# The daemon refuses a longer question (AskQuestionRequest.question).
QUESTION_MAX_BYTES = 64 * 1024


def check_question(question: str) -> None:
    """Refuse, before any call, a question the daemon would refuse (InvalidArgument):
    one with no text, or longer than QUESTION_MAX_BYTES of UTF-8."""
    if not question.strip():
        _refuse("question", "must not be empty")
    if len(question.encode("utf-8")) > QUESTION_MAX_BYTES:
        _refuse("question", f"longer than {QUESTION_MAX_BYTES} bytes of UTF-8")


def check_complete(review: ReviewItem | None) -> None:
    """Refuse, before any call, `complete` on a review's claim: the daemon wants a
    verdict and no result there (InvalidArgument)."""
    if review is not None:
        _refuse("result", "a review's claim is answered with decide(corral.Approve() or corral.Reject(feedback))")


# The daemon refuses longer review feedback (ReviewVerdict.feedback, ReviewTaskRequest.feedback).
FEEDBACK_MAX_BYTES = 64 * 1024


def check_verdict(verdict: object, feedback_field: str) -> None:
    """Refuse, before any call, a verdict the daemon would refuse (InvalidArgument): a
    value that is not an Approve or a Reject, a rejection without feedback, or feedback
    over FEEDBACK_MAX_BYTES of UTF-8. `feedback_field` names the feedback as the
    daemon would (`verdict.feedback` on a claim, `feedback` for the Lead)."""
    if not isinstance(verdict, (Approve, Reject)):
        _refuse("verdict", f"expected corral.Approve or corral.Reject, got {type(verdict).__name__}")
    if isinstance(verdict, Reject) and not verdict.feedback.strip():
        _refuse(feedback_field, "a rejection says why: feedback must not be empty")
    check_feedback(verdict.feedback, feedback_field)


def check_feedback(feedback: str, field: str) -> None:
    """Refuse, before any call, feedback over FEEDBACK_MAX_BYTES of UTF-8 (InvalidArgument)."""
    if len(feedback.encode("utf-8")) > FEEDBACK_MAX_BYTES:
        _refuse(field, f"longer than {FEEDBACK_MAX_BYTES} bytes of UTF-8")


def check_decide(review: ReviewItem | None, verdict: object) -> None:
    """Refuse, before any call, a verdict the daemon would refuse on a claim
    (InvalidArgument): one on a work claim, or what `check_verdict` refuses."""
    check_verdict(verdict, "verdict.feedback")
    if review is None:
        _refuse("verdict", "a work claim is finished with complete(result); only a review's claim decides")


# The daemon refuses a longer model name (Usage.model).
MODEL_MAX_CHARS = 200


def check_usage(usage: Usage | None) -> None:
    """Refuse, before any call, a usage report the daemon would refuse (InvalidArgument)."""
    if usage is None:
        return
    for field in ("input_tokens", "output_tokens", "cost_micros"):
        if getattr(usage, field) < 0:
            _refuse(f"usage.{field}", "must not be negative")
    if len(usage.model) > MODEL_MAX_CHARS:
        _refuse("usage.model", f"longer than {MODEL_MAX_CHARS} characters")


_ENDED_ERRORS: dict[ClaimEndReason, type[CorralError]] = {
    ClaimEndReason.LEASE_EXPIRED: LeaseExpired,
    ClaimEndReason.TASK_CANCELED: TaskCanceled,
    ClaimEndReason.TEAMMATE_REMOVED: ClaimRevoked,
    ClaimEndReason.REVOKED: ClaimRevoked,
    ClaimEndReason.ATTEMPT_TIMEOUT: AttemptTimedOut,
}


def claim_ended_error(notice: ClaimEnded) -> CorralError:
    """The error a call with the ended claim's token would get: the cause of its LeaseLost."""
    kind = _ENDED_ERRORS.get(notice.reason, ClaimTokenMismatch)
    return kind(notice.detail or f"claim on task {notice.task_id!r} ended ({notice.reason.name})")


def end_reason_of(cause: CorralError | None) -> ClaimEndReason | None:
    """Why the daemon ended a claim, read from the error a call with its token got."""
    for reason, kind in _ENDED_ERRORS.items():
        if reason is not ClaimEndReason.TEAMMATE_REMOVED and type(cause) is kind:
            return reason
    return None


def _refuse(field: str, why: str) -> NoReturn:
    raise InvalidArgument(f"{field}: {why}", field_violations=[FieldViolation(field, why)])


def lease_seconds(info: ClaimInfo) -> float:
    """The claim's lease length: the task's, else what is left of this one."""
    if info.task.lease_duration > datetime.timedelta(0):
        return info.task.lease_duration.total_seconds()
    return max(seconds_until(info.lease_expire_time), MIN_RENEW_INTERVAL)


def retry_delay_after_renew_error(exc: CorralError, lease_left: float, interval: float) -> float | None:
    """When to try renewing again after `exc`, or None when the claim is lost.

    Transient errors are retried sooner while the lease (as measured
    locally) has time left; any other error, e.g. the teammate having been
    removed, means the claim is gone too.
    """
    if not is_transient(exc) or lease_left <= 0:
        return None
    hint = exc.retry_after.total_seconds() if isinstance(exc, Overloaded) and exc.retry_after else None
    return max(min(hint or lease_left / 3, lease_left, interval), MIN_RENEW_INTERVAL)


def seconds_until(when: datetime.datetime | None) -> float:
    """Seconds from now (wall clock) to `when`; 0 when unknown or past."""
    if when is None:
        return 0.0
    return max((when - datetime.datetime.now(datetime.UTC)).total_seconds(), 0.0)


class ClaimState:
    """A claim's data and lease bookkeeping, common to both claim handles."""

    def __init__(self, info: ClaimInfo) -> None:
        self._info = info
        self._lease_seconds = lease_seconds(info)
        # Renew at a third of the lease: two renews may fail before it ends.
        self._renew_interval = max(self._lease_seconds / 3, MIN_RENEW_INTERVAL)
        self._lease_expire_time = info.lease_expire_time
        self._local_expiry = time.monotonic() + seconds_until(info.lease_expire_time)
        self._protocol_pending = False
        self._lost: LeaseLost | None = None
        self._ended = Flag()
        self._end_reason: ClaimEndReason | None = None
        self._split = False
        self._workspace: Path | None = None

    def __repr__(self) -> str:
        return f"Claim(task={self.task.id!r}, attempt={self.attempt}, fence={self.fence}, lost={self.lost})"

    # ------------------------------------------------------------ data

    @property
    def info(self) -> ClaimInfo:
        """The claim's data as first received."""
        return self._info

    @property
    def task(self) -> Task:
        """The claimed task (as of the claim)."""
        return self._info.task

    @property
    def token(self) -> str:
        """The claim token; the daemon accepts writes about the task only with it."""
        return self._info.token

    @property
    def attempt(self) -> int:
        """Which attempt at the task this claim is (1 for the first)."""
        return self._info.attempt

    @property
    def previous_attempt(self) -> Attempt | None:
        """The task's latest ended claim before this one, with its end and error
        (what went wrong last time); None on the task's first claim."""
        return self._info.previous_attempt

    @property
    def dependency_results(self) -> Mapping[str, bytes]:
        """The results of the task's direct dependencies by task id, in depends_on order
        while they fit 4 MiB in all; `dependency_results_omitted` names the rest."""
        return self._info.dependency_results

    @property
    def dependency_results_omitted(self) -> tuple[str, ...]:
        """Dependencies whose results did not fit the claim; `get_task(id).result` has each."""
        return self._info.dependency_results_omitted

    @property
    def dependency_artifacts(self) -> tuple[DependencyArtifact, ...]:
        """The artifacts of the task's direct dependencies (each one's `Task.artifacts`),
        in depends_on order: references; `get_artifact` reads the bytes."""
        return self._info.dependency_artifacts

    @property
    def answers(self) -> tuple[QuestionAnswer, ...]:
        """Every question asked on this task (`ask`) and the Lead's answer, oldest first:
        a task claimed again after its question was answered resumes with them."""
        return self._info.answers

    @property
    def review(self) -> ReviewItem | None:
        """Set on a review's claim: the result to judge (`task` is the task under
        review, IN_REVIEW). Answer with `decide`, not `complete`. None on a work claim."""
        return self._info.review

    @property
    def rejected_result(self) -> bytes:
        """On a rework after a rejection: the result the review rejected, to revise
        (`previous_attempt.feedback` says why); b"" otherwise."""
        return self._info.rejected_result

    @property
    def workspace(self) -> Path | None:
        """The claim's own git worktree when `run_teammate` runs with
        `workspace=corral.GitWorktree(repo)`: a checkout on the branch
        `corral/<task>/<attempt>` to do the work in (the process's working directory
        is not changed: handlers share it). None without one, and on a review's claim."""
        return self._workspace

    def _set_workspace(self, path: Path) -> None:
        self._workspace = path

    @property
    def fence(self) -> int:
        """Board-wide increasing number; pass it to external systems to fence
        stale holders."""
        return self._info.fence

    @property
    def lease_expire_time(self) -> datetime.datetime | None:
        """When the lease ends (daemon clock) unless renewed."""
        return self._lease_expire_time

    @property
    def protocol_pending(self) -> bool:
        """True when the last renew said a shutdown request or plan decision waits."""
        return self._protocol_pending

    @property
    def split(self) -> bool:
        """True once `propose_tasks(..., block=True)` split the task: the claim is over
        (its holder ended it, as with `complete`), and the task waits for the tasks
        proposed. `run_teammate` reports nothing more for a handler that split its task."""
        return self._split

    @property
    def lost(self) -> bool:
        """True once the keepalive (or a renew) found the lease lost."""
        return self._lost is not None

    @property
    def lost_error(self) -> LeaseLost | None:
        """The recorded LeaseLost, if any; `cause` is None for an unconfirmed loss."""
        return self._lost

    @property
    def ended(self) -> Flag:
        """Set once the claim ended under its holder: the daemon ended it (revoke,
        cancel, attempt time limit, lease expiry: its stream says so at once) or the
        lease was lost. Like a `threading.Event`: poll `ended.is_set()` (or `if
        claim.ended:`), or block in `ended.wait(timeout)`. `end_reason` says why."""
        return self._ended

    @property
    def end_reason(self) -> ClaimEndReason | None:
        """Why the daemon ended this claim under its holder, when known; else None."""
        return self._end_reason

    def check(self) -> None:
        """Raise ClaimEndedError (a LeaseLost) once the claim ended or its lease was
        lost; call it between steps of long work."""
        if self._lost is not None:
            raise self._lost
