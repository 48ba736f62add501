"""The append-only event log: every state change, in order (the Watch feed)."""

from __future__ import annotations

import json
import sqlite3

from ..model import Event, Txn


def emit(tx: Txn, kind: str, data: dict) -> None:
    if isinstance(tx.conn, sqlite3.Connection) and all(type(value) in _SQL_SCALARS for value in data.values()):
        # SQLite writes the object (json_object): cheaper on the writer than json.dumps.
        # (PostgreSQL's json_build_object cannot tell the type of a bare parameter.)
        pairs = ", ".join("?, ?" for _ in data)
        params = [item for pair in data.items() for item in pair]
        tx.conn.execute(
            f"INSERT INTO events (time_ms, kind, data) VALUES (?, ?, json_object({pairs}))", (tx.now_ms, kind, *params)
        )
    else:  # booleans (SQLite would write 1 and 0), lists, objects
        tx.conn.execute(
            "INSERT INTO events (time_ms, kind, data) VALUES (?, ?, ?)",
            (tx.now_ms, kind, json.dumps(data, separators=(",", ":"))),
        )
    tx.wakes.events = True


# Values json_object writes exactly as json.dumps would (True is not one: it binds as 1).
_SQL_SCALARS = frozenset({str, int, type(None)})


def read_events(conn: sqlite3.Connection, after_seq: int, limit: int) -> list[Event]:
    rows = conn.execute(
        "SELECT seq, time_ms, kind, data FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
        (after_seq, limit),
    ).fetchall()
    return [Event(seq, time_ms, kind, json.loads(data)) for seq, time_ms, kind, data in rows]
