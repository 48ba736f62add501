"""A writer job's view of its transaction: the connection, `now`, what the job changed for
the wake hub (`Wakes`), what the writer knows of the leases and time gates across jobs
(`DeadlineWatch`), and the run of jobs a driver may merge (`Mergeable`, `RanAhead`) or
whose Session op record a statement writes (`PendingOpRecord`)."""

from __future__ import annotations

import collections
import dataclasses
import sqlite3
import typing

from .errors import CorralError
from .model import BudgetExhausted, ClaimEnd, HandedClaim


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
    # Claims (by fence) whose output grew or that ended: their TailOutput followers, and
    # theirs alone, read on (to the end chunk, for an ended one).
    output: set[int] = dataclasses.field(default_factory=set)

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
        self.output |= other.output

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
            or self.output
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
    # The job's first statement, run already by the writer for a run of jobs (`Mergeable`);
    # the job sets it back to None as it takes it (a job that did not fails: see writer.py).
    ahead: RanAhead[object, object] | None = None


RequestT = typing.TypeVar("RequestT")
RequestT_co = typing.TypeVar("RequestT_co", covariant=True)
RowT_co = typing.TypeVar("RowT_co", covariant=True)


@dataclasses.dataclass(frozen=True, slots=True)
class Mergeable(typing.Generic[RequestT, RowT_co]):
    """What a job's first statement needs, for a writer that runs that statement once for
    a run of such jobs queued one after another (`run_many(conn, now_ms, requests)`: one
    result per request, in order) and gives each job its result (`Txn.ahead`, where the
    job checks it is its own and of the type it expects).

    The jobs of a run act as if each had run its first statement when the run did, ahead
    of the rest of the jobs queued before it: so a run holds one job per `subject` (whose
    job it is), and a job learns whether its result's reads are still the board's. They
    are not once a job run since changed its subject's rows; `touched` says whose rows a
    job's wake-ups show it changed (None: anyone's may have)."""

    run_many: typing.Callable[[sqlite3.Connection, int, list[RequestT]], typing.Sequence[RowT_co]]
    request: RequestT
    subject: str
    touched: typing.Callable[[Wakes], typing.Collection[str] | None]


@dataclasses.dataclass(frozen=True, slots=True)
class RanAhead(typing.Generic[RequestT_co, RowT_co]):
    """A job's result of its first statement, run for its run of jobs (see `Mergeable`).
    `fresh`: what it read of the job's subject is still what the board holds."""

    request: RequestT_co
    row: RowT_co
    fresh: bool


@dataclasses.dataclass(slots=True)
class PendingOpRecord:
    """A Session op's record, written by `DriverSteps.record_op` or by the first statement
    of the op's body instead of a statement of its own (store/ops.py `RecordingBody`; on
    PostgreSQL, fused.py's `RECORD_CLAUSE`). `seq` is the record's once written,
    and `changes` the connection's count of rows changed then (what the body wrote after
    it is what `run_once` must not lose)."""

    teammate: str
    op_id: str
    digest: bytes
    done_ms: int
    seq: int | None = None
    changes: int = 0
