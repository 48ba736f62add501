"""The database behind a board, as `Board` and the writer see it: one driver per database
(`store/sqlite/`, `store/postgres/`), each behind these two interfaces.

`BoardDriver` is what `Board` asks of the database beyond the store's functions: how the
writer and the readers connect, what opening and leaving the board mean, and the
database's side of GetStats. `WriterStorage` is how the writer begins, commits and retries
a transaction there; the jobs it runs are the same on both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..clock import Clock
from ..model import Mergeable, RanAhead, Txn, Wakes


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


class Queued(Protocol):
    """A job the writer has taken into a batch, as a batching strategy sees it."""

    @property
    def merge(self) -> Mergeable | None: ...


class JobRuns(Protocol):
    """A driver's batching strategy for one attempt of a batch: runs of mergeable jobs
    (`model.Mergeable`) share their first statement (store/postgres/runs.py)."""

    together: int  # jobs that took a run's result

    def may_start(self, batch: Sequence[Queued], index: int) -> bool:
        """Whether a run may begin at job `index`."""

    def start(self, conn: Any, now_ms: int, batch: Sequence[Queued], index: int) -> list[int]:
        """Runs the run that begins at `index` (if it has more than one job); its jobs' indexes."""

    def take(self, batch: Sequence[Queued], index: int) -> RanAhead | None:
        """Job `index`'s share of its run, as it is about to run."""

    def ran(self, queued: Queued, wakes: Wakes | None) -> None:
        """Job `queued` ran, with these wake-ups (whose rows it changed)."""


class WriterStorage(Protocol):
    """How the writer begins, ends and retries its transactions on one kind of database
    (store/sqlite/storage.py's SqliteStorage, store/postgres/storage.py's PgStorage)."""

    # Whether this writer is the board's only one: what its jobs learn of the leases and
    # time gates then holds across jobs (DeadlineWatch); with other writers it does not.
    exclusive: bool

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

    # Whether every job runs inside a savepoint of its own; if not, see `untouched`.
    savepoint_each_job: bool

    def merged_runs(self) -> JobRuns | None:
        """The driver's batching strategy for an attempt of a batch run without savepoints
        (None: each job runs its own statements). Where each statement is a round trip
        and the server's work to start it, runs of mergeable jobs share their first."""

    def untouched(self, conn: Any, changes_before: int) -> bool:
        """Whether the transaction is as it was when a job began (`changes_before` is
        `conn.total_changes` then): nothing written and no statement failed, so a job
        that raised needs no rollback."""

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
