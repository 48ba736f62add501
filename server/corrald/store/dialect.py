"""What the shared store functions ask of the connection's driver: its statements, its
steps, and how it inserts a batch of rows."""

from __future__ import annotations

import sqlite3
import types
from collections.abc import Sequence
from typing import Any


def sql(conn: sqlite3.Connection) -> types.ModuleType:
    """The statements of the connection's driver (`store/sqlite/queries.py` or
    `store/postgres/queries.py`: the same names, each in its database's dialect; the
    groups `.artifacts`, `.graph`, `.output` and `.usage` are modules of their own beside it)."""
    return conn.sql  # type: ignore[attr-defined]  # SqliteConnection's, PgConnection's


def steps(conn: sqlite3.Connection) -> types.ModuleType:
    """The driver's steps (`store.driver.DriverSteps`: `store/sqlite/steps.py` or
    `store/postgres/steps.py`), which take the same steps each in its own way."""
    return conn.steps  # type: ignore[attr-defined]


def insert_rows(conn: sqlite3.Connection, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Inserts `rows` of `columns` into `table` as the connection's driver does it best
    (`SqliteConnection.insert_rows`, `PgConnection.insert_rows`: COPY from 64 rows)."""
    conn.insert_rows(table, columns, rows)  # type: ignore[attr-defined]
