"""Reads for the web board: the board's shape without its payloads, in plain rows.

Every function takes an open read connection; the caller runs them together in
one read transaction, so a snapshot and the event seq it names agree.
"""

from __future__ import annotations

import sqlite3

from ..model import TaskState
from .dialect import sql

ERROR_PREVIEW_CHARS = 1024
_TERMINAL = (int(TaskState.COMPLETED), int(TaskState.FAILED), int(TaskState.CANCELED))

_KEYS = (
    "seq",
    "id",
    "title",
    "state",
    "owner",
    "attempt",
    "max_attempts",
    "priority",
    "required_role",
    "unmet_deps",
    "lease_expire_ms",
    "finish_ms",
    "ready_ms",
    "create_ms",
    "error",
    "progress",
    "progress_fraction",
)


def _row(values: tuple) -> dict[str, object]:
    row = dict(zip(_KEYS, values[:-1], strict=True))
    row["state"] = TaskState(row["state"]).name
    row["depends_on"] = values[-1].split("\n") if values[-1] else []
    return row


def last_event_seq(conn: sqlite3.Connection) -> int:
    return conn.execute(sql(conn).LAST_EVENT_SEQ).fetchone()[0]


def task_count(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT count(*) FROM tasks").fetchone()[0]


def task_rows(conn: sqlite3.Connection, after_seq: int, limit: int) -> list[dict[str, object]]:
    """Up to `limit` tasks after `after_seq`, in board order."""
    rows = conn.execute(sql(conn).TASK_ROWS, (after_seq, limit))
    return [_row(values) for values in rows.fetchall()]


def frontier_rows(conn: sqlite3.Connection, limit: int) -> list[dict[str, object]]:
    """The unfinished tasks and their direct dependencies, up to `limit`, in board order:
    what a graph of a big board still has to say."""
    rows = conn.execute(sql(conn).FRONTIER_ROWS, (*_TERMINAL, *_TERMINAL, limit))
    return [_row(values) for values in rows.fetchall()]


def problem_rows(conn: sqlite3.Connection, limit: int) -> list[dict[str, object]]:
    """FAILED and CANCELED tasks, newest first."""
    rows = conn.execute(sql(conn).PROBLEM_ROWS, (int(TaskState.FAILED), int(TaskState.CANCELED), limit))
    return [_row(values) for values in rows.fetchall()]


def recent_claims(conn: sqlite3.Connection, limit: int) -> list[dict[str, object]]:
    """The latest claims, oldest first: who held which task from when to when, and how it ended."""
    rows = conn.execute(
        sql(conn).RECENT_CLAIMS,
        (limit,),
    ).fetchall()
    keys = ("fence", "task", "teammate", "attempt", "claim_ms", "end_ms", "outcome")
    return [dict(zip(keys, row, strict=True)) for row in reversed(rows)]


def last_activity(conn: sqlite3.Connection) -> dict[str, int]:
    """Each teammate's latest claim, claim end or progress report, in ms."""
    rows = conn.execute(sql(conn).LAST_ACTIVITY)
    return dict(rows.fetchall())


def open_plans(conn: sqlite3.Connection, limit: int) -> list[dict[str, object]]:
    """Each teammate's newest plan while it waits for a decision."""
    rows = conn.execute(
        sql(conn).OPEN_PLANS,
        (limit,),
    ).fetchall()
    return [{"plan_id": str(pid), "author": a, "plan": body, "submit_ms": ms} for pid, a, body, ms in rows]
