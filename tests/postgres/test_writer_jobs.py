"""The writer's jobs on PostgreSQL, where they run without a savepoint each: a job that
fails before it wrote costs nothing more, and one that fails after writing (or whose
statement failed) makes its batch run again with savepoints, so it still rolls back alone.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterator

import psycopg
import pytest

from corrald.clock import FakeClock
from corrald.pg.storage import PgStorage
from corrald.pg.target import PgTarget
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
            tx.conn.execute("INSERT INTO t (k) VALUES (?)", (key,))
            if then_raise:
                raise ValueError(f"{key} fails after writing")
            return key

        return job

    def insert_within(self, key: str, *, then_raise: bool = False) -> Callable:
        """As `insert`, by a statement of WITH clauses (as the store's fused claim and
        completion): its status says SELECT, not INSERT."""

        def job(tx):
            self.runs[key] += 1
            tx.conn.execute("WITH w AS (INSERT INTO t (k) VALUES (?) RETURNING k) SELECT k FROM w", (key,)).fetchall()
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


def one_batch(writer: Writer, jobs: list[Callable]) -> list[tuple[str, object]]:
    """Runs `jobs` in one batch (queued while a first job holds the writer); their outcomes."""
    holding, release = threading.Event(), threading.Event()

    def hold(tx):
        holding.set()
        assert release.wait(WAIT)

    held = writer.submit(hold)
    assert holding.wait(WAIT)
    commits = writer.stats().commits
    futures = [writer.submit(job) for job in jobs]
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


def test_a_job_failing_before_it_writes_fails_alone_and_runs_once(writer, schema):
    jobs = Jobs()
    outcomes = one_batch(writer, [jobs.insert("a"), jobs.refuse("b"), jobs.insert("c")])
    assert outcomes[0] == ("ok", "a") and outcomes[2] == ("ok", "c")
    assert outcomes[1][0] == "error" and isinstance(outcomes[1][1], LookupError)
    assert committed(schema) == {"a", "c"}
    assert jobs.runs == {"a": 1, "b": 1, "c": 1}, "a refusal before any write needs no second run"


def test_a_job_failing_after_it_wrote_rolls_back_alone_when_its_batch_runs_again(writer, schema):
    jobs = Jobs()
    outcomes = one_batch(
        writer,
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
    assert kinds == [
        ("ok", str),
        ("error", ValueError),
        ("ok", str),
        ("error", psycopg.errors.UniqueViolation),
        ("error", LookupError),
        ("ok", str),
    ]
    assert committed(schema) == {"a", "c", "d"}
    # The first run stopped at b; the second ran every job once, each in its savepoint.
    assert jobs.runs == {"a": 3, "b": 2, "c": 1, "e": 1, "d": 1}


def test_a_job_failing_after_a_write_within_a_with_statement_rolls_back_alone(writer, schema):
    jobs = Jobs()
    outcomes = one_batch(writer, [jobs.insert_within("a"), jobs.insert_within("b", then_raise=True), jobs.insert("c")])
    assert [kind for kind, _ in outcomes] == ["ok", "error", "ok"]
    assert committed(schema) == {"a", "c"}, "the failed job's write was committed"
    assert jobs.runs == {"a": 2, "b": 2, "c": 1}
