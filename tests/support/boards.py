"""A daemon's board read behind its back, on the store the tests run on.

On SQLite that is the state directory's `corral.sqlite3`, opened read-only
(WAL lets it be read while the daemon writes); on PostgreSQL (`--store
postgres`) the board's schema of the run's database (tests/support/daemons.py
names it after the state directory), read through the connection the store
uses there, with the tests' `?` parameters taken as psycopg's `%s` (`QmarkConnection`).
Either way the connection offers `execute(sql, params)` returning a cursor to
iterate or fetch from, and the rows hold the same Python values.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import sqlite3
from collections.abc import Iterator
from typing import Any

from tests.support.daemons import STORE_ENV, store_args

_QMARK = re.compile(r"('(?:[^']|'')*')|\?")


class QmarkConnection:
    """The PostgreSQL store's connection taking the tests' statements as sqlite3 does: a `?`
    outside a literal is a parameter (the daemon's own statements are written with `%s`)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self._conn.execute(_QMARK.sub(lambda m: m.group(1) or "%s", sql), params)

    def executemany(self, sql: str, rows: Any) -> Any:
        return self._conn.executemany(_QMARK.sub(lambda m: m.group(1) or "%s", sql), rows)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def qmarks(conn: Any) -> Any:
    """`conn` taking a test's statement with `?` parameters, on either store."""
    return conn if isinstance(conn, sqlite3.Connection) else QmarkConnection(conn)


def on_postgres() -> bool:
    """Whether the daemons the tests start serve PostgreSQL boards (`--store postgres`)."""
    return os.environ.get(STORE_ENV, "sqlite") == "postgres"


@contextlib.contextmanager
def read_board(state_dir: pathlib.Path) -> Iterator[Any]:
    """The board of the daemon on `state_dir`, read-only; the daemon may keep running."""
    postgres = store_args(state_dir)
    if postgres:
        from corrald.store.postgres.sql import PgConnection
        from corrald.store.postgres.storage import connect
        from corrald.store.postgres.target import PgTarget

        conn = PgConnection(connect(PgTarget.parse(postgres[1], schema=postgres[3]), read_only=True))
        try:
            yield QmarkConnection(conn)
        finally:
            conn.close()
        return
    path = pathlib.Path(state_dir) / "corral.sqlite3"
    lite = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    try:
        lite.execute("PRAGMA query_only = ON")
        yield lite
    finally:
        lite.close()


@contextlib.contextmanager
def one_snapshot(conn: Any) -> Iterator[None]:
    """Every read inside sees the same commit, though the daemon may still be writing: a
    check that reads a table twice must not take a claim committed between the two reads
    for a broken invariant. SQLite: one read transaction; PostgreSQL: REPEATABLE READ."""
    postgres = not isinstance(conn, sqlite3.Connection)
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" if postgres else "BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def board_schema(state_dir: pathlib.Path) -> list[tuple]:
    """The board's tables, columns, indexes and triggers as stored, to compare before and after."""
    with read_board(state_dir) as conn:
        if not on_postgres():
            return conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()
        columns = conn.execute(
            "SELECT 'column', table_name, column_name, data_type || ' ' || is_nullable || ' '"
            " || coalesce(column_default, '') FROM information_schema.columns"
            " WHERE table_schema = current_schema() ORDER BY 2, 3"
        ).fetchall()
        indexes = conn.execute(
            "SELECT 'index', tablename, indexname, indexdef FROM pg_indexes"
            " WHERE schemaname = current_schema() ORDER BY 2, 3"
        ).fetchall()
        triggers = conn.execute(
            "SELECT 'trigger', event_object_table, trigger_name, action_statement"
            " FROM information_schema.triggers WHERE trigger_schema = current_schema() ORDER BY 2, 3, 4"
        ).fetchall()
        return [*columns, *indexes, *triggers]


def sqlite_integrity(state_dir: pathlib.Path) -> str | None:
    """SQLite's `PRAGMA integrity_check` of the board's file ("ok" when sound); None on
    PostgreSQL, whose files are the server's to keep."""
    if on_postgres():
        return None
    with read_board(state_dir) as conn:
        return ";".join(row[0] for row in conn.execute("PRAGMA integrity_check"))
