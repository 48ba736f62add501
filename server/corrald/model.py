"""Domain types: plain values the store hands out and the layers above pass around (no SQL, no wire types)."""

from __future__ import annotations

import dataclasses
import enum
import typing


class TaskState(enum.IntEnum):
    """Numbers match corral.v1.TaskState on the wire."""

    PENDING = 1
    IN_PROGRESS = 2
    COMPLETED = 3
    FAILED = 4
    CANCELED = 5
    NEEDS_INPUT = 6  # its holder asked the Lead a question; claimed by no one until answered
    IN_REVIEW = 7  # completed by its holder, waiting for a review (TaskSpec.review) before COMPLETED
    PROPOSED = 8  # proposed by a teammate, waiting for the Lead's decision; never claimed

    @property
    def is_final(self) -> bool:
        """True for states a task never leaves (the SDK's TaskState has the same name)."""
        return self in (TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED)


class TeammateStatus(enum.IntEnum):
    """Numbers match corral.v1.TeammateStatus on the wire."""

    OFFLINE = 1
    IDLE = 2
    BUSY = 3
    AWAITING_PLAN = 4
    SHUTTING_DOWN = 5
    REMOVED = 6
    WAITING = 7


class ClaimOutcome(enum.StrEnum):
    """How a claim ended; NULL in the history table means it is live."""

    COMPLETED = "completed"
    EXPIRED = "expired"
    FAILED = "failed"
    RELEASED = "released"
    CANCELED = "canceled"
    REVOKED = "revoked"
    # Ran past the task's attempt_timeout: a failure, shown as FAILED on the wire.
    TIMED_OUT = "timed_out"
    # Its holder asked the Lead a question (the task waits NEEDS_INPUT); uses no attempt.
    ASKED = "asked"
    # A review's verdict (a review's claim, or the Lead's ReviewTask): COMPLETED, or rework.
    APPROVED = "approved"
    REJECTED = "rejected"
    # Its holder split the task on tasks it proposed (the task waits for them); uses no attempt.
    SPLIT = "split"


class TaskCreation(enum.IntEnum):
    """How a teammate's proposed tasks land; numbers match corral.v1.TaskCreationPolicy."""

    PROPOSE = 1  # PROPOSED, for the Lead to decide (the default)
    ALLOW = 2  # PENDING at once
    DENY = 3  # refused, nothing written


class ClaimEndReason(enum.IntEnum):
    """Why a claim died under its holder; numbers match corral.v1.ClaimEndReason."""

    LEASE_EXPIRED = 1
    TASK_CANCELED = 2
    TEAMMATE_REMOVED = 3
    REVOKED = 4
    ATTEMPT_TIMEOUT = 5


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimEnd:
    """A claim that died under its holder, for the holder's open stream (after COMMIT)."""

    task_id: str
    token: str
    reason: ClaimEndReason
    detail: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class TaskSpec:
    """A validated, defaulted task specification."""

    id: str
    title: str
    description: str
    payload: bytes
    depends_on: tuple[str, ...]
    priority: int
    max_attempts: int
    lease_ms: int
    required_role: str
    # The time gates (None: unset). On the wire they are optional, and a raw spec
    # keeps "unset" apart from zero; a normalized one has the backoffs defaulted.
    not_before_ms: int | None = None
    retry_backoff_ms: int | None = None
    retry_backoff_max_ms: int | None = None
    trace_parent: str = ""  # a W3C traceparent, checked (validate.check_trace_parent)
    concurrency_key: str = ""  # '' for none: no limit applies
    attempt_timeout_ms: int | None = None  # None: no limit
    review: ReviewPolicy | None = None  # None: a completion completes the task
    # Path leases held while IN_PROGRESS (store/leases.py): exclusive, and shared.
    resources: tuple[str, ...] = ()
    shared_resources: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class ReviewPolicy:
    """Who reviews a task's result before it is COMPLETED, and how many rejections it takes."""

    reviewer_role: str  # '' : the Lead (ReviewTask)
    max_rounds: int  # the rejections after which the task fails (0 in a raw spec: the default)


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """A review's answer: approve, or reject with feedback (required then)."""

    approve: bool
    feedback: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class ReviewItem:
    """What a review's claim carries: the result to review, whose it is, and which round."""

    result: bytes
    author: str
    round: int


class Usage(typing.NamedTuple):
    """What a teammate reported spending (an increment, or a sum of them); `model` is
    the latest model named (a sum keeps the last one seen, or none). A named tuple, as
    TaskRecord, which holds one."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_micros: int = 0
    model: str = ""

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


NO_USAGE = Usage()


@dataclasses.dataclass(frozen=True, slots=True)
class Budget:
    """A spending limit; 0 means no limit on that measure."""

    max_cost_micros: int = 0
    max_tokens: int = 0

    def spent_by(self, usage: Usage) -> bool:
        """Whether `usage` reached either limit (the budget gate is closed)."""
        return (0 < self.max_cost_micros <= usage.cost_micros) or (0 < self.max_tokens <= usage.tokens)


class ArtifactRecord(typing.NamedTuple):
    """A file attached to a task by the holder of one of its claims (PutArtifact)."""

    name: str
    media_type: str
    size: int
    sha256: str  # lowercase hex
    attempt: int  # the attaching claim's
    create_ms: int


class TaskRecord(typing.NamedTuple):
    """A task as stored. A named tuple, not a frozen dataclass: every claim and every
    completion builds one, and a frozen dataclass of this many fields takes several
    times as long to build (each field set through object.__setattr__)."""

    seq: int
    id: str
    title: str
    description: str
    payload: bytes
    depends_on: tuple[str, ...]
    priority: int
    required_role: str
    max_attempts: int
    lease_ms: int
    state: TaskState
    owner: str
    attempt: int
    result: bytes
    error: str
    create_ms: int
    lease_expire_ms: int | None
    finish_ms: int | None
    not_before_ms: int | None
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    ready_ms: int | None  # the latest time gate: not_before, or the end of a retry's backoff
    progress: str = ""
    progress_fraction: float | None = None
    progress_ms: int | None = None
    trace_parent: str = ""
    concurrency_key: str = ""
    usage: Usage = NO_USAGE
    attempt_timeout_ms: int | None = None
    attempts_used: int = 0  # those that count toward max_attempts (see `attempts_used`)
    question: str = ""  # NEEDS_INPUT: the question waiting for the Lead's answer
    review: ReviewPolicy | None = None  # as created; None: no review
    review_rounds: int = 0  # the rejections so far
    proposed_by: str = ""  # the teammate that proposed it ('' : the Lead created it)
    discovered_from: str = ""  # the task whose claim it was proposed from ('' : none named)
    resources: tuple[str, ...] = ()  # as created: held exclusively while IN_PROGRESS
    shared_resources: tuple[str, ...] = ()  # as created: held shared while IN_PROGRESS
    # The current artifact of each name, by name; filled only by the reads that show
    # them (GetTask, ListTasks, a claim's task), () elsewhere.
    artifacts: tuple[ArtifactRecord, ...] = ()


def attempts_used(state: int, failures: int) -> int:
    """The attempts a task has used that count toward its max_attempts: its claims
    ended by failure or expiry (`failures`, which a retry with reset_attempts sets to
    0), plus the live claim or the one that completed it. A release or a cancel uses none."""
    return failures + 1 if state in USING_AN_ATTEMPT else failures


# The states whose task's live or completing claim uses an attempt (`attempts_used`);
# plain ints, read per row (a task's row applies the rule in place: store/tasks/rows.py).
USING_AN_ATTEMPT = frozenset((int(TaskState.IN_PROGRESS), int(TaskState.COMPLETED), int(TaskState.IN_REVIEW)))


@dataclasses.dataclass(frozen=True, slots=True)
class ConcurrencyLimit:
    """A concurrency key's limit (0: none) and how many of its tasks are IN_PROGRESS now."""

    key: str
    limit: int
    in_progress: int


@dataclasses.dataclass(frozen=True, slots=True)
class BudgetExhausted:
    """A teammate's spending reached its budget: a stream item and a Watch event."""

    teammate: str
    spent: Usage
    budget: Budget

    @staticmethod
    def of_event(data: dict) -> BudgetExhausted:
        """The notice a `budget_exhausted` event recorded (see store/usage.py)."""
        spent = Usage(data["input_tokens"], data["output_tokens"], data["cost_micros"], data["model"])
        return BudgetExhausted(data["name"], spent, Budget(data["max_cost_micros"], data["max_tokens"]))


@dataclasses.dataclass(frozen=True, slots=True)
class Progress:
    """A holder's progress note, sent with a renewal and checked (`validate.progress`)."""

    text: str
    fraction: float | None


class CreatedTask(typing.NamedTuple):
    """Where one task of a CreateTasks batch stands: what the caller did not send.

    A tuple, not a dataclass: a batch makes 10,000 of them inside a writer job."""

    id: str
    seq: int
    state: TaskState
    create_ms: int
    finish_ms: int | None
    max_attempts: int  # as stored: the defaults applied
    lease_ms: int


class CanceledTask(typing.NamedTuple):
    """A task a CancelTasks call canceled, with why."""

    id: str
    seq: int
    error: str
    finish_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class CreatedBatch:
    """A CreateTasks batch as stored: every task of it, in its order, and the ids
    that were on the board already with the same spec (left as they were)."""

    tasks: list[CreatedTask]
    unchanged_ids: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One claim of a task as its history shows it (never its token)."""

    attempt: int
    owner: str
    fence: int
    claim_ms: int
    end_ms: int | None  # None while the claim is live
    outcome: ClaimOutcome | None  # None while the claim is live
    error: str
    review_round: int | None = None  # a review's claim (or the Lead's decision): its round
    feedback: str = ""  # a review's feedback


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimGrant:
    task: TaskRecord
    token: str
    lease_expire_ms: int
    attempt: int
    fence: int
    # The task's latest ended claim before this one; None on its first claim.
    previous_attempt: AttemptRecord | None = None
    # Its direct dependencies' results, (id, result) in depends_on order within
    # the claim's budget, and the ids of those left out.
    dependency_results: tuple[tuple[str, bytes], ...] = ()
    dependency_results_omitted: tuple[str, ...] = ()
    # Every question asked on the task and its answer, oldest first.
    answers: tuple[QuestionAnswer, ...] = ()
    review: ReviewItem | None = None  # a review's claim: what to review
    rejected_result: bytes = b""  # a rework: the result the last review rejected
    # The current artifacts of its direct dependencies, (id, artifact) in depends_on order.
    dependency_artifacts: tuple[tuple[str, ArtifactRecord], ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class QuestionAnswer:
    """A question a holder asked the Lead about a task, and the answer (None until given)."""

    question: str
    asked_by: str
    ask_ms: int
    answer: str | None
    answer_ms: int | None


@dataclasses.dataclass(frozen=True, slots=True)
class InboxItem:
    """One per-recipient inbox entry: a plain message or a protocol message."""

    seq: int
    kind: str  # "message" | "shutdown_request" | "plan_decision" | "proposals_decided"
    send_ms: int
    sender: str = ""
    body: str = ""
    ref: str = ""  # request_id or plan_id
    approve: bool = False
    deadline_ms: int | None = None

    @property
    def is_protocol(self) -> bool:
        return self.kind != "message"


@dataclasses.dataclass(frozen=True, slots=True)
class TeammateRecord:
    name: str
    roles: tuple[str, ...]
    require_plan_approval: bool
    status: TeammateStatus
    held_task_ids: tuple[str, ...]
    waiting_for_task_ids: tuple[str, ...] = ()
    usage: Usage = NO_USAGE
    budget: Budget = Budget()  # the effective one: its own, else the "*" default
    daemon: str = ""  # the daemon whose stream serves it, on a PostgreSQL board ('' while offline)
    task_creation: TaskCreation = TaskCreation.PROPOSE  # the effective one: its own, else the "*" default


@dataclasses.dataclass(frozen=True, slots=True)
class ViewerRecord:
    name: str
    created_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class TeammateView:
    """A teammate as the delivery decision reads it, in one statement."""

    roles: tuple[str, ...]
    require_plan: bool
    acked_seq: int
    last_seq: int
    last_expiry_ms: int  # the latest lease end reclaimed from it
    shutdown_pending: bool  # a shutdown request it has not answered
    budget_spent: bool = False  # its spending reached its budget: the budget gate is closed
    stream_epoch: int = 0  # its newest stream's (team.set_online)


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimRef:
    """A live claim, without the task: enough to decide whether to re-send it."""

    task_seq: int
    token: str
    lease_expire_ms: int
    attempt: int
    fence: int


class DeliveryView(typing.NamedTuple):
    """What the delivery decision needs of a teammate, and its live claims."""

    teammate: TeammateView
    held: list[ClaimRef]


# The event kinds about one task, whose data is the task's mutable part (the
# rest is joined from the task's row when read): a change of state, and
# progress sent by its holder.
TASK_EVENT_KINDS = frozenset({"task_changed", "task_progress"})


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    seq: int
    time_ms: int
    kind: str
    data: dict


@dataclasses.dataclass(frozen=True, slots=True)
class HandedClaim:
    """A claim made for a teammate inside another job, to go out on its open stream."""

    grant: ClaimGrant
    can_claim: bool  # whether the teammate still had a free slot and open gates after it


@dataclasses.dataclass(frozen=True, slots=True)
class Completion:
    """A holder's completion of its claim, as CompleteTask and a Session op carry it."""

    teammate: str
    task_id: str
    token: str
    result: bytes
    verdict: Verdict | None = None  # a review's claim is completed with one, any other without


@dataclasses.dataclass(frozen=True, slots=True)
class Proposed:
    """What a teammate's proposal left: its tasks in its order, and the task it split
    (None when it split none)."""

    tasks: list[TaskRecord]
    split_task: TaskRecord | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class OpCompletion:
    """A Session op's completion: its op id and digest name the record written with it."""

    op_id: str
    digest: bytes
    completion: Completion


@dataclasses.dataclass(frozen=True, slots=True)
class TaskPage:
    """One page of a task listing, whether tasks matching the same filter follow it,
    and why each PENDING task of it that waits does (by seq)."""

    tasks: list[TaskRecord]
    more: bool
    waiting: dict[int, WaitingFor] = dataclasses.field(default_factory=dict)


class TeammateAvailability(enum.IntEnum):
    """Whether anyone is there to take a task (the wire's TeammateAvailability)."""

    SOME_ONLINE = 0
    NONE_REGISTERED = 1
    NONE_ONLINE = 2


@dataclasses.dataclass(frozen=True, slots=True)
class WaitingFor:
    """What holds a PENDING task back: unmet dependencies (ids), a shut time gate
    (when it opens), its concurrency key at its limit, nobody to take it."""

    dependencies: tuple[str, ...]
    ready_ms: int | None
    teammates: TeammateAvailability
    full_key: str = ""  # its concurrency key, while the key is at its limit
    resources: tuple[ResourceWait, ...] = ()  # its resources held by tasks IN_PROGRESS


@dataclasses.dataclass(frozen=True, slots=True)
class ResourceWait:
    """A PENDING task's resource that conflicts with one a task IN_PROGRESS holds."""

    resource: str  # the waiting task's
    held_by_task_id: str
    held_resource: str
    held_exclusive: bool


@dataclasses.dataclass(frozen=True, slots=True)
class HeldResource:
    """A resource a task IN_PROGRESS holds, and who holds its claim."""

    resource: str
    task_id: str
    teammate: str
    exclusive: bool


@dataclasses.dataclass(frozen=True, slots=True)
class FeedPage:
    """Events of the log in order, each with the task or teammate it is about, and
    whether more events follow them already."""

    items: list[tuple[Event, TaskRecord | None, TeammateRecord | None]]
    more: bool
