"""The SQLite board's connections, and how the writer begins, ends and retries a
transaction there.

Connections use `isolation_level=None`: Python's implicit transactions are off, and
the writer issues BEGIN IMMEDIATE / SAVEPOINT / COMMIT itself.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import pathlib
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from ... import failpoints
from ...errors import CommitInDoubt
from ...txn import DeadlineWatch
from ..guard import SAVEPOINTS, Savepoints
from . import queries, steps
from .schema import migrate

log = logging.getLogger("corrald.writer")
_SQLITE_IOERR = 10  # the primary result code of every SQLITE_IOERR_* extended code
READER_CACHE_KIB = 512


class SqliteConnection(sqlite3.Connection):
    """A connection to a SQLite board: its statements are SQLite's (`dialect.sql`)."""

    sql = queries
    steps = steps  # plain statements in turn: each costs only its own work (`dialect.steps`)

    def insert_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Inserts `rows` of `columns` into `table` (as PgConnection's, for the store's batches)."""
        self.executemany(_insert(table, tuple(columns)), rows)


@functools.cache
def _insert(table: str, columns: tuple[str, ...]) -> str:
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"


def _apply_pragmas(conn: sqlite3.Connection, *, synchronous: str, busy_timeout_ms: int) -> None:
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    # Checks, not hopes: a pragma that silently did not apply is an error.
    if conn.execute("PRAGMA foreign_keys").fetchone()[0] != 1:
        raise RuntimeError("SQLite refused foreign_keys=ON")


def open_writer(path: pathlib.Path, *, synchronous: str = "FULL", busy_timeout_ms: int = 5000) -> sqlite3.Connection:
    """The one read-write connection: WAL, explicit transactions, migrated."""
    if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}")
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, factory=SqliteConnection)
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if mode.lower() != "wal":
        raise RuntimeError(f"SQLite refused WAL mode (got {mode})")
    _apply_pragmas(conn, synchronous=synchronous.upper(), busy_timeout_ms=busy_timeout_ms)
    levels = {"OFF": 0, "NORMAL": 1, "FULL": 2, "EXTRA": 3}
    if conn.execute("PRAGMA synchronous").fetchone()[0] != levels[synchronous.upper()]:
        raise RuntimeError("SQLite refused the synchronous setting")
    conn.execute("PRAGMA wal_autocheckpoint = 1000")
    migrate(conn)
    return conn


def open_reader(path: pathlib.Path, *, busy_timeout_ms: int = 5000) -> sqlite3.Connection:
    """A read-only connection: it cannot write even by mistake."""
    conn = sqlite3.connect(
        f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False, factory=SqliteConnection
    )
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    # Reads are short indexed lookups and the OS caches the file: a small page
    # cache per reader keeps the daemon's memory flat as the board grows.
    conn.execute(f"PRAGMA cache_size = -{READER_CACHE_KIB}")
    conn.execute("PRAGMA query_only = ON")
    return conn


class SqliteStorage:
    """How the writer begins, ends and retries a transaction on SQLite (a `WriterStorage`)."""

    def begin(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        conn.execute("BEGIN IMMEDIATE")
        return conn

    def commit(self, conn: sqlite3.Connection) -> None:
        """COMMIT, and what its failure means (server/DESIGN.md, "Success only after COMMIT").

        Most errors leave nothing written: SQLITE_BUSY keeps the transaction open for the
        writer to roll back, and SQLITE_FULL fails before the commit frame is written.
        An I/O error is different: the commit frame may already be in the WAL, where the
        next start's recovery would find it, though this process rolled the transaction
        back. So an I/O error is answered as in doubt, never as "not written"."""
        try:
            conn.execute("COMMIT")
            failpoints.hit("sqlite_commit_returned")
        except sqlite3.OperationalError as error:
            if getattr(error, "sqlite_errorcode", 0) & 0xFF == _SQLITE_IOERR:
                raise CommitInDoubt(f"SQLite's COMMIT failed with an I/O error; it may be applied: {error}") from None
            raise

    def is_busy(self, error: BaseException) -> bool:
        return isinstance(error, sqlite3.OperationalError) and ("locked" in str(error) or "busy" in str(error))

    def is_storage_error(self, error: BaseException) -> bool:
        return isinstance(error, sqlite3.OperationalError)

    def announce(self, conn: sqlite3.Connection, wakes: object) -> None:
        """Nobody else serves a SQLite board."""

    def job_guard(self, timer: Callable[[], float], *, again: bool) -> Savepoints:
        """A savepoint per job: in process, it costs next to nothing."""
        return SAVEPOINTS

    def crew(self, writers: int, jobs_waiting: Callable[[], bool]) -> list[SoleWriter]:
        if writers != 1:
            raise ValueError(f"{writers} writers: a SQLite board has one writer, a PostgreSQL board 1 or more")
        return [SoleWriter(self.commit)]

    def close(self, conn: sqlite3.Connection, checkpoint: bool) -> None:
        """Checkpoints (unless told not to), then closes. A checkpoint that fails (a full
        disk) is logged and skipped: the WAL holds every commit and the next start replays it."""
        if checkpoint:
            try:
                failpoints.hit("before_checkpoint")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as error:
                log.warning("final checkpoint failed, the WAL is kept for the next start: %s", error)
        conn.close()


class SoleWriter:
    """The board's one writer (a `Shift`): it takes no turns and its commits are in order.
    Nothing else changes the file, so what its jobs learn of the leases and time gates
    holds across transactions (until a job or a batch rolls back)."""

    def __init__(self, commit: Callable[[sqlite3.Connection], None]) -> None:
        self.commit = commit
        self._watches = (DeadlineWatch(), DeadlineWatch())

    def wait_turn(self) -> None:
        pass

    def batch_closed(self) -> None:
        pass

    def leave(self) -> None:
        pass

    def watches(self) -> tuple[DeadlineWatch, DeadlineWatch]:
        return self._watches

    def answering(self) -> contextlib.nullcontext[None]:
        return _IN_ORDER


_IN_ORDER: contextlib.nullcontext[None] = contextlib.nullcontext()
