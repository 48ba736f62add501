"""What the shared store functions ask of the connection's database: its statements."""

from __future__ import annotations

import sqlite3
import types


def sql(conn: sqlite3.Connection) -> types.ModuleType:
    """The statements of the connection's driver (`store/sqlite/queries.py` or
    `store/postgres/queries.py`: the same names, each in its database's dialect)."""
    return conn.sql  # type: ignore[attr-defined]  # SqliteConnection's, PgConnection's


def fused(conn: sqlite3.Connection) -> types.ModuleType | None:
    """The driver's statements that do the work of several (`store/postgres/fused.py`), or
    None where each statement costs nothing but its own work (SQLite): over a network each
    statement is a round trip, so there a claim or a completion is one statement."""
    return conn.fused  # type: ignore[attr-defined]
