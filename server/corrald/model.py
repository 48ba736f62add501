"""Domain types: plain values the store hands out and the layers above pass around (no SQL, no wire types)."""

from __future__ import annotations

import collections
import dataclasses
import enum
import sqlite3
import typing


class TaskState(enum.IntEnum):
    """Numbers match corral.v1.TaskState on the wire."""

    PENDING = 1
    IN_PROGRESS = 2
    COMPLETED = 3
    FAILED = 4
    CANCELED = 5

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


@dataclasses.dataclass(frozen=True, slots=True)
class TaskRecord:
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
class ClaimGrant:
    task: TaskRecord
    token: str
    lease_expire_ms: int
    attempt: int
    fence: int


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


@dataclasses.dataclass(frozen=True, slots=True)
class TeammateView:
    """A teammate as the delivery decision reads it, in one statement."""

    roles: tuple[str, ...]
    require_plan: bool
    acked_seq: int
    last_seq: int
    last_expiry_ms: int  # the latest lease end reclaimed from it
    shutdown_pending: bool  # a shutdown request it has not answered


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    seq: int
    time_ms: int
    kind: str
    data: dict


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

    def note(self, event: str, **fields: object) -> None:
        """Record one thing that happened, to be logged once its transaction commits."""
        self.activity.append((event, fields))

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
        )


@dataclasses.dataclass(slots=True)
class Txn:
    """One job's view of the open transaction: the connection, `now`, and wake notes."""

    conn: sqlite3.Connection
    now_ms: int
    wakes: Wakes = dataclasses.field(default_factory=Wakes)


@dataclasses.dataclass(frozen=True, slots=True)
class TaskPage:
    """One page of a task listing, and whether tasks matching the same filter follow it."""

    tasks: list[TaskRecord]
    more: bool


@dataclasses.dataclass(frozen=True, slots=True)
class FeedPage:
    """Events of the log in order, each with the task or teammate it is about, and
    whether more events follow them already."""

    items: list[tuple[Event, TaskRecord | None, TeammateRecord | None]]
    more: bool
