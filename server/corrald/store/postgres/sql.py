"""The store's SQL on PostgreSQL, and the connection the store functions use there.

The store modules (`corrald.store`) are written once, in the SQL both databases
accept, with a few SQLite spellings where PostgreSQL has no equivalent
expression: `json_each` over a JSON list, `json_object`, `group_concat`,
`length(CAST(x AS BLOB))`, the scalar `max(a, b)` and `min(a, b)`, `INDEXED BY`
hints, and numbered (`?1`) or named (`:name`) parameters.
`translate` rewrites those, once per distinct statement; `PgConnection` runs the
result with psycopg and offers the part of `sqlite3.Connection` the store and
the writer use (`execute`, `executemany`, `total_changes`, `in_transaction`).
Everything else in a statement is sent as it is written.
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
from ..tasks import DEPENDENCY_IDS
from .watchdog import WATCHDOG

# Whole fragments PostgreSQL says differently, replaced before the rules below.
_FRAGMENTS = {
    # string_agg keeps the spec's order only when asked to; SQLite's group_concat
    # keeps the order of the subquery it reads.
    DEPENDENCY_IDS: "(SELECT string_agg(dep.id, chr(10) ORDER BY deps.position) FROM deps"
    " JOIN tasks AS dep ON dep.seq = deps.dep_seq WHERE deps.task_seq = tasks.seq)",
}
_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    # The planner picks its own index.
    (re.compile(r"\s+INDEXED BY \w+"), ""),
    (re.compile(r"length\(CAST\(([\w.]+) AS BLOB\)\)"), r"octet_length(\1)"),
    # A JSON list as a table of (value, key): the elements as text, in order.
    (
        re.compile(r"json_each\(\?\)(?:\s+AS\s+(\w+))?"),
        r"json_array_elements_text(?::json) WITH ORDINALITY AS \1(value, key)",
    ),
    (re.compile(r"\bjson_object\("), "json_build_object("),
    (re.compile(r"\bx'([0-9a-fA-F]*)'"), r"'\x\1'::bytea"),  # a blob literal (see _expand)
)
_LITERAL = re.compile(r"('(?:[^']|'')*')")
_PARAMETER = re.compile(r"\?(\d*)")
_NAMED_PARAMETER = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


@functools.lru_cache(maxsize=4096)
def translate(sql: str) -> tuple[str, tuple[int, ...] | None]:
    """The statement in PostgreSQL's dialect with psycopg's `%s` parameters, and, when
    it numbers its parameters (`?1`), which given parameter each `%s` takes."""
    for sqlite_text, postgres_text in _FRAGMENTS.items():
        sql = sql.replace(sqlite_text, postgres_text)
    for pattern, replacement in _RULES:
        sql = pattern.sub(functools.partial(_expand, replacement=replacement), sql)
    sql = _scalar_extremes(sql)
    order: list[int] = []  # each %s's parameter, numbered from 0
    numbered = False
    pieces = []
    for index, piece in enumerate(_LITERAL.split(sql)):
        if index % 2:  # a string literal: only psycopg's % needs escaping
            pieces.append(piece.replace("%", "%%"))
            continue
        piece = piece.replace("%", "%%")

        def parameter(match: re.Match[str]) -> str:
            # As SQLite numbers them: ?N is the Nth, a bare ? the one after the largest so far.
            nonlocal numbered
            if match.group(1):
                numbered = True
                order.append(int(match.group(1)) - 1)
            else:
                order.append(max(order, default=-1) + 1)
            return "%s"

        piece = _NAMED_PARAMETER.sub(r"%(\1)s", piece)
        pieces.append(_PARAMETER.sub(parameter, piece))
    return "".join(pieces), tuple(order) if numbered else None


_EXTREME = re.compile(r"\b(max|min)\(", re.IGNORECASE)


def _scalar_extremes(sql: str) -> str:
    """SQLite's max(a, b, ...) and min(a, b, ...) of several arguments as GREATEST and LEAST
    (one argument is the aggregate, the same in both)."""
    out, start = [], 0
    for match in _EXTREME.finditer(sql):
        depth, index = 1, match.end()
        top_level_comma = False
        while index < len(sql) and depth:
            char = sql[index]
            depth += char == "("
            depth -= char == ")"
            top_level_comma |= char == "," and depth == 1
            index += 1
        if top_level_comma:
            out.append(sql[start : match.start()])
            out.append("GREATEST(" if match.group(1).lower() == "max" else "LEAST(")
            start = match.end()
    out.append(sql[start:])
    return "".join(out)


def _expand(match: re.Match[str], replacement: str) -> str:
    # A json_each without an alias is read as json_each.value, as in SQLite.
    groups = [group if group is not None else "json_each" for group in match.groups()]
    return re.sub(r"\\(\d)", lambda ref: groups[int(ref.group(1)) - 1], replacement)


def _parameters(params: Sequence[Any] | dict[str, Any], order: tuple[int, ...] | None) -> Any:
    if isinstance(params, dict):
        return {key: _parameter(value) for key, value in params.items()}
    if order is not None:
        params = [params[index] for index in order]
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
# A plain multi-row INSERT goes in by COPY: a 50,000-edge batch in a tenth of the time.
_PLAIN_INSERT = re.compile(r"INSERT INTO (\w+) \(([\w\s,]+)\) VALUES \(\s*\?(?:\s*,\s*\?)*\s*\)")
COPY_FROM_ROWS = 64


@functools.lru_cache(maxsize=256)
def _writes_within(text: str) -> bool:
    """Whether a statement of WITH clauses writes in one of them."""
    return text.startswith("WITH") and re.search(r"\b(INSERT|UPDATE|DELETE)\b", text) is not None


class PgConnection:
    """A psycopg connection (autocommit: the writer and the readers say BEGIN themselves)
    with the part of `sqlite3.Connection`'s interface the store uses.

    With `reply_bound_s`, a round trip still unanswered after that long has its socket cut
    (store/postgres/watchdog.py) and fails as a lost connection; `on_severed` is then told."""

    # The store sends a claim or a completion as one statement of data-modifying
    # WITH clauses (store/tasks.py, `fuses_statements`).
    fuses_statements = True

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
        text, order = translate(sql)
        # Results in binary: a blob arrives as its bytes, not as hex text of twice the size.
        with self.round_trip():
            cursor = self.raw.execute(text, _parameters(params, order), binary=True)
        status = cursor.statusmessage or ""
        if status.startswith(_CHANGES) and cursor.rowcount > 0:
            self.total_changes += cursor.rowcount
        elif cursor.rowcount > 0 and _writes_within(text):
            # Its status says SELECT: a row returned means its writes happened (the
            # store's fused statements return nothing when they write nothing).
            self.total_changes += cursor.rowcount
        return cursor

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> psycopg.Cursor:
        rows = list(rows)
        plain = _PLAIN_INSERT.fullmatch(sql.strip())
        if plain is not None and len(rows) >= COPY_FROM_ROWS:
            return self._copy(plain.group(1), plain.group(2), rows)
        text, order = translate(sql)
        cursor = self.raw.cursor()
        with self.round_trip():
            cursor.executemany(text, [_parameters(row, order) for row in rows])
        if cursor.rowcount > 0:
            self.total_changes += cursor.rowcount
        return cursor

    def _copy(self, table: str, columns: str, rows: list[Sequence[Any]]) -> psycopg.Cursor:
        values = [_parameters(row, None) for row in rows]  # each refused before any is sent
        cursor = self.raw.cursor()
        with self.round_trip(), cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
            for row in values:
                copy.write_row(row)
        self.total_changes += len(rows)
        return cursor

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
