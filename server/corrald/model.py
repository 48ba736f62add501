"""Domain types: plain values the store hands out and the layers above pass around (no SQL, no wire types)."""

from __future__ import annotations

import collections
import dataclasses
import enum
import sqlite3
import typing

from .errors import CorralError


class TaskState(enum.IntEnum):
    """Numbers match corral.v1.TaskState on the wire."""

    PENDING = 1
    IN_PROGRESS = 2
    COMPLETED = 3
    FAILED = 4
    CANCELED = 5
    NEEDS_INPUT = 6  # its holder asked the Lead a question; claimed by no one until answered
    IN_REVIEW = 7  # completed by its holder, waiting for a review (TaskSpec.review) before COMPLETED

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


def attempts_used(state: int, failures: int) -> int:
    """The attempts a task has used that count toward its max_attempts: its claims
    ended by failure or expiry (`failures`, which a retry with reset_attempts sets to
    0), plus the live claim or the one that completed it. A release or a cancel uses none."""
    return failures + 1 if state in _USING_AN_ATTEMPT else failures


_USING_AN_ATTEMPT = frozenset(
    (int(TaskState.IN_PROGRESS), int(TaskState.COMPLETED), int(TaskState.IN_REVIEW))
)  # plain ints: read per row


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
    kind: str  # "message" | "shutdown_request" | "plan_decision"
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


@dataclasses.dataclass
class Wakes:
    """What a committed job changed, for the wake hub (after COMMIT only)."""

    ready_roles: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    teammates: set[str] = dataclasses.field(default_factory=set)  # their inbox or claims changed
    may_claim: set[str] = dataclasses.field(default_factory=set)  # of those: a slot freed or a gate opened
    everyone: bool = False
    ended: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> why
    next_deadline_ms: int | None = None
    events: bool = False
    # Operation counts for metrics: claims, completions, failures, expirations...
    tally: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    # What happened, for the daemon's log (written after COMMIT): (event, fields).
    activity: list[tuple[str, dict[str, object]]] = dataclasses.field(default_factory=list)
    # Claims made inside another teammate's job for a stream that waited (see
    # delivery.serve_waiters): each goes out on its teammate's open stream.
    handed: dict[str, list[HandedClaim]] = dataclasses.field(default_factory=dict)
    # Teammates whose spending reached their budget in this job: each stream hears it once.
    exhausted: dict[str, BudgetExhausted] = dataclasses.field(default_factory=dict)
    # Claims that died under their holders (expiry, cancel, removal, revocation,
    # attempt timeout): each holder's open stream is told once this commits.
    claims_ended: dict[str, list[ClaimEnd]] = dataclasses.field(default_factory=dict)
    # Teammates whose stream opened (on a board other daemons serve too, their older
    # stream there ends), and whether a credential was removed: for those daemons only.
    streams_opened: set[str] = dataclasses.field(default_factory=set)
    credentials: bool = False

    def note(self, event: str, **fields: object) -> None:
        """Record one thing that happened, to be logged once its transaction commits."""
        self.activity.append((event, fields))

    def claim_ended(self, holder: str, end: ClaimEnd) -> None:
        self.claims_ended.setdefault(holder, []).append(end)

    def deadline(self, at_ms: int) -> None:
        if self.next_deadline_ms is None or at_ms < self.next_deadline_ms:
            self.next_deadline_ms = at_ms

    def merge(self, other: Wakes) -> None:
        self.ready_roles.update(other.ready_roles)
        self.teammates |= other.teammates
        self.may_claim |= other.may_claim
        self.everyone = self.everyone or other.everyone
        self.ended.update(other.ended)
        if other.next_deadline_ms is not None:
            self.deadline(other.next_deadline_ms)
        self.events = self.events or other.events
        self.tally.update(other.tally)
        self.activity.extend(other.activity)
        for name, claims in other.handed.items():
            self.handed.setdefault(name, []).extend(claims)
        self.exhausted.update(other.exhausted)
        for name, ends in other.claims_ended.items():
            self.claims_ended.setdefault(name, []).extend(ends)
        self.streams_opened |= other.streams_opened
        self.credentials = self.credentials or other.credentials

    def __bool__(self) -> bool:
        return bool(
            self.ready_roles
            or self.teammates
            or self.everyone
            or self.ended
            or self.events
            or self.next_deadline_ms is not None
            or self.tally
            or self.activity
            or self.handed
            or self.exhausted
            or self.claims_ended
            or self.streams_opened
            or self.credentials
        )


@dataclasses.dataclass(frozen=True, slots=True)
class OpOutcome:
    """What an op ended with: an error, or its value (a lease end, a task seq, an
    acknowledged seq) and flag (renew: a protocol message waits)."""

    value: int | None = None
    flag: bool = False
    error: CorralError | None = None
    response: bytes | None = None  # a unary write's answer, as sent (a request id's record)


class DeadlineWatch:
    """The writer's lower bound on the earliest of some deadlines (every live lease's end;
    every shut time gate), so a job skips the query for what is due while `now` is before
    it (design: no query for what the writer already knows).

    Only ever too early, never too late: a new deadline lowers it, a deadline moved later
    (a renewal) leaves it, and anything the writer cannot follow (a restart's extension, a
    job or batch rolled back) forgets it, so the next look queries and sets it again from
    the table.
    """

    __slots__ = ("earliest_ms",)

    def __init__(self) -> None:
        self.earliest_ms: int | None = None  # None: unknown, query

    def none_due(self, now_ms: int) -> bool:
        return self.earliest_ms is not None and now_ms < self.earliest_ms

    def lowered_to(self, deadline_ms: int) -> None:
        if self.earliest_ms is not None:
            self.earliest_ms = min(self.earliest_ms, deadline_ms)

    def learned(self, earliest_ms: int | None) -> None:
        """After a look at the table: the earliest deadline left (None: none left, so none is
        due before one set from now on, each of which lowers the bound)."""
        self.earliest_ms = earliest_ms if earliest_ms is not None else _NONE_LEFT

    def forget(self) -> None:
        self.earliest_ms = None


_NONE_LEFT = 2**62  # later than any deadline


@dataclasses.dataclass(slots=True)
class Txn:
    """One job's view of the open transaction: the connection, `now`, wake notes, and what
    the writer knows of the leases and time gates across jobs (fresh, unknowing ones by
    default)."""

    conn: sqlite3.Connection
    now_ms: int
    wakes: Wakes = dataclasses.field(default_factory=Wakes)
    leases: DeadlineWatch = dataclasses.field(default_factory=DeadlineWatch)
    gates: DeadlineWatch = dataclasses.field(default_factory=DeadlineWatch)
    # Tasks this job's completions made ready (by seq): a claim of one of them in
    # the same job wakes no other stream for it.
    made_ready: set[int] = dataclasses.field(default_factory=set)
    # A Session op's record that the op's first statement is to write (store/ops.py).
    op_record: PendingOpRecord | None = None
    # The job's first statement, run already by the writer for a run of jobs (`Mergeable`);
    # the job sets it back to None as it takes it (a job that did not fails: see writer.py).
    ahead: RanAhead | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Completion:
    """A holder's completion of its claim, as CompleteTask and a Session op carry it."""

    teammate: str
    task_id: str
    token: str
    result: bytes
    verdict: Verdict | None = None  # a review's claim is completed with one, any other without


@dataclasses.dataclass(frozen=True, slots=True)
class OpCompletion:
    """A Session op's completion: its op id and digest name the record written with it."""

    op_id: str
    digest: bytes
    completion: Completion


@dataclasses.dataclass(frozen=True, slots=True)
class Mergeable:
    """What a job's first statement needs, for a writer that runs that statement once for
    a run of such jobs queued one after another (`run_many(conn, now_ms, requests)`: one
    result per request, in order) and gives each job its result (`Txn.ahead`).

    The jobs of a run act as if each had run its first statement when the run did, ahead
    of the rest of the jobs queued before it: so a run holds one job per `subject` (whose
    job it is), and a job learns whether its result's reads are still the board's. They
    are not once a job run since changed its subject's rows; `touched` says whose rows a
    job's wake-ups show it changed (None: anyone's may have)."""

    run_many: typing.Callable[[typing.Any, int, list[typing.Any]], list[typing.Any]]
    request: typing.Any
    subject: str
    touched: typing.Callable[[Wakes], typing.Collection[str] | None]


@dataclasses.dataclass(frozen=True, slots=True)
class RanAhead:
    """A job's result of its first statement, run for its run of jobs (see `Mergeable`).
    `fresh`: what it read of the job's subject is still what the board holds."""

    request: typing.Any
    row: typing.Any
    fresh: bool


@dataclasses.dataclass(slots=True)
class PendingOpRecord:
    """A Session op's record, written by the first statement of the op's body instead of
    a statement of its own (store/ops.py `run_once`): `params` go to store/postgres/fused.py's `RECORD_CLAUSE`.
    `seq` is the record's once written, and `changes` the connection's count of rows
    changed then (what the body wrote after it is what `run_once` must not lose)."""

    params: tuple[str, str, bytes, int]
    seq: int | None = None
    changes: int = 0


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


@dataclasses.dataclass(frozen=True, slots=True)
class FeedPage:
    """Events of the log in order, each with the task or teammate it is about, and
    whether more events follow them already."""

    items: list[tuple[Event, TaskRecord | None, TeammateRecord | None]]
    more: bool
