"""Opening a PostgreSQL board, and the daemons that serve it.

`open_board` connects (waiting up to `--pg-connect-timeout` for the server),
migrates, and reads the board's identity and the database's clock. The
`daemons` table lists who serves the board: each daemon registers when it
starts, renews its row every `HEARTBEAT_MS`, and deletes it when it stops; a
row not renewed for `DAEMON_GONE_MS` belongs to a daemon that died.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
from collections.abc import Callable, Collection

import psycopg

from ...clock import Clock
from ...model import OpCompletion
from ...txn import Mergeable, Txn, Wakes
from ..driver import DatabaseHealth
from . import steps
from .blobs import PgBlobs
from .schema import BoardCreator, BoardIdentity, migrate
from .sql import PgConnection
from .storage import DatabaseClock, PgStorage, connect, describe, new_daemon_id, reach
from .target import PgTarget
from .watchdog import WATCHDOG

log = logging.getLogger("corrald.store")

HEARTBEAT_MS = 5_000
DAEMON_GONE_MS = 30_000
# One read sees one snapshot, as a SQLite read transaction does; it never writes.
READER_BEGIN = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
_CLOCK_SQL = "SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint"


@dataclasses.dataclass(frozen=True)
class PgBoard:
    """A migrated PostgreSQL board, ready for this daemon's writer and readers."""

    target: PgTarget
    identity: BoardIdentity
    daemon_id: str
    storage: PgStorage
    clock: DatabaseClock | None  # None: the daemon runs on an injected clock (tests)
    state_dir: str = ""  # the serving daemon's state directory ("" for none)

    # store.driver.BoardDriver:
    store_name = "postgresql"
    shared = True  # served by every daemon given its DSN and schema, each with its own writer
    reader_begin = READER_BEGIN

    @property
    def lead_hash(self) -> bytes:
        return self.identity.lead_hash

    def writer_storage(self) -> PgStorage:
        return self.storage

    def open_writer(self) -> PgConnection:
        return self.storage.open()

    def open_reader(self) -> PgConnection:
        return reach(self.target, read_only=True)

    def blob_store(self) -> PgBlobs:
        return PgBlobs(lambda: reach(self.target), self.daemon_id)

    def catch_up_clock(self, call: Callable[[Callable[[Txn], int]], int], clock: Clock) -> None:
        """The board's clock is the database's (`DatabaseClock`), or the one a test injects."""

    def join(self, tx: Txn) -> bool:
        # A board other daemons serve goes on as it is: its leases run and its teammates
        # stay online. Only the board's restart (no other daemon serves it) recovers.
        return register_daemon(tx, self.daemon_id, self.state_dir) == 0

    def leave(self) -> None:
        leave(self)

    def health(self, conn: PgConnection) -> DatabaseHealth:
        server = health(conn)
        return DatabaseHealth(
            daemons=len(daemons(conn)),
            oldest_transaction_s=server["oldest_transaction_s"],
            task_dead_tuples=int(server["task_dead_tuples"]),
            task_live_tuples=int(server["task_live_tuples"]),
            notifies_sent=self.storage.notifies,
            writable=self.storage.writable,
            commit_outcomes_asked=self.storage.outcomes_asked,
            connections_cut=WATCHDOG.cut,
        )

    def merged_completion(
        self, request: OpCompletion, touched: Callable[[Wakes], Collection[str] | None]
    ) -> Mergeable[OpCompletion, steps.CompletionRead]:
        # A run of them is one statement (runs.py): a statement costs more to start and finish than to run.
        return Mergeable(steps.complete_many, request, request.completion.teammate, touched)


def open_board(
    target: PgTarget,
    lead_hash_of: Callable[[str], bytes],
    *,
    database_clock: bool = True,
    lead_token: str | None = None,
    expected_board_id: str | None = None,
    state_dir: str = "",
) -> PgBoard:
    """Connects, migrates and identifies the board; raises psycopg's OperationalError when the
    server stays out of reach for the target's connect timeout, SchemaError for a schema this
    daemon cannot serve. A board created now takes `lead_token` (default: a new one)."""
    raw = connect(target, patience_s=target.connect_timeout_s)
    try:
        creator = BoardCreator(socket.gethostname(), state_dir)
        identity = migrate(raw, target.schema, lead_hash_of, lead_token, expected_board_id, creator)
        row = raw.execute(_CLOCK_SQL).fetchone()
        assert row is not None
        now_ms = row[0]
    finally:
        raw.close()
    daemon_id = new_daemon_id()
    clock = DatabaseClock(now_ms) if database_clock else None
    return PgBoard(target, identity, daemon_id, PgStorage(target, daemon_id, clock), clock, state_dir)


# ---------------------------------------------------------------- the daemons table


def register_daemon(tx: Txn, daemon_id: str, state_dir: str) -> int:
    """Records this daemon as serving the board; forgets daemons gone silent, and the previous
    daemon of this state directory (it is gone: this one holds the directory's lock). Returns
    how many other daemons serve the board now (0: this start is the board's restart)."""
    forget_silent_daemons(tx)
    host = socket.gethostname()
    if state_dir:
        tx.conn.execute("DELETE FROM daemons WHERE host = %s AND state_dir = %s", (host, state_dir))
    tx.conn.execute(
        "INSERT INTO daemons (id, host, state_dir, pid, started_ms, seen_ms) VALUES (%s, %s, %s, %s, %s, %s)",
        (daemon_id, host, state_dir, os.getpid(), tx.now_ms, tx.now_ms),
    )
    (others,) = tx.conn.execute("SELECT count(*) FROM daemons WHERE id != %s", (daemon_id,)).fetchone()
    return others


def heartbeat(tx: Txn, daemon_id: str) -> None:
    tx.conn.execute("UPDATE daemons SET seen_ms = %s WHERE id = %s", (tx.now_ms, daemon_id))
    forget_silent_daemons(tx)


def forget_silent_daemons(tx: Txn) -> None:
    tx.conn.execute("DELETE FROM daemons WHERE seen_ms < %s", (tx.now_ms - DAEMON_GONE_MS,))


def leave(board: PgBoard) -> None:
    """Removes this daemon's row, on a connection of its own (the writer has stopped); a row
    left behind (the database away) is forgotten after DAEMON_GONE_MS."""
    try:
        with connect(board.target) as raw:
            raw.execute("DELETE FROM daemons WHERE id = %s", (board.daemon_id,))
    except psycopg.Error as error:
        log.warning("could not remove this daemon from the board's daemons: %s", describe(error))


def daemons(conn: PgConnection) -> list[tuple[str, str, int, int, int]]:
    """(id, host, pid, started ms, last seen ms) of each daemon serving the board, oldest first."""
    return conn.execute("SELECT id, host, pid, started_ms, seen_ms FROM daemons ORDER BY started_ms, id").fetchall()


def health(conn: PgConnection) -> dict[str, float]:
    """The server's side of GetStats: the oldest open transaction's age (it holds back
    vacuum) and the task table's dead tuples (what vacuum has yet to clear)."""
    row = conn.execute(
        "SELECT coalesce(extract(epoch from (clock_timestamp() - min(xact_start))), 0)::float8"
        " FROM pg_stat_activity WHERE xact_start IS NOT NULL AND pid != pg_backend_pid()"
    ).fetchone()
    oldest_s = row[0] if row is not None else 0.0
    row = conn.execute(
        "SELECT n_dead_tup, n_live_tup FROM pg_stat_user_tables WHERE schemaname = current_schema()"
        " AND relname = 'tasks'"
    ).fetchone()
    dead, live = row if row is not None else (0, 0)
    return {"oldest_transaction_s": float(oldest_s), "task_dead_tuples": float(dead), "task_live_tuples": float(live)}
