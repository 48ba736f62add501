"""The SDK's value types: frozen dataclasses and enums, free of wire types.

Everything a caller sees is defined here; `_convert` is the only module that
turns these into `corral.v1` messages and back. Enum values equal the wire
numbers so conversion is a lookup, but callers should use the names.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "Approve",
    "Artifact",
    "ArtifactAdded",
    "Attempt",
    "AttemptOutcome",
    "ClaimInfo",
    "DependencyArtifact",
    "ExitReason",
    "IdleTimeout",
    "LeadMessage",
    "Message",
    "NewTeammate",
    "OutputChunk",
    "PlanDecision",
    "PlanDecided",
    "PlanSubmitted",
    "ProposalsDecided",
    "ProposalsDecidedEvent",
    "QuestionAnswer",
    "QuestionAnswered",
    "QuestionAsked",
    "Reject",
    "ReviewDecided",
    "ReviewItem",
    "ReviewPolicy",
    "RunSummary",
    "ShutdownAnswered",
    "ShutdownRequest",
    "Stats",
    "Task",
    "TaskChanged",
    "TaskCreationPolicy",
    "TaskSpec",
    "TaskState",
    "TasksProposed",
    "TeammateChangeReason",
    "TeammateChanged",
    "TeammateInfo",
    "TeammateStatus",
    "Verdict",
    "WatchEvent",
    "WriterStats",
]


class TaskState(enum.Enum):
    """Where a task is in its life. COMPLETED, FAILED and CANCELED are final.

    NEEDS_INPUT: its holder asked the Lead a question (`Claim.ask`); no one claims
    it until `Lead.answer_question` makes it PENDING again. Unfinished, like
    PENDING: its dependents wait, and a board holding one is not done.

    IN_REVIEW: its holder completed it, but it was created with a `ReviewPolicy`:
    its result (`Task.result`) waits for a reviewer's verdict (`Claim.decide`) or
    the Lead's (`Lead.review_task`). Unfinished too: its dependents wait.

    PROPOSED: a teammate proposed it (`Claim.propose_tasks`) and it waits for the
    Lead's decision (`Lead.decide_proposals`): never claimed, unfinished (its
    dependents wait). Approved it is PENDING; rejected, CANCELED.
    """

    PENDING = 1
    IN_PROGRESS = 2
    COMPLETED = 3
    FAILED = 4
    CANCELED = 5
    NEEDS_INPUT = 6
    IN_REVIEW = 7
    PROPOSED = 8

    @property
    def is_final(self) -> bool:
        """True for states a task never leaves."""
        return self in (TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED)


class TeammateStatus(enum.Enum):
    """What a teammate is doing, as the daemon sees it."""

    OFFLINE = 1
    IDLE = 2
    BUSY = 3
    AWAITING_PLAN = 4
    SHUTTING_DOWN = 5
    REMOVED = 6
    # Online with nothing to do now, but a task it could take is still to come.
    WAITING = 7


class TeammateChangeReason(enum.Enum):
    """Why a `TeammateChanged` watch event was emitted."""

    UNSPECIFIED = 0
    JOINED = 1
    IDLE = 2
    IDLE_TIMEOUT = 3
    SHUTTING_DOWN = 4
    LEFT = 5
    REMOVED = 6
    BUSY = 7
    AWAITING_PLAN = 8
    ADDED = 9
    WAITING = 10


@dataclass(frozen=True)
class ReviewPolicy:
    """A task whose completed result needs an approved review before it is COMPLETED.

    `reviewer_role`: a teammate holding this role reviews (never the author of the
    result); empty, the Lead does (`Lead.review_task`). `max_rounds` (1 to 20; 0:
    the daemon's 3) is how many rejections fail the task, so a result that never
    satisfies the reviewer cannot loop forever.
    """

    reviewer_role: str = ""
    max_rounds: int = 0


@dataclass(frozen=True)
class TaskSpec:
    """What the Lead asks for when creating a task.

    `None` (or zero) for `max_attempts` and `lease_duration` means "the
    daemon's default"; `depends_on` may name tasks in the same batch or
    already on the board.

    `not_before` keeps the task from being claimed before that instant.
    After a retryable failure or an expired lease the task waits
    `retry_backoff` (None: 1 s; zero: no wait), doubled after each further
    failure (less up to a fifth, at random) and at most `retry_backoff_max`
    (None: 100 times `retry_backoff`).

    `concurrency_key` ties the task to a shared resource (a provider, a
    repository): while the key's limit (`Lead.set_concurrency_limit`) of its
    tasks are IN_PROGRESS, claims pass over its other tasks. Empty, or a key
    with no limit set: no limit.
    `attempt_timeout` (None: no limit; 1 s to 7 days) bounds one attempt,
    renewals or not: past it the claim ends (`ClaimEnded` ATTEMPT_TIMEOUT) and
    counts as a failure, retried after the backoff while attempts remain.

    `resources` (exclusive) and `shared_resources` are path leases: `/`-separated
    paths with an optional scheme (`repo:web/src/api`, `db:staging`), at most 16
    of each kind and 200 characters each. Two overlap when equal or one is the
    other's ancestor at a `/`. A claim passes over the task while an overlapping
    resource is held by a task IN_PROGRESS, unless both are shared.
    """

    id: str
    title: str = ""
    description: str = ""
    payload: bytes = b""
    depends_on: tuple[str, ...] = ()
    priority: int = 0
    max_attempts: int | None = None
    lease_duration: datetime.timedelta | None = None
    required_role: str = ""
    not_before: datetime.datetime | None = None
    retry_backoff: datetime.timedelta | None = None
    retry_backoff_max: datetime.timedelta | None = None
    # A W3C traceparent for the work on the task; empty, and OpenTelemetry
    # installed: create_tasks fills in the caller's current span.
    trace_parent: str = ""
    concurrency_key: str = ""
    attempt_timeout: datetime.timedelta | None = None
    # Set: a completion puts the task IN_REVIEW until a review approves it.
    review: ReviewPolicy | None = None
    resources: tuple[str, ...] = ()
    shared_resources: tuple[str, ...] = ()


@dataclass(frozen=True)
class Approve:
    """A review's verdict: the result is good, the task COMPLETED with it. `feedback`
    (optional, at most 64 KiB of UTF-8) is kept on the review's attempt."""

    feedback: str = ""

    @property
    def approve(self) -> bool:
        """True: the wire's ReviewVerdict.approve."""
        return True


@dataclass(frozen=True)
class Reject:
    """A review's verdict: the result goes back for rework. `feedback` says what to
    change: required and at most 64 KiB of UTF-8 (`Claim.decide` and
    `Lead.review_task` refuse an empty one with InvalidArgument before any call).
    The next work claim carries it (`previous_attempt.feedback`) with the result it
    rejects (`Claim.rejected_result`)."""

    feedback: str

    @property
    def approve(self) -> bool:
        """False: the wire's ReviewVerdict.approve."""
        return False


Verdict = Approve | Reject
"""What a review decides: `Claim.decide`, a `run_teammate` reviewer's return value,
`Lead.review_task`, and `Attempt.verdict`."""


class AttemptOutcome(enum.Enum):
    """How one claim of a task ended (IN_PROGRESS: it is the live claim)."""

    IN_PROGRESS = 1
    COMPLETED = 2
    FAILED = 3
    EXPIRED = 4
    RELEASED = 5
    CANCELED = 6
    REVOKED = 7
    ASKED = 8  # its holder asked the Lead a question (`Claim.ask`): uses no attempt
    REJECTED = 9  # a review rejected the result (`Attempt.feedback`): rework, using no attempt
    # Its holder split the task on proposed tasks (`Claim.propose_tasks(..., block=True)`):
    # it waits for them, using no attempt. A rejected split's `error` says so and why.
    SPLIT = 10


class TaskCreationPolicy(enum.Enum):
    """How a teammate's proposed tasks land (`Lead.set_task_creation`)."""

    PROPOSE = 1  # the default: PROPOSED, waiting for the Lead's `decide_proposals`
    ALLOW = 2  # PENDING at once
    DENY = 3  # refused (PermissionDenied), nothing written


@dataclass(frozen=True)
class Attempt:
    """One claim of a task, live or ended, as its history shows it.

    `attempt` counts failures and expiries (a release does not use one up),
    so two entries may share a number; `fence` is the claim's own. `error` is
    FailTask's error, the expiry's or cancel's reason, or empty.

    A review's claim (or the Lead's `review_task`, owner "lead") carries its
    `verdict` once decided: an approval ends COMPLETED, a rejection REJECTED with
    the verdict's `feedback` (which a rework's `previous_attempt` passes on).
    """

    attempt: int
    owner: str
    fence: int
    claim_time: datetime.datetime | None
    end_time: datetime.datetime | None  # None while in progress
    outcome: AttemptOutcome
    error: str = ""
    verdict: Verdict | None = None  # a review's verdict; None for work
    feedback: str = ""  # a rejection's feedback (REJECTED)


class TeammateAvailability(enum.Enum):
    """Whether anyone is there to take a waiting task."""

    SOME_ONLINE = 0
    NONE_REGISTERED = 1  # no teammate holds its required role (or none is registered)
    NONE_ONLINE = 2  # some are registered, none is online


@dataclass(frozen=True)
class ResourceWait:
    """One of a PENDING task's resources that a task IN_PROGRESS holds in a
    conflicting way: the waiting task's `resource`, the holder's task id, the
    holder's overlapping resource, and whether the holder holds it exclusively."""

    resource: str
    held_by_task_id: str
    held_resource: str
    held_exclusive: bool


@dataclass(frozen=True)
class WaitingFor:
    """Why a PENDING task is not being worked; several reasons may hold at once.

    `dependencies` are the ones not COMPLETED (at most 100, in depends_on
    order); `ready_time` is when its time gate (not_before, or a retry's
    backoff) opens, while it is shut; `concurrency_key` is set while its key
    is at its limit; `resources` names its resources held by tasks in progress
    (one holder per resource, at most 32).
    """

    dependencies: tuple[str, ...] = ()
    ready_time: datetime.datetime | None = None
    teammates: TeammateAvailability = TeammateAvailability.SOME_ONLINE
    concurrency_key: str = ""  # its key, while the key's limit of tasks are IN_PROGRESS
    resources: tuple[ResourceWait, ...] = ()


@dataclass(frozen=True)
class Usage:
    """What a teammate spent: report it as an increment since its last report with
    `Claim.complete`, `Claim.fail` or `Claim.renew` (counts are non-negative,
    `model` at most 200 characters). As a sum (Task, TeammateInfo, Stats), `model`
    is the latest one named (a Stats sum names none)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_micros: int = 0  # millionths of the team's currency unit
    model: str = ""

    @property
    def tokens(self) -> int:
        """Input and output tokens together (what a budget's max_tokens counts)."""
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class Budget:
    """A teammate's spending limit (`Lead.set_budget`); 0 means no limit on that measure."""

    max_cost_micros: int = 0
    max_tokens: int = 0


@dataclass(frozen=True)
class Artifact:
    """A file attached to a task by the holder of one of its claims
    (`Claim.put_artifact`); `get_artifact` reads its bytes.

    `name` is a relative path (`reports/summary.md`), `media_type` is
    `type/subtype`, `size` is in bytes, `sha256` is the bytes' SHA-256 in
    lowercase hex, and `attempt` is the claim's attempt number."""

    name: str
    media_type: str
    size: int
    sha256: str
    attempt: int
    create_time: datetime.datetime


@dataclass(frozen=True)
class DependencyArtifact:
    """An artifact of one of a claimed task's direct dependencies
    (`Claim.dependency_artifacts`): a reference, not the bytes."""

    task_id: str
    artifact: Artifact


@dataclass(frozen=True)
class Task:
    """A task as stored on the board. Times are timezone-aware (UTC) or None.

    `attempts` is its claim history, oldest first (the most recent 100 at
    most); only `get_task` fills it, other calls leave it empty.

    `attempts_used` is what counts toward `max_attempts`: claims ended by failure
    or expiry, plus the live claim or the one that completed it (a release or a
    cancel uses none); `retry_tasks(..., reset_attempts=True)` sets it to 0.
    `attempt` is the number of the latest claim.
    """

    id: str
    state: TaskState
    title: str = ""
    description: str = ""
    payload: bytes = b""
    depends_on: tuple[str, ...] = ()
    priority: int = 0
    required_role: str = ""
    max_attempts: int = 0
    lease_duration: datetime.timedelta = datetime.timedelta(0)
    owner: str = ""
    attempt: int = 0
    result: bytes = b""
    error: str = ""
    seq: int = 0
    create_time: datetime.datetime | None = None
    lease_expire_time: datetime.datetime | None = None
    finish_time: datetime.datetime | None = None
    not_before_time: datetime.datetime | None = None
    retry_backoff: datetime.timedelta = datetime.timedelta(0)
    retry_backoff_max: datetime.timedelta = datetime.timedelta(0)
    # The latest time gate (not_before_time, or the end of a retry's backoff): a
    # PENDING task is not claimed before it. None: it never had one.
    ready_time: datetime.datetime | None = None
    attempts: tuple[Attempt, ...] = ()
    # What holds it back while PENDING (get_task and list_tasks fill it); None
    # when nothing does, or in any other state.
    waiting_for: WaitingFor | None = None
    trace_parent: str = ""
    # The holder's latest progress note on this attempt (`Claim.report_progress`):
    # a new claim clears it, completion and failure keep it.
    progress: str = ""
    progress_fraction: float | None = None
    progress_time: datetime.datetime | None = None
    concurrency_key: str = ""
    # What its holders reported spending on it, summed.
    usage: Usage = Usage()
    attempt_timeout: datetime.timedelta | None = None  # None: no limit
    attempts_used: int = 0
    # NEEDS_INPUT: the question its holder asked, waiting for the Lead's answer; "" otherwise.
    question: str = ""
    # As created (max_rounds filled in); None: no review. While IN_REVIEW, `result`
    # is the result waiting for the verdict.
    review: ReviewPolicy | None = None
    review_rounds: int = 0  # rejections so far
    # A task a teammate proposed: the teammate, and the task whose claim it was
    # discovered from ("" when none was named).
    proposed_by: str = ""
    discovered_from: str = ""
    # The files attached to it, by name: the latest of each name (a later attempt's
    # supersedes an earlier one's). get_task and list_tasks fill it.
    artifacts: tuple[Artifact, ...] = ()
    # Its path leases as created (TaskSpec.resources, TaskSpec.shared_resources).
    resources: tuple[str, ...] = ()
    shared_resources: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConcurrencyLimit:
    """A concurrency key's limit and how many of its tasks are IN_PROGRESS now
    (more than the limit just after it was lowered; `limit` 0: none)."""

    key: str
    limit: int
    in_progress: int = 0


@dataclass(frozen=True)
class TeammateInfo:
    """A teammate as listed by the daemon."""

    name: str
    roles: tuple[str, ...] = ()
    status: TeammateStatus = TeammateStatus.OFFLINE
    require_plan_approval: bool = False
    held_task_ids: tuple[str, ...] = ()
    # While WAITING: up to 10 of the unfinished tasks it could take (what it waits for).
    waiting_for_task_ids: tuple[str, ...] = ()
    usage: Usage = Usage()  # what it reported spending, summed
    budget: Budget = Budget()  # its own, else the "*" default
    # On a board several daemons serve (PostgreSQL): the daemon serving its stream ('' offline).
    daemon: str = ""
    # How its proposed tasks land: its own policy, else the "*" default.
    task_creation: TaskCreationPolicy = TaskCreationPolicy.PROPOSE


@dataclass(frozen=True)
class Identity:
    """Who a credential is, as the daemon sees it (`get_identity`)."""

    name: str  # "lead", or the teammate's or the viewer's name
    role: str  # what it may do: "lead", "teammate" or "viewer" (read the board)
    roles: tuple[str, ...] = ()  # a teammate's task roles

    @property
    def is_lead(self) -> bool:
        """True for the Lead's credential."""
        return self.role == "lead"


@dataclass(frozen=True)
class NewTeammate:
    """A freshly minted teammate. The daemon shows `token` only this once."""

    info: TeammateInfo
    token: str = field(repr=False)

    @property
    def name(self) -> str:
        """The teammate's name."""
        return self.info.name


@dataclass(frozen=True)
class ViewerInfo:
    """A read-only credential's holder: it may open the web board and read the board."""

    name: str
    created: datetime.datetime | None


# ---------------------------------------------------------------- inbox items


@dataclass(frozen=True)
class Message:
    """A plain message. `seq` is the recipient's inbox sequence number."""

    seq: int
    send_time: datetime.datetime | None
    sender: str
    body: str


@dataclass(frozen=True)
class ShutdownRequest:
    """The Lead asks this teammate to stop; answer before `deadline_time`
    (with `respond_shutdown`) or the daemon removes the teammate."""

    seq: int
    send_time: datetime.datetime | None
    request_id: str
    reason: str
    deadline_time: datetime.datetime | None


@dataclass(frozen=True)
class PlanDecision:
    """The Lead's answer to a plan this teammate submitted."""

    seq: int
    send_time: datetime.datetime | None
    plan_id: str
    approve: bool
    feedback: str


@dataclass(frozen=True)
class ProposalsDecided:
    """The Lead decided tasks this teammate proposed (`Lead.decide_proposals`):
    approved, they are PENDING; rejected, CANCELED (`feedback` says why). Like a
    plan decision it comes before any new claim; `idle()` acknowledges it."""

    seq: int
    send_time: datetime.datetime | None
    task_ids: tuple[str, ...]  # those of the decided tasks this teammate proposed
    approve: bool
    feedback: str


class ClaimEndReason(enum.Enum):
    """Why a claim died under its holder (`ClaimEnded`)."""

    LEASE_EXPIRED = 1
    TASK_CANCELED = 2
    TEAMMATE_REMOVED = 3
    REVOKED = 4
    ATTEMPT_TIMEOUT = 5


@dataclass(frozen=True)
class ClaimEnded:
    """A claim this teammate held ended without its doing (the daemon committed it):
    stop working on `task_id`. The claim's handle is lost by then (`Claim.ended`)."""

    task_id: str
    claim_token: str
    reason: ClaimEndReason
    detail: str = ""


@dataclass(frozen=True)
class IdleTimeout:
    """The daemon found no work for `idle_polls` polls and is ending the stream."""

    idle_polls: int


@dataclass(frozen=True)
class BudgetExhausted:
    """This teammate's spending reached its budget: it gets no new claim (the ones
    it holds stay) until the Lead raises the budget."""

    teammate: str
    spent: Usage
    budget: Budget


@dataclass(frozen=True)
class QuestionAnswer:
    """A question a holder asked the Lead about a task (`Claim.ask`), and the answer
    (`Lead.answer_question`). A re-claimed task's `Claim.answers` carries them all,
    so the work resumes with what the Lead said."""

    question: str
    answer: str
    asked_by: str  # the teammate that asked
    ask_time: datetime.datetime | None = None
    answer_time: datetime.datetime | None = None


@dataclass(frozen=True)
class ReviewItem:
    """What a review's claim (`Claim.review`) asks a verdict on: the result its
    author's claim completed, and which review of the task this is (1, then one
    more after each rejection)."""

    result: bytes
    author: str  # the teammate whose result it is (never the reviewer)
    round: int


@dataclass(frozen=True)
class ClaimInfo:
    """The data of a claim: an exclusive, leased hold on one task.

    Present `token` on every later call about the claim; pass `fence` to
    external systems so they can refuse writes from a stale holder.
    """

    task: Task
    token: str = field(repr=False)
    lease_expire_time: datetime.datetime | None
    attempt: int
    fence: int
    # The task's latest ended claim before this one (what went wrong last
    # time); None on its first claim.
    previous_attempt: Attempt | None = None
    # Its direct dependencies' results by task id (in depends_on order, within
    # 4 MiB in all), and the ids of those left out (get_task fetches them).
    dependency_results: Mapping[str, bytes] = field(default_factory=dict, hash=False)
    dependency_results_omitted: tuple[str, ...] = ()
    # Every question asked on the task and its answer, oldest first (at most 20).
    answers: tuple[QuestionAnswer, ...] = ()
    # Set on a review's claim (answer it with `Claim.decide`); None on a work claim.
    review: ReviewItem | None = None
    # A rework after a rejection: the result the review rejected (the feedback is
    # `previous_attempt.feedback`), to revise rather than start over.
    rejected_result: bytes = b""
    # Its direct dependencies' artifacts (each one's `Task.artifacts`), in
    # depends_on order: references; `get_artifact` reads the bytes.
    dependency_artifacts: tuple[DependencyArtifact, ...] = ()


# ---------------------------------------------------------------- stats


@dataclass(frozen=True)
class WriterStats:
    """Health of the daemon's single writer."""

    queue_depth: int = 0
    queue_depth_p50: float = 0.0
    queue_depth_p99: float = 0.0
    commits: int = 0
    mean_batch_size: float = 0.0
    busy_retries: int = 0
    jobs: int = 0
    failed_commits: int = 0
    refused_jobs: int = 0
    commit_latency_p50_ms: float = 0.0
    commit_latency_p99_ms: float = 0.0
    # One job's time inside its transaction (every other write waits behind it).
    job_time_p99_ms: float = 0.0
    job_time_max_ms: float = 0.0


@dataclass(frozen=True)
class PostgresStats:
    """A PostgreSQL board's health as one daemon sees it (docs/postgres.md)."""

    listener_connected: bool  # it hears the other daemons' wake-ups
    listener_reconnects: int
    daemons: int  # daemons serving the board
    oldest_transaction_age_s: float  # on the server: one held open stops vacuum
    task_dead_tuples: int
    task_live_tuples: int
    notifies_sent: int
    notifies_heard: int


@dataclass(frozen=True)
class HeldResource:
    """A resource held by a task IN_PROGRESS (`Stats.held_resources`): exclusive
    (TaskSpec.resources) or shared, and the teammate holding the task's claim."""

    resource: str
    task_id: str
    teammate: str
    exclusive: bool


@dataclass(frozen=True)
class Stats:
    """A snapshot of the board. States absent from the maps count zero."""

    tasks_by_state: dict[TaskState, int]
    teammates_by_status: dict[TeammateStatus, int]
    writer: WriterStats
    open_streams: int
    # Calls refused because their caller was past its per-identity limits.
    refused_calls: int = 0
    # How late the daemon's event loop ran a 10 ms timer (every call waits that long).
    loop_lag_p99_ms: float = 0.0
    loop_lag_max_ms: float = 0.0
    # What every teammate reported spending, summed over the board's life.
    usage: Usage = Usage()
    store: str = "sqlite"  # where the board is kept: "sqlite" or "postgresql"
    postgres: PostgresStats | None = None  # a PostgreSQL board's health
    # The resources held now, by resource then task id (at most 1,000 of them;
    # held_resources_total counts them all).
    held_resources: tuple[HeldResource, ...] = ()
    held_resources_total: int = 0

    def count(self, *states: TaskState) -> int:
        """How many tasks are in any of `states`."""
        return sum(self.tasks_by_state.get(state, 0) for state in states)

    @property
    def active_tasks(self) -> int:
        """Tasks not yet final (PENDING, IN_PROGRESS, NEEDS_INPUT, IN_REVIEW or PROPOSED)."""
        return self.count(
            TaskState.PENDING, TaskState.IN_PROGRESS, TaskState.NEEDS_INPUT, TaskState.IN_REVIEW, TaskState.PROPOSED
        )


@dataclass(frozen=True)
class DoneSummary:
    """What `Lead.wait_until_done` found once no task was left to run.

    The ids of the tasks in each final state, in board order, and the stats
    that confirmed the board was done.
    """

    completed_ids: tuple[str, ...]
    failed_ids: tuple[str, ...]
    canceled_ids: tuple[str, ...]
    stats: Stats

    @property
    def completed(self) -> int:
        """How many tasks completed."""
        return len(self.completed_ids)

    @property
    def failed(self) -> int:
        """How many tasks failed for good."""
        return len(self.failed_ids)

    @property
    def canceled(self) -> int:
        """How many tasks were canceled (by the Lead, or under a failed dependency)."""
        return len(self.canceled_ids)


# ---------------------------------------------------------------- watch events


@dataclass(frozen=True)
class TaskChanged:
    """A task's state or fields changed (its holder's progress too); `task` is the task after the change."""

    seq: int
    time: datetime.datetime | None
    task: Task


@dataclass(frozen=True)
class TeammateChanged:
    """A teammate joined, went idle or busy, timed out, left or was removed."""

    seq: int
    time: datetime.datetime | None
    teammate: TeammateInfo
    status: TeammateStatus
    reason: TeammateChangeReason


@dataclass(frozen=True)
class LeadMessage:
    """A message sent to the Lead (`message.seq` is the Lead-inbox number)."""

    seq: int
    time: datetime.datetime | None
    message: Message


@dataclass(frozen=True)
class PlanSubmitted:
    """A teammate submitted a plan; answer it with `Lead.decide_plan`."""

    seq: int
    time: datetime.datetime | None
    plan_id: str
    author: str
    plan: str


@dataclass(frozen=True)
class PlanDecided:
    """The Lead decided a plan (from any client): it no longer waits for a decision."""

    seq: int
    time: datetime.datetime | None
    plan_id: str
    author: str
    approve: bool
    feedback: str


@dataclass(frozen=True)
class ShutdownAnswered:
    """A teammate answered a shutdown request."""

    seq: int
    time: datetime.datetime | None
    request_id: str
    teammate: str
    approve: bool
    reason: str


@dataclass(frozen=True)
class BudgetExhaustedEvent:
    """A teammate's spending reached its budget (`exhausted` says whose, and how much)."""

    seq: int
    time: datetime.datetime | None
    exhausted: BudgetExhausted


@dataclass(frozen=True)
class QuestionAsked:
    """A teammate asked the Lead a question about a task (now NEEDS_INPUT); answer it
    with `Lead.answer_question`."""

    seq: int
    time: datetime.datetime | None
    task_id: str
    question: str
    asked_by: str


@dataclass(frozen=True)
class QuestionAnswered:
    """The Lead answered a task's question (from any client): the task is PENDING again."""

    seq: int
    time: datetime.datetime | None
    task_id: str
    question: str
    answer: str


@dataclass(frozen=True)
class ReviewDecided:
    """A review of a task was decided (by a reviewer teammate, or by the Lead:
    `reviewer` "lead"): approved, the task is COMPLETED; rejected, it is PENDING
    for rework (or FAILED, at its policy's max_rounds)."""

    seq: int
    time: datetime.datetime | None
    task_id: str
    approve: bool
    feedback: str
    reviewer: str
    round: int


@dataclass(frozen=True)
class TasksProposed:
    """A teammate proposed tasks (`Claim.propose_tasks`): `needs_decision`, they are
    PROPOSED and wait for `Lead.decide_proposals`; otherwise its policy let them in
    PENDING. `split`: the task it held (`discovered_from`) now waits for them."""

    seq: int
    time: datetime.datetime | None
    teammate: str
    task_ids: tuple[str, ...]
    discovered_from: str
    needs_decision: bool
    split: bool


@dataclass(frozen=True)
class ProposalsDecidedEvent:
    """The Lead decided proposed tasks (from any client): approved, PENDING;
    rejected, CANCELED with their dependents (the proposer's stream gets
    a `ProposalsDecided`)."""

    seq: int
    time: datetime.datetime | None
    task_ids: tuple[str, ...]
    approve: bool
    feedback: str


@dataclass(frozen=True)
class ArtifactAdded:
    """The holder of a claim of `task_id` (`teammate`) attached an artifact to it."""

    seq: int
    time: datetime.datetime | None
    task_id: str
    teammate: str
    artifact: Artifact


WatchEvent = (
    TaskChanged
    | TeammateChanged
    | LeadMessage
    | PlanSubmitted
    | PlanDecided
    | ShutdownAnswered
    | BudgetExhaustedEvent
    | QuestionAsked
    | QuestionAnswered
    | ReviewDecided
    | TasksProposed
    | ProposalsDecidedEvent
    | ArtifactAdded
)
"""Any event `Lead.watch` yields."""


# ---------------------------------------------------------------- run_teammate


class ExitReason(enum.Enum):
    """Why `run_teammate` returned."""

    IDLE_TIMEOUT = "idle_timeout"
    SHUTDOWN = "shutdown"
    PLAN_REJECTED = "plan_rejected"
    REMOVED = "removed"


@dataclass(frozen=True)
class RunSummary:
    """What a `run_teammate` loop did.

    `completed` counts tasks the handler finished and the daemon accepted;
    `failed` counts handler exceptions reported with FailTask; `asked` counts
    questions the handler asked the Lead (`NeedsInput`); `reviewed` counts
    verdicts the `reviewer` handler gave and the daemon accepted; `split` counts
    tasks the handler split (`propose_tasks(..., block=True)`); `lost` counts
    claims whose outcome was dropped: the lease was lost, the task was
    canceled under the handler, or the daemon could not be told.
    """

    exit_reason: ExitReason
    completed: int = 0
    failed: int = 0
    lost: int = 0
    asked: int = 0
    plan_id: str = ""
    plan_feedback: str = ""
    reviewed: int = 0
    split: int = 0


@dataclass(frozen=True)
class OutputChunk:
    """A piece of an attempt's live output, as `tail_output` yields it, in order.

    `data` starts at byte `offset` of the attempt's output (the next chunk starts
    at `offset + len(data)`); `attempt` is the claim's attempt number. The last
    chunk of an attempt that ended has `end` set, no data, and `offset` at the
    output's final size."""

    attempt: int
    offset: int
    data: bytes
    end: bool = False
