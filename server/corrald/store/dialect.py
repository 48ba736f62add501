"""What the shared store functions ask of the connection's driver: its statements and its steps."""

from __future__ import annotations

import sqlite3
import types


def sql(conn: sqlite3.Connection) -> types.ModuleType:
    """The statements of the connection's driver (`store/sqlite/queries.py` or
    `store/postgres/queries.py`: the same names, each in its database's dialect)."""
    return conn.sql  # type: ignore[attr-defined]  # SqliteConnection's, PgConnection's


def steps(conn: sqlite3.Connection) -> types.ModuleType:
    """The driver's steps (`store.driver.DriverSteps`: `store/sqlite/steps.py` or
    `store/postgres/steps.py`), which take the same steps each in its own way."""
    return conn.steps  # type: ignore[attr-defined]
