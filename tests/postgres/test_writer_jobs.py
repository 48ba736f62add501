"""The writer's jobs on PostgreSQL, where they run without a savepoint each: a job that
fails before it wrote costs nothing more, and one that fails after writing (or whose
statement failed) makes its batch run again with savepoints, so it still rolls back alone.
(That a job rolls back alone, and how many times each ran, is checked on both stores in
tests/conformance/test_writer.py; here, what only PostgreSQL has: statements of WITH
clauses, and runs of mergeable jobs.)
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterator

import psycopg
import pytest

from corrald import delivery
from corrald.clock import FakeClock
from corrald.store.postgres.storage import PgStorage
from corrald.store.postgres.target import PgTarget
from corrald.txn import Mergeable, RanAhead
from corrald.writer import Writer
from tests.support.postgres import run_database_dsn, scratch_schema

pytestmark = pytest.mark.timeout(60)
WAIT = 10  # seconds for any single future


@pytest.fixture
def schema() -> Iterator[str]:
    with scratch_schema("t (k TEXT PRIMARY KEY)") as name:
        yield name


@pytest.fixture
def writer(schema) -> Iterator[Writer]:
    storage = PgStorage(PgTarget.parse(run_database_dsn(), schema=schema), "test-daemon", clock=None)
    # A batch budget that never runs out: a batch takes every job queued while it runs.
    made = Writer(storage.open, FakeClock(), storage=storage, timer=lambda: 0.0)
    made.start()
    yield made
    made.close()


def committed(schema: str) -> set[str]:
    with psycopg.connect(run_database_dsn(), autocommit=True) as conn:
        return {key for (key,) in conn.execute(f"SELECT k FROM {schema}.t")}


class Jobs:
    """Jobs that count how many times each ran."""

    def __init__(self) -> None:
        self.runs: collections.Counter[str] = collections.Counter()

    def insert(self, key: str, *, then_raise: bool = False) -> Callable:
        def job(tx):
            self.runs[key] += 1
            tx.conn.execute("INSERT INTO t (k) VALUES (%s)", (key,))
            if then_raise:
                raise ValueError(f"{key} fails after writing")
            return key

        return job

    def insert_within(self, key: str, *, then_raise: bool = False) -> Callable:
        """As `insert`, by a statement of WITH clauses (as the store's fused claim and
        completion): its status says SELECT, not INSERT."""

        def job(tx):
            self.runs[key] += 1
            tx.conn.execute("WITH w AS (INSERT INTO t (k) VALUES (%s) RETURNING k) SELECT k FROM w", (key,)).fetchall()
            if then_raise:
                raise ValueError(f"{key} fails after writing")
            return key

        return job

    def refuse(self, key: str) -> Callable:
        def job(tx):
            self.runs[key] += 1
            tx.conn.execute("SELECT count(*) FROM t").fetchone()
            raise LookupError(f"{key} fails before writing")

        return job


def one_batch(writer: Writer, jobs: list[Callable | tuple[Callable, Mergeable]]) -> list[tuple[str, object]]:
    """Runs `jobs` in one batch (queued while a first job holds the writer), each a job or a
    mergeable job with its `Mergeable`; their outcomes."""
    holding, release = threading.Event(), threading.Event()

    def hold(tx):
        holding.set()
        assert release.wait(WAIT)

    held = writer.submit(hold)
    assert holding.wait(WAIT)
    commits = writer.stats().commits
    futures = [writer.submit(*job) if isinstance(job, tuple) else writer.submit(job) for job in jobs]
    release.set()
    held.result(WAIT)
    outcomes = []
    for future in futures:
        try:
            outcomes.append(("ok", future.result(WAIT)))
        except Exception as error:  # noqa: BLE001 (the test looks at which)
            outcomes.append(("error", error))
    assert writer.stats().commits - commits == 1, "the jobs were not one batch"
    return outcomes


def test_a_job_failing_after_a_write_within_a_with_statement_rolls_back_alone(writer, schema):
    jobs = Jobs()
    outcomes = one_batch(writer, [jobs.insert_within("a"), jobs.insert_within("b", then_raise=True), jobs.insert("c")])
    assert [kind for kind, _ in outcomes] == ["ok", "error", "ok"]
    assert committed(schema) == {"a", "c"}, "the failed job's write was committed"
    assert jobs.runs == {"a": 2, "b": 2, "c": 1}


# ---------------------------------------------------------------- runs of mergeable jobs


class Merged:
    """Mergeable jobs that insert their key: the run's statement inserts every key of its
    run at once, and each job checks it got its own row (or, alone, inserts its key)."""

    def __init__(self) -> None:
        self.runs: list[list[str]] = []  # the keys of each run's statement
        self.ahead: dict[str, RanAhead | None] = {}
        self.fail_statement = False

    def run_many(self, conn, now_ms: int, keys: list[str]) -> list[str]:
        self.runs.append(list(keys))
        if self.fail_statement:
            conn.execute("SELECT 1 / 0").fetchone()
        rows = conn.execute("INSERT INTO t (k) SELECT unnest(%s::text[]) RETURNING k", (keys,)).fetchall()
        return [key for (key,) in rows]

    def job(
        self, key: str, subject: str, *, touches: str = "", then_raise: bool = False, takes: bool = True
    ) -> tuple[Callable, Mergeable]:
        def job(tx):
            self.ahead[key] = tx.ahead
            if tx.ahead is None:
                tx.conn.execute("INSERT INTO t (k) VALUES (%s)", (key,))
            elif takes:
                assert tx.ahead.row == key == tx.ahead.request
                tx.ahead = None
            if touches:
                tx.wakes.teammates.add(touches)
            if then_raise:
                raise ValueError(f"{key} fails after its run's statement")
            return key

        return job, Mergeable(self.run_many, key, subject, delivery.views_touched)


def test_queued_mergeable_jobs_run_their_first_statement_once_per_run(writer, schema):
    merged = Merged()
    together = writer.stats().jobs_run_together
    outcomes = one_batch(
        writer,
        [
            merged.job("a", "ann"),
            merged.job("b", "bob"),
            Jobs().insert("x"),  # not mergeable: the run ends before it
            merged.job("c", "cat"),
            merged.job("d", "dan"),
            merged.job("e", "cat"),  # cat has a job in this run already: a new run begins
            merged.job("f", "fay"),
            merged.job("g", "gus"),
        ],
    )
    assert [value for _, value in outcomes] == ["a", "b", "x", "c", "d", "e", "f", "g"]
    assert merged.runs == [["a", "b"], ["c", "d"], ["e", "f", "g"]]
    assert all(merged.ahead[key] is not None for key in "abcdefg")
    assert committed(schema) == set("abcdefgx")
    assert writer.stats().jobs_run_together - together == 7


def test_a_lone_mergeable_job_runs_its_own_statement(writer, schema):
    merged = Merged()
    assert one_batch(writer, [merged.job("a", "ann"), Jobs().insert("x")]) == [("ok", "a"), ("ok", "x")]
    assert merged.runs == [] and merged.ahead == {"a": None}
    assert committed(schema) == {"a", "x"}


def test_a_job_learns_that_a_job_before_it_in_its_run_changed_its_subject(writer, schema):
    merged = Merged()
    one_batch(
        writer,
        [merged.job("a", "ann", touches="cat"), merged.job("b", "bob"), merged.job("c", "cat"), merged.job("d", "dan")],
    )
    assert [merged.ahead[key].fresh for key in "abcd"] == [True, True, False, True]


def test_a_job_failing_after_its_runs_statement_rolls_back_alone(writer, schema):
    """Its share of the run's statement is written before it runs: the batch runs again,
    with a savepoint per job and no run, so the failed job leaves nothing behind."""
    merged = Merged()
    outcomes = one_batch(
        writer, [merged.job("a", "ann"), merged.job("b", "bob", then_raise=True), merged.job("c", "cat")]
    )
    assert [kind for kind, _ in outcomes] == ["ok", "error", "ok"]
    assert isinstance(outcomes[1][1], ValueError)
    assert committed(schema) == {"a", "c"}, "the failed job's share of its run was committed"
    assert merged.runs == [["a", "b", "c"]], "the second attempt ran no run"
    assert all(merged.ahead[key] is None for key in "abc"), "the jobs' last runs were their own"


def test_a_job_that_does_not_take_its_share_of_a_run_makes_the_batch_run_again_without_runs(writer, schema):
    merged = Merged()
    outcomes = one_batch(writer, [merged.job("a", "ann"), merged.job("b", "bob", takes=False)])
    assert outcomes == [("ok", "a"), ("ok", "b")]
    assert committed(schema) == {"a", "b"}
    assert merged.runs == [["a", "b"]] and merged.ahead == {"a": None, "b": None}


def test_a_failing_run_statement_leaves_each_job_to_run_its_own(writer, schema):
    merged = Merged()
    merged.fail_statement = True
    outcomes = one_batch(writer, [merged.job("a", "ann"), merged.job("b", "bob")])
    assert outcomes == [("ok", "a"), ("ok", "b")]
    assert committed(schema) == {"a", "b"}
    assert merged.ahead == {"a": None, "b": None}
