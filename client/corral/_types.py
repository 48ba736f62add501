"""The SDK's value types: frozen dataclasses and enums, free of wire types.

Everything a caller sees is defined here; `_convert` is the only module that
turns these into `corral.v1` messages and back. Enum values equal the wire
numbers so conversion is a lookup, but callers should use the names.
"""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass, field

__all__ = [
    "ClaimInfo",
    "ExitReason",
    "IdleTimeout",
    "LeadMessage",
    "Message",
    "NewTeammate",
    "PlanDecision",
    "PlanSubmitted",
    "RunSummary",
    "ShutdownAnswered",
    "ShutdownRequest",
    "Stats",
    "Task",
    "TaskChanged",
    "TaskSpec",
    "TaskState",
    "TeammateChangeReason",
    "TeammateChanged",
    "TeammateInfo",
    "TeammateStatus",
    "WatchEvent",
    "WriterStats",
]


class TaskState(enum.Enum):
    """Where a task is in its life. COMPLETED, FAILED and CANCELED are final."""

    PENDING = 1
    IN_PROGRESS = 2
    COMPLETED = 3
    FAILED = 4
    CANCELED = 5

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
class TaskSpec:
    """What the Lead asks for when creating a task.

    `None` (or zero) for `max_attempts` and `lease_duration` means "the
    daemon's default"; `depends_on` may name tasks in the same batch or
    already on the board.
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


@dataclass(frozen=True)
class Task:
    """A task as stored on the board. Times are timezone-aware (UTC) or None."""

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


@dataclass(frozen=True)
class NewTeammate:
    """A freshly minted teammate. The daemon shows `token` only this once."""

    info: TeammateInfo
    token: str = field(repr=False)

    @property
    def name(self) -> str:
        """The teammate's name."""
        return self.info.name


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
class IdleTimeout:
    """The daemon found no work for `idle_polls` polls and is ending the stream."""

    idle_polls: int


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

    def count(self, *states: TaskState) -> int:
        """How many tasks are in any of `states`."""
        return sum(self.tasks_by_state.get(state, 0) for state in states)

    @property
    def active_tasks(self) -> int:
        """Tasks not yet final (PENDING or IN_PROGRESS)."""
        return self.count(TaskState.PENDING, TaskState.IN_PROGRESS)


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
    """A task's state or fields changed; `task` is the task after the change."""

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
class ShutdownAnswered:
    """A teammate answered a shutdown request."""

    seq: int
    time: datetime.datetime | None
    request_id: str
    teammate: str
    approve: bool
    reason: str


WatchEvent = TaskChanged | TeammateChanged | LeadMessage | PlanSubmitted | ShutdownAnswered
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
    `failed` counts handler exceptions reported with FailTask; `lost` counts
    claims whose outcome was dropped: the lease was lost, the task was
    canceled under the handler, or the daemon could not be told.
    """

    exit_reason: ExitReason
    completed: int = 0
    failed: int = 0
    lost: int = 0
    plan_id: str = ""
    plan_feedback: str = ""
