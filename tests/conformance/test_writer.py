"""The writer, on a SQLite file and on a PostgreSQL schema of its own (each test runs on
both): savepoints per job, group commit, commit failures, re-entrancy, overload
refusal, and its counters. What the writer promises its callers holds on both: a job
rolls back alone, nothing is reported that did not commit, futures resolve after COMMIT.
Where the drivers differ in how (PostgreSQL runs a batch again, with a savepoint per
job, after a job failed having written), the test says so. SQLite's own machinery (a
full disk, SQLITE_BUSY, its COMMIT's I/O errors) is tested in
tests/server/test_writer_sqlite.py; PostgreSQL's runs of mergeable jobs and its pool of
writers in tests/postgres/test_writer_jobs.py and test_writer_pool.py.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import pathlib
import sqlite3
import threading
from collections.abc import Iterator

import psycopg
import pytest

from corrald import failpoints
from corrald.clock import FakeClock
from corrald.config import WriterConfig, WriterLevels
from corrald.errors import Overloaded, ReentrantSubmit, Unavailable
from corrald.store.postgres.storage import DatabaseUnreachable, PgStorage
from corrald.store.postgres.target import PgTarget
from corrald.store.sqlite.storage import open_writer
from corrald.writer import CommitFailed, Writer, job_owner
from tests.support import wait_until, wait_until_async
from tests.support.boardkit import Blocker, SecondsClock
from tests.support.boards import qmarks
from tests.support.postgres import run_database_dsn, scratch_schema

pytestmark = pytest.mark.timeout(30)
WAIT = 10  # seconds for any single future


@pytest.fixture
def timer() -> SecondsClock:
    return SecondsClock()


@pytest.fixture
def db_path(store: str, tmp_path: pathlib.Path) -> Iterator[pathlib.Path | PgTarget]:
    """Where the writer writes: a SQLite file, or a PostgreSQL schema of its own with table t."""
    if store == "sqlite":
        yield tmp_path / "corral.sqlite3"
        return
    with scratch_schema("t (k TEXT PRIMARY KEY, v BYTEA)") as schema:
        yield PgTarget.parse(run_database_dsn(), schema=schema)


def _writer_of(db_path, config: WriterConfig, clock, storage_class: type[PgStorage] = PgStorage, **options) -> Writer:
    """A writer of the test's store: the SQLite file, or the PostgreSQL schema."""
    if isinstance(db_path, PgTarget):
        storage = storage_class(db_path, "test-daemon", clock=None)
        return Writer(storage.open, clock, config, storage=storage, **options)

    def connect():
        return open_writer(db_path, synchronous=config.synchronous, busy_timeout_ms=config.busy_timeout_ms)

    return Writer(connect, clock, config, **options)


@pytest.fixture
def make_writer(db_path, timer):
    made: list[Writer] = []

    def make(config: WriterConfig = WriterConfig(), on_commit=None, clock: FakeClock | None = None) -> Writer:
        # The batch budget's timer stands still unless a test moves it, so batches
        # are decided by the queue alone.
        writer = _writer_of(db_path, config, clock or FakeClock(), on_commit=on_commit, timer=timer)
        writer.start()
        made.append(writer)
        if not isinstance(db_path, PgTarget):
            writer.call(lambda tx: tx.conn.execute("CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v BLOB)"), WAIT)
        return writer

    yield make
    for writer in made:
        writer.close()


@pytest.fixture
def writer(make_writer) -> Writer:
    return make_writer()


def insert(key: str, value: bytes = b""):
    def job(tx):
        qmarks(tx.conn).execute("INSERT INTO t (k, v) VALUES (?, ?)", (key, value))
        return key

    return job


def insert_then_raise(key: str):
    def job(tx):
        qmarks(tx.conn).execute("INSERT INTO t (k) VALUES (?)", (key,))
        raise ValueError(f"job {key} fails after writing")

    return job


def keys(db_path) -> set[str]:
    """What a fresh connection sees: only committed rows."""
    if isinstance(db_path, PgTarget):
        with psycopg.connect(run_database_dsn(), autocommit=True) as pg:
            return {k for (k,) in pg.execute(f"SELECT k FROM {db_path.schema}.t")}
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return {k for (k,) in conn.execute("SELECT k FROM t")}
    finally:
        conn.close()


def outcome(future):
    try:
        return ("ok", future.result(WAIT))
    except Exception as error:  # noqa: BLE001 (the test looks at which)
        return ("error", error)


# ---------------------------------------------------------------- savepoints and group commit


class Jobs:
    """Jobs that count how many times each ran."""

    def __init__(self) -> None:
        self.runs: collections.Counter[str] = collections.Counter()

    def insert(self, key: str, *, then_raise: bool = False):
        def job(tx):
            self.runs[key] += 1
            qmarks(tx.conn).execute("INSERT INTO t (k) VALUES (?)", (key,))
            if then_raise:
                raise ValueError(f"{key} fails after writing")
            return key

        return job

    def refuse(self, key: str):
        def job(tx):
            self.runs[key] += 1
            tx.conn.execute("SELECT count(*) FROM t").fetchone()
            raise LookupError(f"{key} fails before writing")

        return job


def one_batch(writer: Writer, timer: SecondsClock, jobs: list) -> list[tuple[str, object]]:
    """Runs `jobs` in one batch, queued behind a blocker; their outcomes."""
    blocker = Blocker(timer)
    held = blocker.hold(writer)
    commits = writer.stats().commits
    futures = [writer.submit(job) for job in jobs]
    blocker.release()
    assert held.result(WAIT) == "blocker"
    outcomes = [outcome(future) for future in futures]
    # The blocker's batch and one batch for all the jobs (on PostgreSQL run a second time
    # with a savepoint per job, after a job failed having written: still one commit).
    assert writer.stats().commits - commits == 2, "the jobs were not one batch"
    return outcomes


def test_a_failing_job_rolls_back_alone(writer, db_path, timer, store):
    jobs = Jobs()
    outcomes = one_batch(
        writer,
        timer,
        [
            jobs.insert("a"),
            jobs.insert("b", then_raise=True),
            jobs.insert("c"),
            jobs.insert("a"),  # a statement that fails (a duplicate key) is a job error too
            jobs.refuse("e"),
            jobs.insert("d"),
        ],
    )
    kinds = [(kind, type(value)) for kind, value in outcomes]
    duplicate = sqlite3.IntegrityError if store == "sqlite" else psycopg.errors.UniqueViolation
    assert kinds == [("ok", str), ("error", ValueError), ("ok", str), ("error", duplicate), ("error", LookupError)] + [
        ("ok", str)
    ]
    assert keys(db_path) == {"a", "c", "d"}
    if store == "sqlite":  # a savepoint per job: each job ran once
        assert jobs.runs == {"a": 2, "b": 1, "c": 1, "e": 1, "d": 1}
    else:  # the first run stopped at b; the second ran every job once, each in its savepoint
        assert jobs.runs == {"a": 3, "b": 2, "c": 1, "e": 1, "d": 1}


def test_a_job_failing_before_it_writes_fails_alone_and_runs_once(writer, db_path, timer):
    jobs = Jobs()
    outcomes = one_batch(writer, timer, [jobs.insert("a"), jobs.refuse("b"), jobs.insert("c")])
    assert outcomes[0] == ("ok", "a") and outcomes[2] == ("ok", "c")
    assert outcomes[1][0] == "error" and isinstance(outcomes[1][1], LookupError)
    assert keys(db_path) == {"a", "c"}
    assert jobs.runs == {"a": 1, "b": 1, "c": 1}, "a refusal before any write needs no second run"


async def queued(writer: Writer, jobs: int) -> None:
    """Returns once the writer's queue holds `jobs` jobs (polled, with a deadline)."""
    await wait_until_async(lambda: writer.stats().queue_depth >= jobs, WAIT, f"the queue to hold {jobs} jobs")


def inserts_behind(writer: Writer, blocker: Blocker, count: int) -> int:
    """Queues `count` inserts while `blocker` holds the writer, releases it, checks that every
    insert succeeded, and returns how many commits all of it took."""
    held = blocker.hold(writer)
    commits = writer.stats().commits
    futures = [writer.submit(insert(f"k{i}")) for i in range(count)]
    blocker.release()
    held.result(WAIT)
    assert [f.result(WAIT) for f in futures] == [f"k{i}" for i in range(count)]
    return writer.stats().commits - commits


def test_batches_are_capped_at_max_batch(make_writer, timer):
    writer = make_writer(WriterConfig(max_batch=4))
    assert inserts_behind(writer, Blocker(timer), 10) == 1 + 3  # the blocker, then 4 + 4 + 2


def test_owners_take_turns_in_the_queue(writer, timer):
    """A caller with one job waits for one job of each busier caller, not for all of theirs."""
    ran: list[str] = []

    def record(label: str):
        def job(tx):
            ran.append(label)
            return label

        return job

    async def main():
        async def submit(owner: str, labels: list[str]):
            job_owner.set(owner)  # as the RPC layer does for each call
            return await asyncio.gather(*(writer.run(record(label)) for label in labels))

        blocker = Blocker(timer)
        held = blocker.hold(writer)
        hog = asyncio.create_task(submit("hog", [f"hog{i}" for i in range(6)]))
        await queued(writer, 6)  # the hog's six jobs are queued first
        others = [asyncio.create_task(submit(name, [name])) for name in ("v1", "v2")]
        await queued(writer, 8)
        blocker.release()
        await asyncio.wrap_future(held)
        return await hog, [await task for task in others]

    hog_results, other_results = asyncio.run(main())
    assert hog_results == [f"hog{i}" for i in range(6)] and other_results == [["v1"], ["v2"]]
    assert ran == ["hog0", "v1", "v2", "hog1", "hog2", "hog3", "hog4", "hog5"]


def reported_costs(writer: Writer, total_s: float) -> dict[str, float]:
    """What the writer reported per owner, once `total_s` in all has come: a batch's
    costs are reported after its replies are on their way, so they may lag them."""
    spent: collections.Counter[str] = collections.Counter()

    def all_reported() -> bool:
        spent.update(writer.costs.take())
        return sum(spent.values()) >= total_s - 1e-9

    wait_until(all_reported, 5, f"{total_s} s of writer time reported")
    return dict(spent)


def test_each_jobs_writer_time_is_reported_for_its_owner(writer, timer):
    """After each batch the writer hands pacing what every owner's jobs took (overload/costs.py)."""

    def costing(seconds: float):
        def job(tx):
            timer.now += seconds  # the job's own time, on the writer's timer
            return seconds

        return job

    async def main():
        async def submit(owner: str, seconds: float, jobs: int):
            job_owner.set(owner)
            await asyncio.gather(*(writer.run(costing(seconds)) for _ in range(jobs)))

        writer.costs.take()  # the table's creation
        await asyncio.gather(submit("heavy", 0.004, 3), submit("light", 0.0005, 2))

    asyncio.run(main())
    spent = reported_costs(writer, total_s=0.013)
    assert spent == {"heavy": pytest.approx(0.012), "light": pytest.approx(0.001)}
    assert writer.costs.take() == {}  # taken once


def test_a_batchs_own_time_is_shared_by_its_jobs_in_proportion_to_theirs(db_path, timer):
    """BEGIN, COMMIT, its fsync and the epilogue are paid for by the batch's jobs, each in
    proportion to its own time: a job that wrote three times as much pays three times as much."""

    def epilogue(conn, now, changed, failures):
        timer.now += 0.006  # the batch's own work, outside any job

    def costing(seconds: float):
        def job(tx):
            timer.now += seconds
            return seconds

        return job

    writer = _writer_of(db_path, WriterConfig(), FakeClock(), epilogue=epilogue, timer=timer)
    writer.start()
    try:
        blocker = Blocker()  # leaves the timer alone: costs nothing, uses no budget
        held = blocker.hold(writer)
        writer.costs.take()
        futures = []
        for owner, seconds in (("a", 0.003), ("b", 0.001)):
            token = job_owner.set(owner)
            futures.append(writer.submit(costing(seconds)))
            job_owner.reset(token)
        blocker.release()
        held.result(WAIT)
        assert [future.result(WAIT) for future in futures] == [0.003, 0.001]
        assert writer.stats().commits == 1  # all three in one batch
        # 10 ms in all (4 ms in the jobs, 6 in the batch's own work), shared 3:1.
        spent = reported_costs(writer, total_s=0.010)
        assert spent == {"": 0.0, "a": pytest.approx(0.0075), "b": pytest.approx(0.0025)}
    finally:
        writer.close()


def test_an_owner_of_expensive_jobs_counts_as_more_served(writer, timer):
    """Two owners with as many jobs taken, one's each ten times the writer time of the other's:
    the cheap owner's jobs go first, though the expensive owner's were queued first."""
    ran: list[str] = []

    def record(label: str, seconds: float):
        def job(tx):
            ran.append(label)
            timer.now += seconds
            return label

        return job

    async def main():
        async def submit(owner: str, seconds: float, labels: list[str]):
            job_owner.set(owner)
            return await asyncio.gather(*(writer.run(record(label, seconds)) for label in labels))

        # As many jobs each, alternating, so that only their cost tells the two apart. (Each
        # submission is a task of its own, with its own owner, as each call is.)
        for i in range(3):
            await asyncio.create_task(submit("heavy", 0.005, [f"warm-heavy{i}"]))
            await asyncio.create_task(submit("light", 0.0005, [f"warm-light{i}"]))
        ran.clear()
        blocker = Blocker(timer)
        held = blocker.hold(writer)
        heavy = asyncio.create_task(submit("heavy", 0.005, [f"heavy{i}" for i in range(3)]))
        await queued(writer, 3)
        light = asyncio.create_task(submit("light", 0.0005, [f"light{i}" for i in range(3)]))
        await queued(writer, 6)
        blocker.release()
        await asyncio.wrap_future(held)
        await asyncio.gather(heavy, light)

    asyncio.run(main())
    assert ran == ["light0", "light1", "light2", "heavy0", "heavy1", "heavy2"]


def test_a_batch_stops_taking_jobs_at_its_time_budget(make_writer, timer):
    writer = make_writer(WriterConfig(batch_budget_ms=5))
    blocker = Blocker(timer)
    held = blocker.hold(writer)
    commits = writer.stats().commits

    def slow(tx):  # a job that uses up the batch's budget
        timer.now += 0.005
        return writer.stats().commits

    def quick(tx):
        return writer.stats().commits

    futures = [writer.submit(slow)] + [writer.submit(quick) for _ in range(3)]
    blocker.release()
    held.result(WAIT)
    batch_of = [f.result(WAIT) for f in futures]
    # The slow job's batch stopped after it; the quick ones share the next.
    assert batch_of == [commits + 1, commits + 2, commits + 2, commits + 2]
    assert writer.stats().commits - commits == 3


def test_past_its_budget_a_batch_still_takes_a_newcomers_job(make_writer, timer):
    """Past the budget only the same callers' further jobs wait for the next batch: a caller with
    nothing in the batch yet (a teammate renewing) still joins it."""
    writer = make_writer(WriterConfig(batch_budget_ms=5))
    ran: list[tuple[str, int]] = []

    def job(label: str, uses_budget: bool = False):
        def run(tx):
            if uses_budget:
                timer.now += 0.005
            ran.append((label, writer.stats().commits))
            return label

        return run

    async def main():
        async def submit(owner: str, labels: list[str], uses_budget: bool = False):
            job_owner.set(owner)
            return await asyncio.gather(*(writer.run(job(label, uses_budget)) for label in labels))

        blocker = Blocker(timer)
        held = blocker.hold(writer)
        hog = asyncio.create_task(submit("hog", ["hog0", "hog1", "hog2"], uses_budget=True))
        await queued(writer, 3)
        calm = asyncio.create_task(submit("calm", ["calm0"]))
        await queued(writer, 4)
        blocker.release()
        await asyncio.wrap_future(held)
        await asyncio.gather(hog, calm)

    commits = writer.stats().commits
    asyncio.run(main())
    # The blocker's batch is past its budget when released, yet hog0 and calm0 join it: neither
    # caller has a job in it. hog1 must wait for the next batch, which hog1 uses up in turn.
    assert ran == [("hog0", commits), ("calm0", commits), ("hog1", commits + 1), ("hog2", commits + 2)]


class CountsBegins(PgStorage):
    begins = 0

    def begin(self, conn):
        self.begins += 1
        return super().begin(conn)


def test_jobs_queued_while_a_batch_runs_join_it(db_path, store):
    """While a batch is held open, still taking jobs, 40 jobs are queued: that batch takes all
    of them. On PostgreSQL a pool of writers serves the board, as a daemon's does, and no
    idle writer opens a transaction meanwhile (for jobs it would not get), so the pool
    neither splits group commits nor wastes round trips."""
    writers = 1 if store == "sqlite" else 4
    # A batch budget that never runs out: the held batch takes every job queued meanwhile.
    writer = _writer_of(db_path, WriterConfig(writers=writers), FakeClock(), CountsBegins, timer=lambda: 0.0)
    writer.start()
    try:
        if store == "sqlite":
            writer.call(lambda tx: tx.conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v BLOB)"), WAIT)
        blocker = Blocker()  # without the timer the blocker keeps its batch open
        held = blocker.hold(writer)
        wait_until(lambda: writer.stats().writers_in_transaction == 1, WAIT, "the held batch's transaction")
        commits = writer.stats().commits
        futures = [writer.submit(insert(f"k{n:02d}")) for n in range(40)]
        blocker.release()
        held.result(WAIT)
        assert [future.result(WAIT) for future in futures] == [f"k{n:02d}" for n in range(40)]
        assert writer.stats().commits - commits == 1, "the queued jobs were split over several batches"
        storage = writer._storage
        if isinstance(storage, CountsBegins):
            assert storage.begins == 1, f"{storage.begins - 1} transaction(s) opened for jobs another batch took"
    finally:
        writer.close()


def test_futures_resolve_only_after_commit(writer, db_path):
    seen_before_commit: list[bool] = []

    def job(tx):
        tx.conn.execute("INSERT INTO t (k) VALUES ('x')")
        return "x"

    failpoints.enable("before_commit", lambda: seen_before_commit.append("x" in keys(db_path)))
    future = writer.submit(job)
    assert future.result(WAIT) == "x"
    assert seen_before_commit == [False]
    assert "x" in keys(db_path)


def test_a_job_acts_at_the_instant_it_runs_not_when_its_batch_began(make_writer):
    clock = FakeClock(5_000)
    writer = make_writer(clock=clock)
    blocker = Blocker()  # keeps its batch open, so the later jobs join it
    held = blocker.hold(writer)  # the batch read its `now` at 5,000

    def long_job(tx):  # someone else's big batch: the daemon clock moves while it runs
        started = tx.now_ms
        clock.advance(39_000)
        return started

    clock.advance(9)
    long = writer.submit(long_job)
    renewal = writer.submit(lambda tx: tx.now_ms)
    commits = writer.stats().commits
    blocker.release()
    held.result(WAIT)
    # A lease the renewal grants is measured from 44,009, not from 5,000 or 5,009.
    assert (long.result(WAIT), renewal.result(WAIT)) == (5_009, 44_009)
    assert writer.stats().commits - commits == 1  # all in the blocker's batch


def test_jobs_of_a_batch_share_one_now(make_writer, timer):
    clock = FakeClock(5_000)
    writer = make_writer(clock=clock)
    blocker = Blocker(timer)
    held = blocker.hold(writer)
    futures = [writer.submit(lambda tx: tx.now_ms) for _ in range(3)]
    clock.advance(7)
    blocker.release()
    held.result(WAIT)
    assert [f.result(WAIT) for f in futures] == [5_007] * 3


# ---------------------------------------------------------------- commit failures


def test_failed_commit_fails_every_job_and_leaves_nothing(writer, db_path, timer):
    blocker = Blocker(timer)
    failpoints.enable("before_commit", "error", after=2)  # 1st hit: the blocker's batch; 2nd: ours
    held = blocker.hold(writer)
    futures = [writer.submit(insert(f"k{i}")) for i in range(5)] + [writer.submit(insert_then_raise("bad"))]
    blocker.release()
    assert held.result(WAIT) == "blocker"
    results = [outcome(f) for f in futures]
    assert all(kind == "error" for kind, _ in results), results
    assert all(isinstance(error, CommitFailed) for _, error in results[:5])
    assert keys(db_path) == set()
    stats = writer.stats()
    assert stats.failed_commits == 1
    # The writer keeps working afterwards.
    assert writer.call(insert("after"), WAIT) == "after"
    assert keys(db_path) == {"after"}


def test_commit_failure_on_every_batch_never_reports_success(writer, db_path):
    failpoints.enable("before_commit", "error")
    futures = [writer.submit(insert(f"k{i}")) for i in range(20)]
    assert all(outcome(f)[0] == "error" for f in futures)
    failpoints.disable()
    assert keys(db_path) == set()


# ---------------------------------------------------------------- re-entrancy, overload, close


def test_reentrant_submit_fails_promptly(writer, db_path):
    def reentrant(tx):
        tx.conn.execute("INSERT INTO t (k) VALUES ('outer')")
        writer.submit(insert("inner"))
        return "unreachable"

    with pytest.raises(ReentrantSubmit):
        writer.submit(reentrant).result(WAIT)

    def reentrant_call(tx):
        return writer.call(insert("inner2"), 1)

    with pytest.raises(ReentrantSubmit):
        writer.submit(reentrant_call).result(WAIT)
    assert keys(db_path) == set()
    assert writer.call(insert("fine"), WAIT) == "fine"


def test_overload_refused_past_the_limit(make_writer, timer):
    writer = make_writer(WriterConfig(levels=WriterLevels(record=1, warn=2, degraded=3, refuse=5)))
    blocker = Blocker(timer)
    held = blocker.hold(writer)
    queued = [writer.submit(insert(f"k{i}")) for i in range(5)]
    assert writer.stats().queue_depth == 5
    with pytest.raises(Overloaded) as caught:
        writer.submit(insert("k5"))
    assert caught.value.retry_after_ms > 0
    assert (
        writer.stats().refused_jobs == 1 and writer.stats().level == "degraded"
    )  # depth 5 is at the limit, not past it
    blocker.release()
    held.result(WAIT)
    assert [f.result(WAIT) for f in queued] == [f"k{i}" for i in range(5)]
    assert writer.call(insert("k5"), WAIT) == "k5"  # accepted again once drained


def test_thousand_concurrent_submissions_under_the_limit(writer, db_path):
    threads, per_thread = 10, 100
    failures: list[BaseException] = []
    start = threading.Barrier(threads)

    def worker(n: int) -> None:
        start.wait(WAIT)
        for i in range(per_thread):
            try:
                writer.call(insert(f"{n}-{i}"), WAIT)
            except BaseException as error:  # noqa: BLE001
                failures.append(error)

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(60)
    assert not any(thread.is_alive() for thread in pool)
    assert failures == []
    assert len(keys(db_path)) == threads * per_thread
    stats = writer.stats()
    assert stats.jobs >= threads * per_thread and stats.refused_jobs == 0 and stats.failed_commits == 0
    assert stats.mean_batch_size > 1.0, stats
    assert stats.commits < stats.jobs


def test_stats_counters(writer, timer):
    base = writer.stats()
    blocker = Blocker(timer)
    held = blocker.hold(writer)
    futures = [writer.submit(insert(f"k{i}")) for i in range(9)]
    blocker.release()
    held.result(WAIT)
    for future in futures:
        future.result(WAIT)
    stats = writer.stats()
    assert stats.commits - base.commits == 2
    assert stats.jobs - base.jobs == 10
    assert stats.queue_depth == 0 and stats.level == "normal"
    assert stats.queue_depth_p99 >= 8  # the ninth job found eight waiting
    assert stats.commit_latency_p50_ms >= 0 and stats.commit_latency_p99_ms >= stats.commit_latency_p50_ms
    fresh = Writer(lambda: None, FakeClock())
    assert fresh.stats().mean_batch_size == 0.0


def test_close_lets_the_running_batch_commit_and_refuses_the_queue(make_writer, db_path, timer):
    """Jobs still queued when the writer closes are refused and never applied: a caller told
    UNAVAILABLE may retry without storing its write twice."""
    writer = make_writer()
    blocker = Blocker(timer)
    held = blocker.hold(writer)
    queued = [writer.submit(insert(f"k{i}")) for i in range(3)]
    closer = threading.Thread(target=writer.close)
    closer.start()
    for future in queued:
        with pytest.raises(Unavailable):
            future.result(WAIT)
    assert closer.is_alive()  # the running batch holds the close
    blocker.release()
    closer.join(WAIT)
    assert not closer.is_alive()
    assert held.result(WAIT) == "blocker"
    with pytest.raises(Unavailable):
        writer.submit(insert("late"))
    assert keys(db_path) == set()


def test_on_commit_hears_only_committed_wakes(make_writer, timer):
    heard: list = []
    writer = make_writer(on_commit=heard.append)

    def wake(name, fail=False):
        def job(tx):
            tx.wakes.teammates.add(name)
            if fail:
                raise ValueError(name)

        return job

    blocker = Blocker(timer)
    held = blocker.hold(writer)
    futures = [writer.submit(wake("a")), writer.submit(wake("b", fail=True)), writer.submit(wake("c"))]
    blocker.release()
    held.result(WAIT)
    for future in futures:
        outcome(future)
    assert [w.teammates for w in heard] == [{"a", "c"}]
    failpoints.enable("before_commit", "error")
    outcome(writer.submit(wake("d")))
    assert len(heard) == 1  # a failed commit wakes nobody


def test_a_broken_listener_does_not_stop_the_writer(make_writer):
    def explode(wakes):
        raise RuntimeError("listener bug")

    writer = make_writer(on_commit=explode)

    def job(tx):
        tx.wakes.everyone = True
        return 1

    assert writer.call(job, WAIT) == 1
    assert writer.call(job, WAIT) == 1


def test_async_run_resolves_on_the_loop(writer):
    async def main():
        return await asyncio.gather(*(writer.run(insert(f"a{i}")) for i in range(20)))

    assert asyncio.run(main()) == [f"a{i}" for i in range(20)]


def test_a_cancelled_future_does_not_kill_the_writer(writer, db_path, timer):
    blocker = Blocker(timer)
    held = blocker.hold(writer)
    doomed = writer.submit(insert("doomed"))
    kept = writer.submit(insert("kept"))
    assert doomed.cancel()  # a caller giving up on a queued job
    blocker.release()
    held.result(WAIT)
    assert kept.result(WAIT) == "kept"
    later = writer.submit(insert("later"))
    assert later.result(WAIT) == "later"
    # A cancelled job never runs: its caller was told it was cancelled.
    assert keys(db_path) == {"kept", "later"}
    assert writer.stats().jobs >= 3


def test_a_writer_that_cannot_open_its_store_fails_to_start_and_leaves_no_thread(store, tmp_path):
    """The store's own error, at start; no writer thread left behind; later jobs refused."""
    if store == "sqlite":
        missing = tmp_path / "no such directory" / "corral.sqlite3"
        writer = Writer(lambda: open_writer(missing), FakeClock())
        expected: type[Exception] = sqlite3.OperationalError
    else:
        unreachable = PgTarget.parse("postgresql://postgres@127.0.0.1:1/postgres", schema="t", connect_timeout_s=1)
        storage = PgStorage(unreachable, "test-daemon", clock=None)
        writer = Writer(storage.open, FakeClock(), WriterConfig(writers=3), storage=storage)
        expected = DatabaseUnreachable
    with pytest.raises(expected):
        writer.start()
    assert not [thread for thread in threading.enumerate() if thread.name.startswith("corral-writer")]
    with pytest.raises(Unavailable):
        writer.submit(lambda tx: None)
    writer.close()


def test_concurrent_futures_from_threads_and_loops_mix(writer):
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: writer.call(insert(f"p{i}"), WAIT), range(40)))
    assert results == [f"p{i}" for i in range(40)]
