"""Each store's schema as the daemon makes it: the one place the tests reach the drivers'
migrations (the schema pool of tests/support/postgres.py, the schema comparison of
tests/conformance). When a driver's package moves, its import line below is all that
changes.
"""

from __future__ import annotations

import pathlib

import psycopg

from corrald.store.postgres.schema import migrate as _migrate_postgres
from corrald.store.sqlite.storage import open_writer as _open_sqlite_writer


def migrate_sqlite(path: pathlib.Path) -> None:
    """Creates a SQLite board file at `path`, migrated as a daemon's writer opens it."""
    _open_sqlite_writer(path, synchronous="OFF").close()


def migrate_postgres(conn: psycopg.Connection, schema: str) -> None:
    """Creates `schema` on `conn`'s database, migrated as a daemon's start does (with its
    board row, whose lead credential no test knows)."""
    _migrate_postgres(conn, schema, lambda _token: b"")
