"""Helpers shared by the corrald server tests (imported by the test modules).

`SyncBoard` wraps a real `Board` on a real SQLite file with its own event loop,
so tests drive the async API with plain calls. Time comes from a `FakeClock`,
or from a `SystemClock` over fake host clocks, only. Database checks go
through the writer (`rows`, `scalar`), which sees exactly what has been
committed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import pathlib
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from corrald.board import Board
from corrald.clock import Clock
from corrald.config import Limits, WriterConfig
from corrald.model import (
    ArtifactRecord,
    ClaimGrant,
    Proposed,
    ReviewPolicy,
    TaskCreation,
    TaskRecord,
    TaskSpec,
    TaskState,
    Usage,
    Verdict,
)
from corrald.store import tasks, team
from corrald.store.artifacts import Uploaded
from corrald.store.postgres.target import DEFAULT_WRITERS as PG_DEFAULT_WRITERS
from corrald.stream import StreamState
from tests.support import SecondsClock  # noqa: F401 (the writer and pacing tests import it from here)
from tests.support.boards import qmarks

LEAD_TOKEN = "t"
CALL_TIMEOUT = 20.0  # seconds; a hung writer fails the test instead of hanging it


def claim_grant(token: str, task_id: str = "t") -> ClaimGrant:
    """A claim of `task_id` by w1 with `token`, made by hand for the stream and wake-hub tests
    (which never reach a store)."""
    record = TaskRecord(
        seq=1,
        id=task_id,
        title="",
        description="",
        payload=b"",
        depends_on=(),
        priority=0,
        required_role="",
        max_attempts=1,
        lease_ms=1000,
        state=TaskState.IN_PROGRESS,
        owner="w1",
        attempt=1,
        result=b"",
        error="",
        create_ms=0,
        lease_expire_ms=0,
        finish_ms=None,
        not_before_ms=None,
        retry_backoff_ms=0,
        retry_backoff_max_ms=0,
        ready_ms=None,
    )
    return ClaimGrant(record, token, 0, 1, 1)


def spec(
    task_id: str,
    *deps: str,
    title: str | None = None,
    description: str = "",
    payload: bytes = b"",
    priority: int = 0,
    max_attempts: int = 0,
    lease_ms: int = 0,
    required_role: str = "",
    not_before_ms: int | None = None,
    retry_backoff_ms: int | None = 0,
    retry_backoff_max_ms: int | None = None,
    concurrency_key: str = "",
    review: ReviewPolicy | None = None,
    resources: Sequence[str] = (),
    shared_resources: Sequence[str] = (),
) -> TaskSpec:
    """A raw spec as the service layer would build it (0 = use the default).

    Unlike the service's default of 1 s, a retry here follows at once
    (`retry_backoff_ms=0`): the tests of claims and leases retry without
    moving the clock; test_board_gates.py tests the backoff itself.
    """
    return TaskSpec(
        id=task_id,
        title=task_id if title is None else title,
        description=description,
        payload=payload,
        depends_on=tuple(deps),
        priority=priority,
        max_attempts=max_attempts,
        lease_ms=lease_ms,
        required_role=required_role,
        not_before_ms=not_before_ms,
        retry_backoff_ms=retry_backoff_ms,
        retry_backoff_max_ms=retry_backoff_max_ms,
        concurrency_key=concurrency_key,
        review=review,
        resources=tuple(resources),
        shared_resources=tuple(shared_resources),
    )


class SyncBoard:
    """A Board plus an event loop of its own; `restart()` reopens the same file."""

    def __init__(
        self,
        path: pathlib.Path,
        clock: Clock,
        *,
        limits: Limits = Limits(),
        writer_config: WriterConfig = WriterConfig(),
        pg_writers: int = PG_DEFAULT_WRITERS,
    ) -> None:
        """`pg_writers`: on a PostgreSQL board, the writer threads (as `--pg-writers`)."""
        self.path = path
        self.pg_writers = pg_writers
        self.clock = clock
        self.limits = limits
        self.writer_config = writer_config
        self.loop = asyncio.new_event_loop()
        self.board: Board | None = None
        self._probe: sqlite3.Connection | None = None

    # ------------------------------------------------------------ lifecycle

    def open(self) -> SyncBoard:
        where: Any = self.path
        if not isinstance(where, pathlib.Path):  # a PostgreSQL schema (a PgTarget), on the test's clock
            from corrald.credentials import token_hash
            from corrald.store.postgres.store import open_board

            where = open_board(where, token_hash, database_clock=False, lead_token=LEAD_TOKEN)
            self.writer_config = dataclasses.replace(self.writer_config, writers=self.pg_writers)
        board = Board(
            where, clock=self.clock, limits=self.limits, writer_config=self.writer_config, lead_token=LEAD_TOKEN
        )
        board.open()
        self.board = board
        return self

    def close(self) -> None:
        if self.board is not None:
            self.board.close()
            self.board = None

    def restart(self) -> None:
        """Closes the Board and opens a new one on the same file (recovery runs in open)."""
        self.close()
        self.open()

    def dispose(self) -> None:
        self.close()
        if self._probe is not None:
            self._probe.close()
            self._probe = None
        self.loop.close()

    # ------------------------------------------------------------ running

    def run(self, coro) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, CALL_TIMEOUT))

    def call(self, job: Callable) -> Any:
        """Runs a store job through the writer, synchronously."""
        assert self.board is not None
        return self.board.writer.call(job, timeout=CALL_TIMEOUT)

    @contextlib.contextmanager
    def traced_statements(self) -> Iterator[list[str]]:
        """The statements the writer runs while inside, as SQLite's trace callback gives
        them (a SQLite board's: the tests that count statements are `sqlite_only`)."""
        statements: list[str] = []
        self.call(lambda tx: tx.conn.set_trace_callback(statements.append))
        try:
            yield statements
        finally:
            self.call(lambda tx: tx.conn.set_trace_callback(None))

    # ------------------------------------------------------------ board operations

    def create(self, *specs: TaskSpec, request_id: str = "") -> list[TaskRecord]:
        created = self.run(self.board.create_batch(list(specs), request_id))
        return [self.run(self.board.get_task(task.id)) for task in created.tasks]

    def add(self, name: str, roles: Sequence[str] = (), require_plan: bool = False) -> str:
        _, token = self.run(self.board.add_teammate(name, tuple(roles), require_plan))
        return token

    def claim(self, name: str) -> ClaimGrant | None:
        """One claim job (reclaim expired, pick, update) for `name` with its stored roles."""
        return self.call(lambda tx: tasks.claim_next(tx, name, team.roles_of(tx.conn, name)))

    def next_for(self, name: str, cursor: StreamState, *, mark: bool = True, look_first: bool = False) -> list:
        found = self.run(self.board.next_for(name, cursor.view(), look_first=look_first))
        cursor.learned(found)  # as the stream's loop takes in what its check learned
        items = found.items
        if mark:
            cursor.mark_sent(items)
        return items

    def renew(
        self,
        name: str,
        task_id: str,
        token: str,
        progress: str = "",
        fraction: float | None = None,
        usage: Usage | None = None,
    ):
        return self.run(self.board.renew(name, task_id, token, progress, fraction, reported=usage))

    def complete(
        self,
        name: str,
        task_id: str,
        token: str,
        result: bytes = b"done",
        usage: Usage | None = None,
        verdict: Verdict | None = None,
    ) -> TaskRecord:
        return self.run(self.board.complete(name, task_id, token, result, reported=usage, verdict=verdict)).task

    def review(self, task_id: str, approve: bool, feedback: str = "") -> TaskRecord:
        """The Lead's ReviewTask."""
        return self.run(self.board.review_task(task_id, approve, feedback))

    def fail(
        self,
        name: str,
        task_id: str,
        token: str,
        error: str = "boom",
        retryable: bool = True,
        usage: Usage | None = None,
    ) -> TaskRecord:
        return self.run(self.board.fail(name, task_id, token, error, retryable, reported=usage))

    def release(self, name: str, task_id: str, token: str) -> TaskRecord:
        return self.run(self.board.release(name, task_id, token))

    def ask(self, name: str, task_id: str, token: str, question: str = "which one?") -> TaskRecord:
        return self.run(self.board.ask_question(name, task_id, token, question))

    def answer(self, task_id: str, answer: str = "this one") -> TaskRecord:
        return self.run(self.board.answer_question(task_id, answer))

    def propose(self, name: str, *specs: TaskSpec, task_id: str = "", token: str = "", block: bool = False) -> Proposed:
        return self.run(self.board.propose_tasks(name, list(specs), task_id, token, block))

    def decide(self, *task_ids: str, approve: bool = True, feedback: str = "") -> list[TaskRecord]:
        return self.run(self.board.decide_proposals(list(task_ids), approve, feedback))[0]

    def depend(self, task_id: str, *depends_on: str) -> TaskRecord:
        return self.run(self.board.add_dependencies(task_id, list(depends_on)))

    def set_creation(self, name: str, policy: TaskCreation) -> TaskCreation:
        return self.run(self.board.set_task_creation(name, policy))

    def cancel(self, *task_ids: str) -> list[TaskRecord]:
        return self.run(self.board.cancel_tasks(list(task_ids)))

    def store_blob(self, data: bytes, piece: int = 64 * 1024) -> str:
        """Stores `data` in the board's blob store as an upload does (in pieces, then made
        durable under its SHA-256); returns that SHA-256. Blocking, from any thread."""
        upload = self.board.blobs.begin()
        for at in range(0, len(data), piece):
            upload.write(data[at : at + piece])
        digest = hashlib.sha256(data).hexdigest()
        upload.finish(digest)
        return digest

    def attach_after_upload(self, name: str, task_id: str, token: str, artifact: str, data: bytes):
        """Stores the bytes now; returns the attach (a coroutine, for any loop running the board)."""
        upload = Uploaded(artifact, "application/octet-stream", len(data), self.store_blob(data))
        return self.board.attach_artifact(name, task_id, token, upload)

    def attach(self, name: str, task_id: str, token: str, artifact: str, data: bytes) -> ArtifactRecord:
        """A whole PutArtifact at the board: the bytes stored, then the attach job."""
        return self.run(self.attach_after_upload(name, task_id, token, artifact, data))

    def set_limit(self, key: str, limit: int):
        return self.run(self.board.set_concurrency_limit(key, limit))

    def revoke(self, task_id: str, reason: str = "") -> TaskRecord:
        return self.run(self.board.revoke_claim(task_id, reason))

    def set_budget(self, name: str, max_cost_micros: int = 0, max_tokens: int = 0):
        return self.run(self.board.set_budget(name, max_cost_micros, max_tokens))

    def reap(self) -> int | None:
        return self.run(self.board.reap())

    def send(self, sender: str, to: str, body: str) -> list[str]:
        return self.run(self.board.send_message(sender, to, body))

    def ack(self, name: str, through_seq: int) -> int:
        return self.run(self.board.ack(name, through_seq))

    # ------------------------------------------------------------ inspection

    def task(self, task_id: str) -> TaskRecord:
        return self.call(lambda tx: tasks.get_task(tx.conn, task_id))

    def state(self, task_id: str) -> TaskState:
        return self.task(task_id).state

    def rows(self, sql: str, params: Sequence = ()) -> list[tuple]:
        def query(tx) -> list[tuple]:
            cursor = qmarks(tx.conn).execute(sql, tuple(params))
            return cursor.fetchall() if cursor.description is not None else []  # a statement without rows

        return self.call(query)

    def scalar(self, sql: str, params: Sequence = ()) -> Any:
        return self.rows(sql, params)[0][0]

    def events(self, kind: str | None = None) -> list[tuple]:
        if kind is None:
            return self.rows("SELECT seq, kind, data FROM events ORDER BY seq")
        return self.rows("SELECT seq, kind, data FROM events WHERE kind = ? ORDER BY seq", (kind,))

    def counts(self) -> dict[str, int]:
        names = ("tasks", "deps", "claims", "events", "create_requests", "teammates", "inbox", "plans", "shutdowns")
        return self.call(lambda tx: {n: tx.conn.execute(f"SELECT count(*) FROM {n}").fetchone()[0] for n in names})

    def dump(self) -> str:
        if not isinstance(self.path, pathlib.Path):  # PostgreSQL: every row of every table, in order
            return self.call(lambda tx: "\n".join(map(repr, _all_rows(tx.conn))))
        return self.call(lambda tx: "\n".join(tx.conn.iterdump()))

    def data_version(self) -> int:
        """PRAGMA data_version seen by a separate connection: moves when anyone else commits a change
        (on PostgreSQL, the dump alone tells)."""
        if not isinstance(self.path, pathlib.Path):
            return 0
        if self._probe is None:
            self._probe = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, isolation_level=None)
        return self._probe.execute("PRAGMA data_version").fetchone()[0]

    def snapshot(self) -> tuple:
        """What moves when a transaction persists anything: data_version and the whole dump."""
        return self.data_version(), self.dump()


def _all_rows(conn) -> list[tuple]:
    tables = [
        name
        for (name,) in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1"
        ).fetchall()
    ]
    return [
        (table, *row)
        for table in tables
        if table != "daemons"  # each daemon's heartbeat, not the board
        for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
    ]


class Blocker:
    """A writer job that holds the writer thread until released.

    While it runs, newly submitted jobs queue up. Given the writer's (fake) batch
    timer, it uses up its batch's time budget when released, so the jobs the same
    caller queued meanwhile form the next batch (group commit) and the queue depth
    is under the test's control; without one, they join the blocker's batch. (A
    batch past its budget still takes jobs of callers with none in it.)
    """

    def __init__(self, timer=None, timeout: float = 10.0) -> None:
        self.started = threading.Event()
        self.go = threading.Event()
        self.timer = timer
        self.timeout = timeout

    def __call__(self, tx) -> str:
        self.started.set()
        if not self.go.wait(self.timeout):
            raise TimeoutError("blocker was never released")
        if self.timer is not None:
            self.timer.now += 3600  # past any batch budget
        return "blocker"

    def hold(self, writer) -> concurrent.futures.Future:
        future = writer.submit(self)
        assert self.started.wait(self.timeout), "writer never started the blocking job"
        return future

    def release(self) -> None:
        self.go.set()
