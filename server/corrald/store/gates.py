"""The gates before a claim (design §5 step 3): reads only, so every writer of them can ask."""

from __future__ import annotations

import sqlite3

from .. import errors
from .dialect import sql


def plan_approved(conn: sqlite3.Connection, name: str, acked: int) -> bool:
    """Only the newest plan counts, and only once its approval is acknowledged."""
    row = conn.execute(sql(conn).PLAN_APPROVED, (name,)).fetchone()
    return row is not None and row[0] == 1 and row[1] <= acked


def protocol_pending(conn: sqlite3.Connection, name: str) -> bool:
    """An unacknowledged protocol message or an unanswered shutdown request waits.

    One statement (a lease renewal asks this on the writer, where every
    statement gives up the GIL and may wait to get it back)."""
    row = conn.execute(
        sql(conn).PROTOCOL_PENDING,
        (name,),
    ).fetchone()
    if row is None:
        raise errors.TeammateNotFound(f"no teammate {name!r}", name=name)
    return bool(row[0])


def protocol_unacked(conn: sqlite3.Connection, name: str, acked: int) -> bool:
    """A protocol message after `acked` waits (the delivery check, which read the
    teammate's sequence numbers and shutdown state with its row, asks only when an
    item after `acked` is in the inbox)."""
    return conn.execute(sql(conn).PROTOCOL_UNACKED, (name, acked)).fetchone() is not None
