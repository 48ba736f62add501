"""What the writer, the readers and the clock need from a PostgreSQL board.

One board, many daemons, one order. Every write transaction, from any daemon,
takes the board's transaction-scoped advisory lock (`board_write` below) in the
same round trip as its BEGIN and holds it until COMMIT. The writes of a board
are therefore serial across daemons, exactly as under SQLite's one writer: a
claim, a completion, a shutdown request and a new task's dependency check each
see every write committed before them, and the event log's seqs commit in
order (a reader resuming after seq N never misses a smaller seq committed
later). Each daemon's writer still group-commits (many jobs, one transaction,
one lock, one fsync), so the lock is taken once per batch, not once per job.

That same round trip reads the database's clock (`clock_timestamp()`): the
daemon's clock (`DatabaseClock`) is moved up to it, so every daemon of a board
measures leases on the database's time, whatever its own host says.

A transaction that fails before COMMIT had no effect and runs again (a
serialization failure, a deadlock, a connection lost before COMMIT). A
connection lost *during* COMMIT leaves the outcome unknown to this side, so
the daemon asks the server: each transaction's id is read with its BEGIN, and
`pg_xact_status` on a new connection says whether it committed (its jobs are
then answered as committed), aborted (the batch runs again: nothing of it was
applied) or is still in progress (its old backend is terminated, which settles
it). Only when the server cannot be asked within the stall bound are the jobs
answered COMMIT_IN_DOUBT, never success and never "not applied" (design
invariant 6).

No transaction may hold the board's lock for long without making progress: a
daemon that is paused, or cut off by a network that stops forwarding, would
stall every daemon's writes. Each connection carries the target's stall bound
(`PgTarget.stall_timeout_s`, docs/postgres.md): the server ends a session
idle inside a transaction for that long, a writer waits that long for the
lock before it tries again, and a round trip unanswered for twice that long
has its socket cut (store/postgres/watchdog.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import tenacity
from psycopg import errors as pg_errors
from psycopg import sql

from ...clock import SystemClock
from ...config import ConfigError
from ...errors import CommitInDoubt, Unavailable
from ...txn import Wakes
from ..driver import JobGuard
from ..guard import SAVEPOINTS
from .pool import PoolShift, WriterPool
from .runs import MergedRuns
from .schema import lock_key
from .sql import PgConnection
from .target import PgTarget, scrub

log = logging.getLogger("corrald.store")

# Errors after which a transaction that did not commit may simply run again.
_RETRYABLE = (pg_errors.SerializationFailure, pg_errors.DeadlockDetected, pg_errors.LockNotAvailable)
# A NOTIFY payload must stay under 8,000 bytes; past this, "everything changed" is sent.
NOTIFY_PAYLOAD_MAX = 7_000
_CLOCK_SQL = "(extract(epoch from clock_timestamp()) * 1000)::bigint"


class CommitLost(Unavailable):
    """The connection was lost during COMMIT, and the server says the transaction did not
    commit: nothing of it was applied, and it may run again."""

    reason = "COMMIT_FAILED"


class DatabaseUnreachable(Unavailable):
    """No connection to the server could be made: nothing was applied (the caller may retry)."""

    reason = "DATABASE_UNREACHABLE"


class DatabaseClock(SystemClock):
    """The daemon's clock on a PostgreSQL board: monotonic like SystemClock, labelled in the
    database's time, and moved up to the database's clock whenever a transaction reads it."""

    def __init__(self, database_now_ms: int) -> None:
        super().__init__(wall=lambda: database_now_ms * 1_000_000)


def connect(
    target: PgTarget, *, read_only: bool = False, patience_s: float = 0.0, lock_wait_s: float | None = None
) -> psycopg.Connection:
    """A connection to the board's schema (autocommit: the caller says BEGIN), tried again
    with backoff for up to `patience_s` while the server cannot be reached.

    The server ends its session once it sits idle inside a transaction for the target's
    stall bound, so a paused client cannot hold a lock for longer; with `lock_wait_s`, a
    statement waits at most that long for a lock. TCP keepalives and a user timeout find a
    peer whose host or network is gone within a few seconds more."""
    stall_ms = max(1, round(target.stall_timeout_s * 1000))
    options = f"-c search_path={target.schema} -c idle_in_transaction_session_timeout={stall_ms}"
    if lock_wait_s is not None:
        options += f" -c lock_timeout={max(1, round(lock_wait_s * 1000))}"
    if read_only:
        options += " -c default_transaction_read_only=on"
    attempt = tenacity.Retrying(
        retry=tenacity.retry_if_exception(_unreachable),
        stop=tenacity.stop_after_delay(patience_s),
        wait=tenacity.wait_exponential_jitter(multiplier=0.1, max=2.0),
        reraise=True,
    )
    timeout = max(1, min(10, round(target.connect_timeout_s)))
    probe_s = max(1, round(target.stall_timeout_s / 3))
    return attempt(
        lambda: psycopg.connect(
            target.dsn,
            autocommit=True,
            options=options,
            application_name="corrald",
            connect_timeout=timeout,
            keepalives=1,
            keepalives_idle=probe_s,
            keepalives_interval=probe_s,
            keepalives_count=3,
            tcp_user_timeout=stall_ms,
        )
    )


def _unreachable(error: BaseException) -> bool:
    """A connection attempt worth repeating: the server is not (yet) there. A refused
    password or an unknown database is not."""
    if not isinstance(error, psycopg.OperationalError):
        return False
    text = str(error)
    return not any(fatal in text for fatal in ("authentication failed", "does not exist", "no pg_hba.conf", "password"))


def reach(
    target: PgTarget,
    *,
    read_only: bool = False,
    lock_wait_s: float | None = None,
    on_severed: Callable[[], None] | None = None,
) -> PgConnection:
    """A connection for a running daemon, its round trips bounded (store/postgres/watchdog.py): the
    server away is UNAVAILABLE, not an error of ours."""
    try:
        raw = connect(target, read_only=read_only, lock_wait_s=lock_wait_s)
        return PgConnection(raw, reply_bound_s=2 * target.stall_timeout_s, on_severed=on_severed)
    except psycopg.OperationalError as error:
        raise DatabaseUnreachable(f"the board's database cannot be reached: {describe(error)}") from None


def describe(error: BaseException) -> str:
    """One line for the operator, without the password."""
    return scrub(" ".join(str(error).split())) or type(error).__name__


class _WriterThreadState(threading.local):
    """What one writer thread's batch keeps between BEGIN and COMMIT."""

    conn: PgConnection | None = None  # its connection, as of its last BEGIN
    notify_payload: str | None = None  # what `announce` left for `commit` to send
    xid: str = ""  # its transaction's id (pg_current_xact_id), to ask after a lost COMMIT
    backend_pid: int = 0  # the server process serving it (a lost connection may no longer say)


class PgStorage:
    """The writer's transactions on a PostgreSQL board (a `WriterStorage`), for each of the
    daemon's writer threads."""

    def __init__(self, target: PgTarget, daemon_id: str, clock: DatabaseClock | None) -> None:
        self._target = target
        self._daemon_id = daemon_id
        self._clock = clock  # None: the board runs on an injected clock (tests)
        switched_off = bench_switches_off()
        lock = "" if "lock" in switched_off else f"pg_advisory_xact_lock({lock_key(target.schema, 'write')}), "
        # The transaction's id comes with its BEGIN: after a lost COMMIT it is too late to ask.
        self._begin = f"BEGIN; SELECT {lock}pg_current_xact_id()::text, {_CLOCK_SQL}"
        self._notify = "notify" not in switched_off
        self._merges = "merge" not in switched_off
        self.channel = notify_channel(target.schema)
        self._notified = threading.Lock()
        self.notifies = 0
        self._batch = _WriterThreadState()
        # Whether the last transaction's fate says this daemon can write the board: false from a
        # lost or cut connection, or a server out of reach, until a COMMIT succeeds again.
        self.writable = True
        self.on_writable: Callable[[bool], None] = lambda writable: None
        self.outcomes_asked = 0  # COMMITs in doubt whose outcome the server was asked for

    def open(self) -> PgConnection:
        try:
            return reach(self._target, lock_wait_s=self._target.stall_timeout_s, on_severed=self._cut_off)
        except DatabaseUnreachable:
            self._set_writable(False)
            raise

    def _cut_off(self) -> None:
        self._set_writable(False)

    def _set_writable(self, writable: bool) -> None:
        if writable != self.writable:
            self.writable = writable
            self.on_writable(writable)

    def begin(self, conn: PgConnection | None) -> PgConnection:
        batch = self._batch
        if conn is not None and not conn.broken and not conn.reusable:
            log.warning("a writer connection left mid-transaction by a failure is replaced")
            conn.close()
        if conn is None or conn.broken:
            batch.conn = None
            conn = self.open()  # while the server is away: UNAVAILABLE, and the batch is not retried
        batch.conn = conn
        batch.notify_payload = None  # a batch rolled back before its COMMIT told nobody
        with conn.round_trip():
            cursor = conn.raw.execute(self._begin)
            cursor.nextset()
            row = cursor.fetchone()
        assert row is not None
        batch.xid, batch.backend_pid = row[-2], conn.raw.info.backend_pid
        if self._clock is not None:
            self._clock.not_before(row[-1])  # the clock is last (the lock, when taken, first)
        return conn

    def commit(self, conn: PgConnection) -> None:
        # The batch's NOTIFY goes with its COMMIT: one round trip, sent as one simple
        # query (no parameters), so the payload is quoted here.
        notify, self._batch.notify_payload = self._batch.notify_payload, None
        statement = "COMMIT"
        if notify is not None:
            statement = sql.SQL("SELECT pg_notify({}, {}); COMMIT").format(self.channel, notify).as_string(conn.raw)
        try:
            with conn.round_trip():
                conn.raw.execute(statement)
        except psycopg.OperationalError as error:
            if not conn.broken:
                raise
            self._set_writable(False)
            lost = describe(error)
            if not self._committed(self._batch.xid, self._batch.backend_pid, lost):
                raise CommitLost(f"the connection was lost during COMMIT, which did not commit: {lost}") from None
            log.warning("the connection was lost during COMMIT, which the server says committed: %s", lost)
        self._set_writable(True)
        if notify is not None:
            with self._notified:
                self.notifies += 1

    def _committed(self, xid: str, backend_pid: int, lost: str) -> bool:
        """Whether transaction `xid`, whose COMMIT was sent on the connection of `backend_pid`
        before it was lost, committed: asked of the server on new connections until the
        stall bound runs out. A transaction still in progress (its backend has not yet seen
        the connection go) is settled by terminating that backend: it then either committed
        or never will. Raises CommitInDoubt when the server cannot tell in time."""
        with self._notified:
            self.outcomes_asked += 1
        deadline = time.monotonic() + self._target.stall_timeout_s
        last = lost
        while True:
            # A connection attempt that hangs must not outlast the bound either.
            patience = dataclasses.replace(self._target, connect_timeout_s=max(1.0, deadline - time.monotonic()))
            try:
                with connect(patience) as raw:
                    row = raw.execute("SELECT pg_xact_status(%s::xid8)", (xid,)).fetchone()
                    status = row[0] if row is not None else None
                    if status == "committed":
                        return True
                    if status == "aborted":
                        return False
                    if status == "in progress":
                        # Its backend still holds it: once terminated, the status is final.
                        raw.execute("SELECT pg_terminate_backend(%s, 1000)", (backend_pid,))
                        last = f"transaction {xid} was still in progress"
                    else:
                        last = f"the server has no status for transaction {xid}"
            except psycopg.Error as error:
                last = describe(error)
            if time.monotonic() >= deadline:
                raise CommitInDoubt(
                    f"the connection was lost during COMMIT, and whether it committed could not be learned: {last}"
                )
            time.sleep(0.1)  # the server may be restarting: ask again shortly

    def is_busy(self, error: BaseException) -> bool:
        if isinstance(error, _RETRYABLE):
            return True
        if isinstance(error, CommitLost):
            return True  # the server says nothing of it was applied
        if isinstance(error, CommitInDoubt):
            return False  # it may have committed: running it again could apply it twice
        if isinstance(error, DatabaseUnreachable):
            return False  # the server is away: the callers learn it now, not after every retry
        # The connection was lost (or could not be made) before COMMIT: nothing was applied.
        conn = self._batch.conn
        lost = conn is None or conn.broken
        if lost:
            self._set_writable(False)
        return lost and isinstance(error, (psycopg.OperationalError, Unavailable))

    def is_storage_error(self, error: BaseException) -> bool:
        return isinstance(error, psycopg.OperationalError)

    def announce(self, conn: PgConnection, wakes: Wakes) -> None:
        """Keeps the batch's notification for `commit`, which sends it with the COMMIT."""
        self._batch.notify_payload = wake_payload(self._daemon_id, wakes) if self._notify else None

    def job_guard(self, timer: Callable[[], float], *, again: bool) -> JobGuard:
        """A batch's first attempt runs its jobs without savepoints (two round trips per job)
        and runs of them in one statement, unless the benchmark's "merge" switch is off (see
        __init__); once a job failed having written, a savepoint per job (runs.py)."""
        return SAVEPOINTS if again else MergedRuns(timer, self.is_storage_error, merging=self._merges)

    def crew(self, writers: int, jobs_waiting: Callable[[], bool]) -> list[PoolShift]:
        """A pool of writers taking turns (pool.py)."""
        return WriterPool(self.commit, writers, jobs_waiting).shifts

    def close(self, conn: PgConnection, checkpoint: bool) -> None:
        conn.close()


# Benchmark-only: what the board lock, NOTIFY, group commit and runs of completions in one
# statement (writer.py's `Mergeable`) cost or save, measured by switching them off ("lock",
# "notify", "group", "merge", comma-separated). Either of the first two off breaks
# a board served by several daemons; the lock off is sound with one daemon of one writer
# thread only (the daemon refuses it with more, unless group commit is off too). "lock,group"
# with a pool of writers runs one job per transaction, the writers in parallel: the writer of
# a board ordered by row locks alone, without those locks' extra statements, so its figure
# bounds that design's from above. Its writes are not ordered against each other: it serves
# the benchmark's load (no gates, no Watch) and nothing else.
BENCH_SWITCHES_ENV = "CORRAL_BENCH_PG_OFF"
BENCH_SWITCHES = ("lock", "notify", "group", "merge")


def bench_switches_off() -> frozenset[str]:
    named = frozenset(filter(None, os.environ.get(BENCH_SWITCHES_ENV, "").split(",")))
    if named - set(BENCH_SWITCHES):
        known = ", ".join(BENCH_SWITCHES)
        raise ConfigError(f"{BENCH_SWITCHES_ENV}: unknown switch in {sorted(named)} (known: {known})")
    if named:
        log.warning("benchmark switches off: %s; this daemon must be its board's only one", ", ".join(sorted(named)))
    return named


def notify_channel(schema: str) -> str:
    return f"corral_{schema}"


def new_daemon_id() -> str:
    """Unique among the board's daemons, and readable: host, pid, and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


# ---------------------------------------------------------------- wake-ups between daemons


def wake_payload(daemon_id: str, wakes: Wakes) -> str | None:
    """What another daemon must hear of a commit, as compact JSON; None when nothing.

    Claims handed to a waiting stream, tallies and activity lines are this daemon's own.
    """
    told: dict[str, Any] = {}
    if wakes.ready_roles:
        told["r"] = {role: count for role, count in wakes.ready_roles.items() if count > 0}
    if wakes.teammates:
        told["t"] = sorted(wakes.teammates)
    if wakes.may_claim:
        told["m"] = sorted(wakes.may_claim)
    if wakes.everyone:
        told["a"] = 1
    if wakes.ended:
        told["x"] = wakes.ended
    if wakes.next_deadline_ms is not None:
        told["n"] = wakes.next_deadline_ms
    if wakes.events:
        told["e"] = 1
    if wakes.claims_ended:
        told["c"] = {
            name: [[end.task_id, end.token, int(end.reason), end.detail] for end in ends]
            for name, ends in wakes.claims_ended.items()
        }
    if wakes.streams_opened:
        told["o"] = sorted(wakes.streams_opened)
    if wakes.credentials:
        told["k"] = 1
    if wakes.output:
        told["w"] = sorted(wakes.output)
    if not told:
        return None
    told["d"] = daemon_id
    payload = json.dumps(told, separators=(",", ":"))
    if len(payload.encode()) > NOTIFY_PAYLOAD_MAX:
        # Too much to say: the others wake every stream and look for themselves.
        payload = json.dumps({"d": daemon_id, "a": 1, "e": 1, "n": wakes.next_deadline_ms}, separators=(",", ":"))
    return payload
