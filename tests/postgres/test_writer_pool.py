"""A PostgreSQL board's pool of writer threads (`--pg-writers`): each with its own
connection, draining one queue. The board's write lock orders their transactions, one
owner's jobs run in the order they were queued, and callers learn their outcomes in
the order the batches committed.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from corrald.clock import FakeClock
from corrald.config import WriterConfig
from corrald.store.postgres.storage import PgStorage
from corrald.store.postgres.target import PgTarget
from corrald.writer import CommitFailed, Writer, job_owner
from tests.support import wait_until
from tests.support.postgres import backends_waiting_for_a_lock, run_database_dsn, scratch_schema

pytestmark = pytest.mark.timeout(90)
WAIT = 15  # seconds for any single future or condition
WRITERS = 4


@pytest.fixture
def schema() -> Iterator[str]:
    with scratch_schema("runs (seq BIGSERIAL PRIMARY KEY, owner TEXT NOT NULL, n INT NOT NULL)") as name:
        yield name


def pool(schema: str, writers: int = WRITERS, storage_class: type[PgStorage] = PgStorage, **options) -> Writer:
    storage = storage_class(PgTarget.parse(run_database_dsn(), schema=schema), "test-daemon", clock=None)
    return Writer(storage.open, FakeClock(), WriterConfig(writers=writers), storage=storage, **options)


def run(owner: str, n: int):
    def job(tx) -> int:
        (seq,) = tx.conn.execute("INSERT INTO runs (owner, n) VALUES (%s, %s) RETURNING seq", (owner, n)).fetchone()
        return seq

    return job


def stored(schema: str) -> list[tuple[int, str, int]]:
    with psycopg.connect(run_database_dsn(), autocommit=True) as conn:
        return conn.execute(f"SELECT seq, owner, n FROM {schema}.runs ORDER BY seq").fetchall()


def test_every_writer_holds_a_connection_of_its_own(schema):
    writer = pool(schema)
    writer.start()
    try:
        with psycopg.connect(run_database_dsn(), autocommit=True) as conn:
            (connections,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'corrald'"
                " AND datname = current_database() AND pid != pg_backend_pid()"
            ).fetchone()
        assert connections >= WRITERS
        assert writer.stats().writers == WRITERS
    finally:
        writer.close()


def test_one_owners_jobs_run_in_the_order_they_were_queued(schema):
    """Eight owners each queue 50 jobs without waiting for any: the four writers run
    them all, and each owner's jobs ran (their rows' sequence numbers) in queue order."""
    writer = pool(schema)
    writer.start()
    owners = [f"owner-{number}" for number in range(8)]
    futures: dict[str, list[concurrent.futures.Future]] = {owner: [] for owner in owners}

    def queue(owner: str) -> None:
        job_owner.set(owner)
        for n in range(50):
            futures[owner].append(writer.submit(run(owner, n)))

    try:
        threads = [threading.Thread(target=queue, args=(owner,)) for owner in owners]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
        for owner in owners:
            [future.result(WAIT) for future in futures[owner]]
        stats = writer.stats()
    finally:
        writer.close()
    rows = stored(schema)
    assert len(rows) == 8 * 50
    for owner in owners:
        assert [n for _, who, n in rows if who == owner] == list(range(50)), f"{owner}'s jobs ran out of order"
    assert stats.commits > 1 and stats.jobs == 8 * 50


def test_callers_learn_their_outcomes_in_the_order_the_batches_committed(schema):
    """The first batch closes with a second job waiting (past its time budget), so another
    writer runs that job in a batch of its own. The first writer is held after its COMMIT,
    before it answers, until the second batch has committed: the second batch's caller
    still hears only after the first's."""
    heard: list[str] = []
    second_queued = threading.Event()
    clock = {"now": 0.0}
    batches = 0

    def first_job(tx) -> int:
        assert second_queued.wait(WAIT)
        clock["now"] += 1.0  # past the batch's budget: it takes no more of this caller's jobs
        return run("first", 0)(tx)

    def on_batch(seconds: float, jobs: int) -> None:
        nonlocal batches
        batches += 1
        if batches == 1:
            wait_until(
                lambda: any(owner == "second" for _, owner, _ in stored(schema)),
                WAIT,
                "the second batch to commit while the first was held",
            )

    writer = pool(schema, on_batch=on_batch, timer=lambda: clock["now"])
    writer.start()
    try:
        first = writer.submit(first_job)
        first.add_done_callback(lambda _: heard.append("first"))
        second = writer.submit(run("second", 0))
        second.add_done_callback(lambda _: heard.append("second"))
        second_queued.set()
        assert first.result(WAIT) < second.result(WAIT)
    finally:
        writer.close()
    assert heard == ["first", "second"]


def test_a_sqlite_board_refuses_more_than_one_writer(tmp_path):
    with pytest.raises(ValueError, match="SQLite board has one writer"):
        Writer(lambda: None, FakeClock(), WriterConfig(writers=2))


class LosesItsConnectionAfterBegin(PgStorage):
    """Once armed, the next BEGIN to return finds its connection cut by the server;
    `failed` is set once the writer has met the failure that follows."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.armed = False
        self.cut, self.failed = threading.Event(), threading.Event()

    def begin(self, conn):
        conn = super().begin(conn)
        if self.armed:
            self.armed = False
            pid = conn.raw.info.backend_pid
            with psycopg.connect(run_database_dsn(), autocommit=True) as side:
                side.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
            self.cut.set()
        return conn

    def is_busy(self, error: BaseException) -> bool:
        self._noticed()
        return super().is_busy(error)

    def is_storage_error(self, error: BaseException) -> bool:
        self._noticed()
        return super().is_storage_error(error)

    def _noticed(self) -> None:
        if self.cut.is_set():
            self.failed.set()


def test_a_writer_that_opened_a_transaction_for_a_job_cancelled_meanwhile_goes_on_when_its_connection_is_cut(
    schema,
):
    """Writer A's batch closes with a job waiting (past its time budget) and is held before
    its COMMIT, so writer B opens a transaction for that job and waits for the board lock;
    the job's caller cancels it. Once A commits, B's BEGIN returns to a connection the
    server has cut, with nothing to run. B gives that transaction up and the pool goes on:
    the jobs after it commit, and the pool stops."""
    before_commit, release, queued = threading.Event(), threading.Event(), threading.Event()
    clock = {"now": 0.0}

    def first_job(tx) -> int:
        assert queued.wait(WAIT)
        clock["now"] += 1.0  # past the batch's budget: it takes no more of this caller's jobs
        return run("first", 0)(tx)

    def hold_the_first_batch(conn, now_ms, changed, failures) -> None:
        if not before_commit.is_set():
            before_commit.set()
            assert release.wait(WAIT)

    writer = pool(
        schema,
        writers=2,
        storage_class=LosesItsConnectionAfterBegin,
        epilogue=hold_the_first_batch,
        timer=lambda: clock["now"],
    )
    storage = writer._storage
    writer.start()
    try:
        first = writer.submit(first_job)
        cancelled = writer.submit(run("cancelled", 0))
        queued.set()
        assert before_commit.wait(WAIT)
        storage.armed = True  # A is past its BEGIN: the next one to return is B's
        with psycopg.connect(run_database_dsn(), autocommit=True) as conn:
            wait_until(lambda: backends_waiting_for_a_lock(conn) > 0, WAIT, "a writer waiting for the board lock")
        assert cancelled.cancel()
        release.set()
        first.result(WAIT)
        assert storage.failed.wait(WAIT), "B's connection was not cut, or B never used it"
        # Jobs one after the other for a second (past any retry's backoff): each commits.
        until, after = time.monotonic() + 1.0, 0
        while time.monotonic() < until and after < 1_000:
            assert writer.submit(run("after", after)).result(5) > 0, f"job {after} after the cut hung"
            after += 1
        assert writer.stats().failed_commits == 0
    finally:
        stopping = threading.Thread(target=writer.close)
        stopping.start()
        stopping.join(WAIT)
        assert not stopping.is_alive(), "the pool did not stop"
    expected = [("first", 0)] + [("after", n) for n in range(after)]
    assert [(owner, n) for _, owner, n in stored(schema)] == expected


def test_a_connection_left_in_pipeline_mode_by_a_failed_job_is_replaced(schema):
    """A job's statement fails the way psycopg's `executemany` fails when its backend goes
    mid-pipeline: the connection is left in libpq's pipeline mode with a query in flight,
    not marked broken, and every statement on it fails. The writer must not reuse it: the
    next batch runs on a new connection and commits."""
    writer = pool(schema, writers=1)
    writer.start()
    try:
        writer.call(run("before", 0), timeout=WAIT)

        def wedge(tx) -> None:
            tx.conn.execute("INSERT INTO runs (owner, n) VALUES ('wedged', 0)")
            pgconn = tx.conn.raw.pgconn
            pgconn.enter_pipeline_mode()
            pgconn.send_query_params(b"SELECT 1", None)
            raise psycopg.OperationalError("cannot exit pipeline mode while busy")

        with pytest.raises(CommitFailed):
            writer.call(wedge, timeout=WAIT)
        for n in range(3):
            writer.call(run("after", n), timeout=WAIT)
    finally:
        writer.close()
    assert [(owner, n) for _, owner, n in stored(schema)] == [("before", 0), ("after", 0), ("after", 1), ("after", 2)]
