"""What the shared store functions ask of the connection's database: its statements."""

from __future__ import annotations

import sqlite3
import types


def sql(conn: sqlite3.Connection) -> types.ModuleType:
    """The statements of the connection's driver (`store/sqlite/queries.py` or
    `store/postgres/queries.py`: the same names, each in its database's dialect)."""
    return conn.sql  # type: ignore[attr-defined]  # SqliteConnection's, PgConnection's


def row_lock(conn: sqlite3.Connection, mode: str = "UPDATE") -> str:
    """A locking clause for a SELECT of the rows a transaction is about to act on (`FOR UPDATE`,
    `FOR SHARE`) on PostgreSQL, where other writers may run at once; '' on SQLite, whose one
    writer is alone. The locks follow the ordering rules of docs/postgres.md: a teammate's row
    before task rows, task rows by seq."""
    return f" FOR {mode}" if fuses_statements(conn) else ""


def fuses_statements(conn: sqlite3.Connection) -> bool:
    """Whether the connection's database runs writes inside WITH (PostgreSQL: `PgConnection`).
    A claim and a completion are then one statement each instead of three or four: over a
    network each statement is a round trip, while SQLite's cost nothing but their own work."""
    return getattr(conn, "fuses_statements", False)
