"""The append-only event log: every state change, in order (the Watch feed)."""

from __future__ import annotations

import json
import sqlite3

from ..model import Event, Txn


def emit(tx: Txn, kind: str, data: dict) -> None:
    tx.conn.execute(
        "INSERT INTO events (time_ms, kind, data) VALUES (?, ?, ?)",
        (tx.now_ms, kind, json.dumps(data, separators=(",", ":"))),
    )
    tx.wakes.events = True


def read_events(conn: sqlite3.Connection, after_seq: int, limit: int) -> list[Event]:
    rows = conn.execute(
        "SELECT seq, time_ms, kind, data FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
        (after_seq, limit),
    ).fetchall()
    return [Event(seq, time_ms, kind, json.loads(data)) for seq, time_ms, kind, data in rows]
