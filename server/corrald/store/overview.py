"""Reads for the web board: the board's shape without its payloads, in plain rows.

Every function takes an open read connection; the caller runs them together in
one read transaction, so a snapshot and the event seq it names agree.
"""

from __future__ import annotations

import sqlite3

from ..model import TaskState
from .tasks import DEPENDENCY_IDS

ERROR_PREVIEW_CHARS = 1024
_TERMINAL = (int(TaskState.COMPLETED), int(TaskState.FAILED), int(TaskState.CANCELED))

# A task as the board draws it: no description, payload or result (the detail has them).
_ROW = (
    "seq, id, title, state, owner, attempt, max_attempts, priority, required_role, unmet_deps,"
    " lease_expire_ms, finish_ms, ready_ms, create_ms, substr(error, 1, 1024), progress, progress_fraction, "
    + DEPENDENCY_IDS
)
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
    return conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0]


def task_count(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT count(*) FROM tasks").fetchone()[0]


def task_rows(conn: sqlite3.Connection, after_seq: int, limit: int) -> list[dict[str, object]]:
    """Up to `limit` tasks after `after_seq`, in board order."""
    rows = conn.execute(f"SELECT {_ROW} FROM tasks WHERE seq > ? ORDER BY seq LIMIT ?", (after_seq, limit))
    return [_row(values) for values in rows.fetchall()]


def frontier_rows(conn: sqlite3.Connection, limit: int) -> list[dict[str, object]]:
    """The unfinished tasks and their direct dependencies, up to `limit`, in board order:
    what a graph of a big board still has to say."""
    rows = conn.execute(
        f"SELECT {_ROW} FROM tasks WHERE seq IN ("
        " SELECT seq FROM tasks WHERE state NOT IN (?, ?, ?)"
        " UNION SELECT deps.dep_seq FROM deps JOIN tasks AS open ON open.seq = deps.task_seq"
        "  WHERE open.state NOT IN (?, ?, ?)"
        ") ORDER BY seq LIMIT ?",
        (*_TERMINAL, *_TERMINAL, limit),
    )
    return [_row(values) for values in rows.fetchall()]


def problem_rows(conn: sqlite3.Connection, limit: int) -> list[dict[str, object]]:
    """FAILED and CANCELED tasks, newest first."""
    rows = conn.execute(
        f"SELECT {_ROW} FROM tasks WHERE state IN (?, ?) ORDER BY finish_ms DESC, seq DESC LIMIT ?",
        (int(TaskState.FAILED), int(TaskState.CANCELED), limit),
    )
    return [_row(values) for values in rows.fetchall()]


def recent_claims(conn: sqlite3.Connection, limit: int) -> list[dict[str, object]]:
    """The latest claims, oldest first: who held which task from when to when, and how it ended."""
    rows = conn.execute(
        "SELECT c.fence, t.id, c.teammate, c.attempt, c.claim_ms, c.end_ms, coalesce(c.outcome, '')"
        " FROM claims AS c JOIN tasks AS t ON t.seq = c.task_seq ORDER BY c.fence DESC LIMIT ?",
        (limit,),
    ).fetchall()
    keys = ("fence", "task", "teammate", "attempt", "claim_ms", "end_ms", "outcome")
    return [dict(zip(keys, row, strict=True)) for row in reversed(rows)]


def last_activity(conn: sqlite3.Connection) -> dict[str, int]:
    """Each teammate's latest claim, claim end or progress report, in ms."""
    rows = conn.execute(
        "SELECT who, max(at) FROM ("
        " SELECT teammate AS who, CASE WHEN end_ms > claim_ms THEN end_ms ELSE claim_ms END AS at FROM claims"
        " UNION ALL SELECT owner, progress_ms FROM tasks WHERE owner != '' AND progress_ms IS NOT NULL"
        ") AS activity GROUP BY who"
    )
    return dict(rows.fetchall())


def open_plans(conn: sqlite3.Connection, limit: int) -> list[dict[str, object]]:
    """Each teammate's newest plan while it waits for a decision."""
    rows = conn.execute(
        "SELECT plan_id, author, substr(body, 1, 16384), submit_ms FROM plans AS p WHERE approve IS NULL"
        " AND plan_id = (SELECT max(plan_id) FROM plans WHERE author = p.author) ORDER BY plan_id LIMIT ?",
        (limit,),
    ).fetchall()
    return [{"plan_id": str(pid), "author": a, "plan": body, "submit_ms": ms} for pid, a, body, ms in rows]
