"""The connection the store's functions use on PostgreSQL (store/postgres/sql.py): what it
adapts of the values and counts of the changes, and the DSN checks (store/postgres/target.py)."""

from __future__ import annotations

import json

import pytest

from corrald.config import ConfigError
from corrald.errors import InvalidArgument
from corrald.store.postgres.sql import COPY_FROM_ROWS, PgConnection
from corrald.store.postgres.storage import connect
from corrald.store.postgres.target import PgTarget, scrub
from tests.support.postgres import fresh_schema, run_database_dsn

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def conn():
    target = PgTarget.parse(run_database_dsn(), schema=fresh_schema())
    raw = connect(target)
    raw.execute(f"CREATE SCHEMA {target.schema}")
    raw.execute(f"SET search_path TO {target.schema}")
    pg = PgConnection(raw)
    yield pg
    raw.execute(f"DROP SCHEMA {target.schema} CASCADE")
    pg.close()


def test_the_driver_spellings_answer_as_sqlite_does(conn):
    """What SQLite says with json_each, length(CAST(x AS BLOB)) and x'' (store/sqlite/queries.py)
    this driver says in its own dialect, with the same answers; a boolean is stored as 1 or 0."""
    conn.execute("CREATE TABLE t (seq BIGINT PRIMARY KEY, id TEXT NOT NULL, r BYTEA, flag BIGINT NOT NULL)")
    conn.executemany(
        "INSERT INTO t (seq, id, r, flag) VALUES (%s, %s, %s, %s)",
        [(1, "é", None, True), (2, "b", b"\x00\x01", False)],
    )
    assert conn.total_changes == 2
    rows = conn.execute(
        "SELECT t.seq, octet_length(t.id), coalesce(t.r, '\\x'::bytea), t.flag"
        " FROM json_array_elements_text(%s::json) WITH ORDINALITY AS w(value, key)"
        " JOIN t ON t.seq = CAST(w.value AS BIGINT) ORDER BY w.key",
        (json.dumps([2, 1]),),
    ).fetchall()
    assert rows == [(2, 1, b"\x00\x01", 0), (1, 2, b"", 1)]  # bytes of UTF-8; True stored as 1
    assert conn.execute("SELECT LEAST(%s, 5), GREATEST(%s, 5) + %s", (3, 3, 10)).fetchone() == (3, 15)


def test_text_holding_nul_is_refused_before_anything_is_sent(conn):
    conn.execute("CREATE TABLE n (a TEXT NOT NULL)")
    with pytest.raises(InvalidArgument):
        conn.execute("INSERT INTO n (a) VALUES (%s)", ("a\x00b",))
    assert conn.execute("SELECT count(*) FROM n").fetchone() == (0,)


@pytest.mark.parametrize("count", [COPY_FROM_ROWS - 1, 500])
def test_inserted_rows_go_in_by_insert_or_copy_and_count_as_changes(conn, count):
    """`insert_rows` sends a few rows as INSERTs and many by COPY; both count as changes,
    and a refused value stops the rows before any is sent."""
    conn.execute("CREATE TABLE e (a BIGINT NOT NULL, b TEXT NOT NULL)")
    rows = [(i, f"r{i}") for i in range(count)]
    conn.insert_rows("e", ("a", "b"), rows)
    assert conn.total_changes == count
    assert conn.execute("SELECT count(*), sum(a) FROM e").fetchone() == (count, sum(range(count)))
    with pytest.raises(InvalidArgument):
        conn.insert_rows("e", ("a", "b"), [*rows, (-1, "nul\x00")])
    assert conn.execute("SELECT count(*) FROM e").fetchone() == (count,)


@pytest.mark.parametrize(
    ("dsn", "allowed"),
    [
        ("postgresql://u@127.0.0.1/db", True),
        ("postgresql://u@localhost:5433/db", True),
        ("postgresql://u@[::1]/db", True),
        ("postgresql://u@/db?host=/var/run/postgresql", True),
        ("postgresql://u@db.example.com/db", False),
        ("postgresql://u@db.example.com/db?sslmode=prefer", False),
        ("postgresql://u@db.example.com/db?sslmode=require", True),
        ("postgresql://u@10.0.0.5/db?sslmode=verify-full", True),
    ],
)
def test_a_remote_host_needs_tls(dsn, allowed):
    if allowed:
        assert PgTarget.parse(dsn).dsn == dsn
    else:
        with pytest.raises(ConfigError, match="sslmode=require"):
            PgTarget.parse(dsn)
        assert PgTarget.parse(dsn, allow_insecure=True).dsn == dsn


@pytest.mark.parametrize(
    ("dsn", "schema", "says"),
    [
        ("mysql://u@h/db", "corral", "starts with postgresql://"),
        ("postgresql://u:pw@[bad", "corral", "malformed"),
        ("postgresql://u@127.0.0.1", "corral", "name a database"),
        ("postgresql://u@127.0.0.1/db", "Bad-Name", "--pg-schema"),
        ("postgresql://u@127.0.0.1/db", "x" * 64, "--pg-schema"),
    ],
)
def test_what_cannot_name_a_board_is_refused(dsn, schema, says):
    with pytest.raises(ConfigError, match=says):
        PgTarget.parse(dsn, schema=schema)


def test_a_password_is_never_shown():
    target = PgTarget.parse("postgresql://me:hunter2@127.0.0.1:5432/db")
    assert "hunter2" not in target.shown() and "hunter2" not in repr(target)
    assert scrub("failed for postgresql://me:hunter2@h/db and password=hunter2 x") == (
        "failed for postgresql://me:***@h/db and password=*** x"
    )
