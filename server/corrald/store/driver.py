"""The database behind a board, as `Board`, the writer and the store see it: one driver
per database (`store/sqlite/`, `store/postgres/`), each behind these three interfaces.

`BoardDriver` is what `Board` asks of the database beyond the store's functions: how the
writer and the readers connect, what opening and leaving the board mean, how a Session
completion may run with others, and the database's side of GetStats. `WriterStorage` is
how the writer begins, commits and retries a transaction there, with the driver's
strategies for a batch: how each job is guarded (`JobGuard`) and how the daemon's writer
threads take turns (`Shift`); the jobs it runs are the same on both. `DriverSteps` are
the steps of the store's verbs each driver takes its own way (its connection's `steps`,
`dialect.steps`): the rules around them are the store's, shared.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from ..clock import Clock
from ..leasepaths import WantedPath
from ..model import Completion, DeliveryView, OpCompletion, TaskRecord, TaskState, Usage
from ..txn import DeadlineWatch, Mergeable, PendingOpRecord, Txn, Wakes

# A driver's way of merging a Session completion with those queued beside it (`BoardDriver`).
MergedCompletion = Callable[[OpCompletion, Callable[[Wakes], Collection[str] | None]], Mergeable[OpCompletion, object]]


@dataclasses.dataclass(frozen=True, slots=True)
class DatabaseHealth:
    """A shared board's database, for GetStats: who serves it and what vacuum has to do."""

    daemons: int
    oldest_transaction_s: float
    task_dead_tuples: int
    task_live_tuples: int
    notifies_sent: int
    writable: bool
    commit_outcomes_asked: int
    connections_cut: int


@dataclasses.dataclass(frozen=True, slots=True)
class ReadyCandidate:
    """A task one of whose conditions a step just met (a dependency completed, its time gate
    opened), as the step left it: its role, what it still waits for (unmet dependencies and
    a shut gate) and its state. It is ready once nothing is unmet, if it is still pending."""

    seq: int
    role: str
    unmet: int
    state: int

    @property
    def ready(self) -> bool:
        return self.unmet == 0 and self.state == _PENDING


_PENDING = int(TaskState.PENDING)


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimTaken:
    """A claim just written: the task as claimed, the claim's fence, and the task's attempt
    before it (0 for a first claim)."""

    task: TaskRecord
    fence: int
    attempt_before: int


@dataclasses.dataclass(frozen=True, slots=True)
class CompletedAtOnce:
    """A completion checked and done in one step: the task, its dependents as it left
    them, and the teammate's delivery view as the completion left it (None when it was
    not asked for, or is not the board's now)."""

    task: TaskRecord
    dependents: list[ReadyCandidate]
    view: DeliveryView | None


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimToComplete:
    """A live claim (`fence`) of task `seq`, whose concurrency key is `key` ('' for none),
    checked by the caller, to end as completed with the task's `result`; `usage`, a
    report the completion carries, is added to the task's sums."""

    seq: int
    fence: int
    key: str
    result: bytes
    usage: Usage | None


@dataclasses.dataclass(frozen=True, slots=True)
class TaskCompleted:
    """A task just completed, and its dependents as the completion left them."""

    task: TaskRecord
    dependents: list[ReadyCandidate]


@dataclasses.dataclass(frozen=True, slots=True)
class GatesOpened:
    """The tasks whose time gates a step opened and the earliest gate still shut (None:
    none is)."""

    opened: list[ReadyCandidate]
    earliest_ms: int | None


class DriverSteps(Protocol):
    """The steps of the store's verbs each driver takes its own way: plain statements in
    turn on SQLite (store/sqlite/steps.py), one statement each on PostgreSQL, where every
    statement is a round trip (store/postgres/steps.py). Each writes its `task_changed`
    events; what a step means for the board beyond its rows is the caller's."""

    def claim_first_ready(self, tx: Txn, roles: tuple[str, ...], token: str, teammate: str) -> ClaimTaken | None:
        """Claims the first ready task a teammate with `roles` may take
        (`tasks.claims.pick_ready`), for `teammate` under `token`; None if there is none."""

    def complete_if_live(
        self, tx: Txn, completion: Completion, record: PendingOpRecord | None, *, view_after: bool
    ) -> CompletedAtOnce | None:
        """Completes the task if the completion's token holds its live claim, in one step,
        writing a Session op's `record` with it if it is not written yet (`ops.record_written`,
        which raises `ops.OpAlreadyRan` when the op id is taken); None when it
        did not (the general path then checks the claim and says why), always None where
        the general path costs no more. With `view_after`, reads the teammate's delivery
        view too, if it can in the same step."""

    def complete_live_claim(self, tx: Txn, claim: ClaimToComplete) -> TaskCompleted:
        """Ends the live claim as completed and completes its task, adding the usage to the
        task's sums (the teammate's are the caller's)."""

    def record_op(self, conn: sqlite3.Connection, record: PendingOpRecord) -> int | None:
        """Inserts a Session op's record: its seq, or None when the op id is taken (nothing
        written). The record is left as it was (`ops.run_once` notes the seq)."""

    def open_due_gates(self, tx: Txn) -> GatesOpened:
        """Opens every time gate whose instant has come."""

    def view_for_delivery(self, conn: sqlite3.Connection, name: str, now_ms: int) -> DeliveryView:
        """The teammate's delivery view and its live claims; Unauthenticated once it is removed."""

    def held_conflict(self, conn: sqlite3.Connection, wants: Sequence[WantedPath]) -> bool:
        """Whether a held resource conflicts with one of `wants`: an overlapping path held
        exclusively, or any overlapping one when it is wanted so."""
        ...

    def lock_graph(self, tx: Txn) -> None:
        """Holds, until the transaction ends, the right to add dependencies to tasks on the
        board (AddDependencies, a split): two such edits checked for cycles side by side
        could each pass and close one together."""

    def inserted_seqs(self, conn: sqlite3.Connection, ids: list[str]) -> dict[str, int]:
        """The seq of each of the tasks `ids` (by id), just inserted in this order by this transaction."""


class Rerun(Exception):
    """A job failed having written, with nothing to take its writes back alone: its batch
    runs again, from BEGIN, under `WriterStorage.job_guard(again=True)`."""


class Queued(Protocol):
    """A job the writer has taken into a batch, as a driver's strategies see it."""

    @property
    def merge(self) -> Mergeable | None: ...

    def run(self, tx: Txn) -> Any:
        """Runs the job's body in the open transaction."""


class JobGuard(Protocol):
    """How one attempt of a batch keeps a failing job's writes from the others: a savepoint
    per job (store/guard.py), or none, the batch run again when a job fails having written
    (store/postgres/runs.py, which also runs a statement once for a run of jobs)."""

    together: int  # jobs of the attempt that took a share of a statement run for several

    def before(self, conn: Any, now_ms: int, batch: Sequence[Queued], index: int, fill: Callable[[], None]) -> float:
        """Called before a job that has a `merge`: what the attempt runs ahead of it for it
        and later jobs (`fill` first takes every queued job the batch may take); returns
        the job's share of that writer time, in seconds."""

    def run(self, conn: Any, tx: Txn, batch: Sequence[Queued], index: int) -> tuple[bool, Any]:
        """Runs job `index`: (True, its value), or (False, its error) with what it wrote
        rolled back; raises Rerun when that cannot be done for it alone."""


class Shift(Protocol):
    """One writer thread's place among the daemon's writers: SQLite's one writer
    (store/sqlite/storage.py) or a thread of a pool taking turns (store/postgres/pool.py)."""

    def wait_turn(self) -> None:
        """Before it waits for jobs: one writer at a time takes jobs or waits for them."""

    def batch_closed(self) -> None:
        """Its batch takes no more jobs: another writer may open a transaction for those waiting."""

    def leave(self) -> None:
        """It takes no more jobs (drained, or failed): the turn goes on if it held it."""

    def watches(self) -> tuple[DeadlineWatch, DeadlineWatch]:
        """What a transaction's jobs know of the leases and the time gates: the writer's own
        across transactions where nothing else writes the board, fresh ones otherwise."""

    def commit(self, conn: Any) -> None:
        """Commits the transaction (`WriterStorage.commit`) and takes its place in the order of commits."""

    def answering(self) -> AbstractContextManager[None]:
        """Held while a batch answers its callers: after every batch committed before it."""


class WriterStorage(Protocol):
    """How the writer begins, ends and retries its transactions on one kind of database
    (store/sqlite/storage.py's SqliteStorage, store/postgres/storage.py's PgStorage)."""

    def begin(self, conn: Any) -> Any:
        """Opens the batch's transaction on `conn`, or on a new connection if that one is
        broken; returns the connection it opened it on."""

    def commit(self, conn: Any) -> None: ...

    def is_busy(self, error: BaseException) -> bool:
        """Whether the whole transaction may run again (no job of it took effect)."""

    def is_storage_error(self, error: BaseException) -> bool:
        """Whether a job's error is the database's (a full disk, a lost connection), not the job's."""

    def announce(self, conn: Any, wakes: Wakes) -> None:
        """Last in the transaction: tells what it changed to whoever else serves the board."""

    def job_guard(self, timer: Callable[[], float], *, again: bool) -> JobGuard:
        """The guard of an attempt of a batch; `again` once a job of the batch asked for a
        Rerun. `timer` measures writer time, as the writer charges it to the jobs."""

    def crew(self, writers: int, jobs_waiting: Callable[[], bool]) -> Sequence[Shift]:
        """One Shift per writer thread (ValueError if the board cannot have `writers`);
        `jobs_waiting` says whether jobs are queued."""

    def close(self, conn: Any, checkpoint: bool) -> None: ...


class BoardDriver(Protocol):
    """A board's database, opened: `sqlite.driver.SqliteBoard` or `postgres.store.PgBoard`."""

    @property
    def store_name(self) -> str:
        """As GetStats names it: "sqlite" or "postgresql"."""

    @property
    def shared(self) -> bool:
        """Whether other daemons may serve the board at once (their commits, credentials and
        claims then reach this daemon through the database, not through its own writer)."""

    @property
    def daemon_id(self) -> str:
        """This daemon among those serving a shared board ('' when it serves it alone)."""

    @property
    def lead_hash(self) -> bytes:
        """The hash of the lead's token."""

    @property
    def reader_begin(self) -> str:
        """How a reader begins its one snapshot."""

    def writer_storage(self) -> WriterStorage: ...

    def open_writer(self) -> Any:
        """A read-write connection, for the writer."""

    def blob_store(self) -> Any:
        """Where artifacts' bytes live (store/sqlite/blobs.py, store/postgres/blobs.py)."""

    def open_reader(self) -> Any:
        """A read-only connection, for the reader pool."""

    def catch_up_clock(self, call: Callable[[Callable[[Txn], int]], int], clock: Clock) -> None:
        """Before the board opens: the daemon's clock carries on from where the board's got,
        if the board keeps its own time base (`call` runs a job on the writer)."""

    def join(self, tx: Txn) -> bool:
        """This daemon starts serving the board; whether that is the board's restart (no
        other daemon serves it), after which leases, counts and presence are recovered."""

    def leave(self) -> None:
        """This daemon serves the board no more (its writer has stopped)."""

    def health(self, conn: Any) -> DatabaseHealth | None:
        """The database's side of GetStats (None: a board this daemon serves alone)."""

    @property
    def merged_completion(self) -> MergedCompletion | None:
        """How a Session completion without usage may run with the completions queued beside
        it: `merged_completion(request, touched)` is its `Mergeable` (`touched`: whose
        delivery views a job's wake-ups changed). None where each runs its own steps, and
        then the completion asks nothing of it."""
