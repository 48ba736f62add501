"""What the shared store functions ask of the connection's driver: its statements, its
steps, and how it inserts a batch of rows."""

from __future__ import annotations

import operator
import sqlite3
import types
from collections.abc import Callable, Sequence
from typing import Any

# `sql(conn)`: the statements of the connection's driver (`store/sqlite/queries.py` or
# `store/postgres/queries.py`: the same names, each in its database's dialect; the groups
# `.artifacts`, `.graph`, `.output` and `.usage` are modules of their own beside it).
# `steps(conn)`: the driver's steps (`store.driver.DriverSteps`: `store/sqlite/steps.py`
# or `store/postgres/steps.py`), which take the same steps each in its own way.
# Both read an attribute of SqliteConnection and PgConnection; every statement of the
# store asks, so each is the attribute's getter itself, not a function around it.
sql: Callable[[sqlite3.Connection], types.ModuleType] = operator.attrgetter("sql")
steps: Callable[[sqlite3.Connection], types.ModuleType] = operator.attrgetter("steps")


def insert_rows(conn: sqlite3.Connection, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Inserts `rows` of `columns` into `table` as the connection's driver does it best
    (`SqliteConnection.insert_rows`, `PgConnection.insert_rows`: COPY from 64 rows)."""
    conn.insert_rows(table, columns, rows)  # type: ignore[attr-defined]
