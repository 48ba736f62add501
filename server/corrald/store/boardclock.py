"""The board's clock across restarts: how far the daemon clock got, kept in `meta.clock_ms`.

A restart starts the clock no earlier than that instant (`Clock.not_before`) and
judges the leases that ended by it as the previous daemon did
(`tasks.extend_live_leases`), so a lease once reported dead is never revived.
"""

from __future__ import annotations

import sqlite3

from ..errors import ClaimError
from .dialect import sql


def note_clock(conn: sqlite3.Connection, now_ms: int) -> None:
    """Records how far the daemon clock got; never goes back."""
    conn.execute(sql(conn).NOTE_CLOCK, (now_ms,))


def stamp_clock(conn: sqlite3.Connection, now_ms: int, changed: bool, failures: list[BaseException]) -> None:
    """The writer's epilogue: records how far the daemon clock got whenever a transaction
    wrote or told a caller its claim was dead, so a restart never revives such a lease. A
    gated Idle check does neither, and so still writes nothing."""
    if changed or any(isinstance(error, ClaimError) for error in failures):
        note_clock(conn, now_ms)


def clock_reached(conn: sqlite3.Connection) -> int:
    """The last instant a daemon on this board recorded (0 on a new board)."""
    (last_ms,) = conn.execute("SELECT value FROM meta WHERE key = 'clock_ms'").fetchone()
    return int(last_ms)
