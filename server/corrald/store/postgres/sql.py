"""The connection the store's functions use on a PostgreSQL board.

`PgConnection` runs statements with psycopg and offers the part of
`sqlite3.Connection` the store and the writer use (`execute`, `executemany`,
`total_changes`, `in_transaction`); its statements (`dialect.sql`) are this
driver's, in PostgreSQL's dialect (`queries.py`). Nothing of a statement is
rewritten: the values are adapted as the SQLite board stores them.
"""

from __future__ import annotations

import contextlib
import functools
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import psycopg
from psycopg.pq import PipelineStatus, TransactionStatus

from ...errors import InvalidArgument
from . import queries, steps
from .watchdog import WATCHDOG


def _parameters(params: Sequence[Any] | dict[str, Any]) -> Any:
    if isinstance(params, dict):
        return {key: _parameter(value) for key, value in params.items()}
    return [_parameter(value) for value in params]


def _parameter(value: Any) -> Any:
    # SQLite stores booleans as 0 and 1 in INTEGER columns; so does the schema here.
    if type(value) is bool:
        return int(value)
    # PostgreSQL's text holds no U+0000: refused before anything of the statement is sent
    # (a SQLite board stores it), so the job fails alone as for any refused value.
    if type(value) is str and "\x00" in value:
        raise InvalidArgument("text", "U+0000 (NUL) cannot be stored on a PostgreSQL board")
    return value


_CHANGES = ("INSERT", "UPDATE", "DELETE", "MERGE")
# From this many rows, `insert_rows` sends them by COPY: a 50,000-edge batch in a tenth of the time.
COPY_FROM_ROWS = 64


@functools.cache
def _insert(table: str, columns: tuple[str, ...]) -> str:
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})"


@functools.lru_cache(maxsize=256)
def _writes_within(text: str) -> bool:
    """Whether a statement of WITH clauses writes in one of them."""
    return text.startswith("WITH") and re.search(r"\b(INSERT|UPDATE|DELETE)\b", text) is not None


class PgConnection:
    """A psycopg connection (autocommit: the writer and the readers say BEGIN themselves)
    with the part of `sqlite3.Connection`'s interface the store uses.

    With `reply_bound_s`, a round trip still unanswered after that long has its socket cut
    (store/postgres/watchdog.py) and fails as a lost connection; `on_severed` is then told."""

    sql = queries  # the statements the store's functions run here (`dialect.sql`)
    steps = steps  # a claim or a completion is one statement here (`dialect.steps`)

    def __init__(
        self,
        raw: psycopg.Connection,
        reply_bound_s: float | None = None,
        on_severed: Callable[[], None] | None = None,
    ) -> None:
        self.raw = raw
        # Rows changed by INSERT, UPDATE and DELETE on this connection, as SQLite counts them.
        self.total_changes = 0
        self.reply_bound_s = reply_bound_s
        self.waiting_since: float | None = None
        self._on_severed = on_severed
        if reply_bound_s is not None:
            WATCHDOG.watch(self)

    @contextlib.contextmanager
    def round_trip(self) -> Iterator[None]:
        """Marks a call to the server, for the watchdog."""
        self.waiting_since = time.monotonic()
        try:
            yield
        finally:
            self.waiting_since = None

    def fileno(self) -> int:
        return self.raw.fileno()

    def severed(self) -> None:
        if self._on_severed is not None:
            self._on_severed()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor:
        # Results in binary: a blob arrives as its bytes, not as hex text of twice the size.
        # The round trip is marked inline (as `round_trip` does): every statement passes here.
        self.waiting_since = time.monotonic()
        try:
            cursor = self.raw.execute(sql, _parameters(params), binary=True)
        finally:
            self.waiting_since = None
        status = cursor.statusmessage or ""
        if status.startswith(_CHANGES) and cursor.rowcount > 0:
            self.total_changes += cursor.rowcount
        elif cursor.rowcount > 0 and _writes_within(sql):
            # Its status says SELECT: a row returned means its writes happened (the
            # store's fused statements return nothing when they write nothing).
            self.total_changes += cursor.rowcount
        return cursor

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> psycopg.Cursor:
        cursor = self.raw.cursor()
        with self.round_trip():
            cursor.executemany(sql, [_parameters(row) for row in rows])
        if cursor.rowcount > 0:
            self.total_changes += cursor.rowcount
        return cursor

    def insert_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Inserts `rows` of `columns` into `table`: by COPY from `COPY_FROM_ROWS` rows on,
        else as one INSERT run for each."""
        if len(rows) < COPY_FROM_ROWS:
            self.executemany(_insert(table, tuple(columns)), rows)
            return
        values = [_parameters(row) for row in rows]  # each refused before any is sent
        with self.round_trip(), self.raw.cursor().copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in values:
                copy.write_row(row)
        self.total_changes += len(rows)

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR)

    @property
    def failed(self) -> bool:
        """A statement failed: the transaction can only be rolled back (PostgreSQL's rule)."""
        return self.raw.info.transaction_status == TransactionStatus.INERROR

    @property
    def broken(self) -> bool:
        return self.raw.broken or self.raw.closed

    @property
    def reusable(self) -> bool:
        """Open, outside any transaction, and out of pipeline mode: as a new connection is. A
        connection that failed mid-batch may be none of these without being marked broken
        (psycopg leaves an `executemany` interrupted by a lost backend in pipeline mode, and
        every later statement fails), so the writer replaces it rather than reuse it."""
        return (
            not self.broken
            and self.raw.info.transaction_status == TransactionStatus.IDLE
            and self.raw.pgconn.pipeline_status == PipelineStatus.OFF
        )

    def close(self) -> None:
        self.raw.close()
