"""SQLite's own writer machinery: its COMMIT's I/O errors, a full disk, a job that ends the
transaction, SQLITE_BUSY. What the writer promises on both stores is in
tests/conformance/test_writer.py."""

from __future__ import annotations

import sqlite3

import pytest

from corrald import failpoints
from corrald.clock import FakeClock
from corrald.config import WriterConfig
from corrald.errors import CommitInDoubt
from corrald.store.sqlite.storage import open_writer
from corrald.writer import CommitFailed, Writer
from tests.support.boardkit import Blocker, SecondsClock

pytestmark = pytest.mark.timeout(30)
WAIT = 10  # seconds for any single future


@pytest.fixture
def timer() -> SecondsClock:
    return SecondsClock()


@pytest.fixture
def make_writer(db_path, timer):
    made: list[Writer] = []

    def make(config: WriterConfig = WriterConfig()) -> Writer:
        def connect():
            return open_writer(db_path, synchronous=config.synchronous, busy_timeout_ms=config.busy_timeout_ms)

        writer = Writer(connect, FakeClock(), config, timer=timer)
        writer.start()
        made.append(writer)
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
        tx.conn.execute("INSERT INTO t (k, v) VALUES (?, ?)", (key, value))
        return key

    return job


def keys(db_path) -> set[str]:
    """What a fresh connection sees: only committed rows."""
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


def test_an_io_error_from_commit_is_in_doubt_never_not_applied(writer, db_path):
    """SQLite's COMMIT fails with an I/O error (a failed fsync) after its frames reached the
    WAL: the write may be there after a restart, so its callers hear COMMIT_IN_DOUBT, not
    COMMIT_FAILED, and here it is indeed stored. The writer goes on."""
    failpoints.enable("sqlite_commit_returned", "ioerror", after=1)
    kind, error = outcome(writer.submit(insert("maybe")))
    assert kind == "error"
    assert isinstance(error, CommitInDoubt), error
    assert not isinstance(error, CommitFailed)
    assert keys(db_path) == {"maybe"}
    assert writer.call(insert("after"), WAIT) == "after"


def test_disk_full_is_consistent(writer, db_path, timer):
    """SQLITE_FULL mid-batch: whatever was reported successful is there, nothing else is."""
    pages = writer.call(lambda tx: tx.conn.execute("PRAGMA page_count").fetchone()[0], WAIT)
    writer.call(lambda tx: tx.conn.execute(f"PRAGMA max_page_count = {pages + 1}"), WAIT)
    blocker = Blocker(timer)
    held = blocker.hold(writer)
    futures = {
        "small1": writer.submit(insert("small1")),
        "huge": writer.submit(insert("huge", b"x" * 2_000_000)),
        "small2": writer.submit(insert("small2")),
    }
    blocker.release()
    held.result(WAIT)
    results = {k: outcome(f) for k, f in futures.items()}
    assert results["huge"][0] == "error"
    assert "full" in str(results["huge"][1]) or isinstance(results["huge"][1], CommitFailed)
    committed = keys(db_path)
    for key, (kind, _) in results.items():
        assert (kind == "ok") == (key in committed), (key, results, committed)
    writer.call(lambda tx: tx.conn.execute("PRAGMA max_page_count = 1073741823"), WAIT)
    assert writer.call(insert("later", b"y" * 100_000), WAIT) == "later"


def test_a_job_that_ends_the_transaction_fails_its_whole_batch(writer, db_path, timer):
    blocker = Blocker(timer)
    held = blocker.hold(writer)
    first = writer.submit(insert("first"))

    def rollback_everything(tx):
        tx.conn.execute("ROLLBACK")
        raise RuntimeError("rolled back the batch")

    rogue = writer.submit(rollback_everything)
    last = writer.submit(insert("last"))
    blocker.release()
    held.result(WAIT)
    assert outcome(rogue)[0] == "error"
    assert outcome(first)[0] == "error"  # its write went with the rollback
    # The batch ended at the rollback; the job queued behind it had not been taken and runs next.
    assert outcome(last) == ("ok", "last")
    assert keys(db_path) == {"last"}
    assert writer.call(insert("next"), WAIT) == "next"


def test_sqlite_busy_is_retried_counted_and_never_reported_as_success(make_writer, db_path):
    writer = make_writer(WriterConfig(busy_timeout_ms=1, busy_retries=3))
    intruder = sqlite3.connect(db_path, isolation_level=None)
    try:
        intruder.execute("BEGIN IMMEDIATE")  # a second writer: what corrald never lets happen
        future = writer.submit(insert("blocked"))
        with pytest.raises(CommitFailed, match="locked"):
            future.result(WAIT)
        assert writer.stats().busy_retries == 2  # three attempts, two waits
        assert writer.stats().failed_commits == 1
    finally:
        intruder.execute("ROLLBACK")
        intruder.close()
    assert writer.call(insert("free"), WAIT) == "free"
    assert keys(db_path) == {"free"}
