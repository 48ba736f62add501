"""The append-only event log: every state change, in order (the Watch feed)."""

from __future__ import annotations

import json
import sqlite3

from ..model import Event
from ..txn import Txn
from .dialect import sql


def emit(tx: Txn, kind: str, data: dict) -> None:
    statements = sql(tx.conn)
    written = statements.event_object(len(data)) if all(type(v) in _SQL_SCALARS for v in data.values()) else None
    if written is not None:  # the database writes the object: cheaper on the writer than json.dumps
        params = [item for pair in data.items() for item in pair]
        tx.conn.execute(written, (tx.now_ms, kind, *params))
    else:  # booleans (SQLite would write 1 and 0), lists, objects
        tx.conn.execute(
            statements.EMIT,
            (tx.now_ms, kind, json.dumps(data, separators=(",", ":"))),
        )
    tx.wakes.events = True


# Values json_object writes exactly as json.dumps would (True is not one: it binds as 1).
_SQL_SCALARS = frozenset({str, int, type(None)})


def read_events(conn: sqlite3.Connection, after_seq: int, limit: int) -> list[Event]:
    rows = conn.execute(
        sql(conn).READ_EVENTS,
        (after_seq, limit),
    ).fetchall()
    return [Event(seq, time_ms, kind, json.loads(data)) for seq, time_ms, kind, data in rows]
