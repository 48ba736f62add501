"""Reads for the web board and the Watch feed: the board's shape without its payloads,
in plain rows, and pages of the event log with what each event is about.

Every function takes an open read connection; the caller runs them together in
one read transaction, so a snapshot and the event seq it names agree.
"""

from __future__ import annotations

import dataclasses
import sqlite3

from ..model import TASK_EVENT_KINDS, Event, FeedPage, TaskRecord, TaskState, TeammateRecord
from . import events, tasks, team
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


@dataclasses.dataclass(frozen=True, slots=True)
class BoardPicture:
    """The whole board as a page draws it, read in one transaction: consistent with the
    event log through `seq`. Past `graph_limit` tasks, `tasks` is the frontier."""

    seq: int
    task_count: int
    frontier: bool
    tasks: list[dict[str, object]]
    problems: list[dict[str, object]]
    claims: list[dict[str, object]]
    plans: list[dict[str, object]]
    teammates: list[TeammateRecord]
    last_activity_ms: dict[str, int]


def board_picture(conn: sqlite3.Connection, graph_limit: int, claims_limit: int, teammates_limit: int) -> BoardPicture:
    count = task_count(conn)
    frontier = count > graph_limit
    rows = frontier_rows(conn, graph_limit) if frontier else task_rows(conn, 0, graph_limit)
    return BoardPicture(
        seq=last_event_seq(conn),
        task_count=count,
        frontier=frontier,
        tasks=rows,
        problems=problem_rows(conn, 500),
        claims=recent_claims(conn, claims_limit),
        plans=open_plans(conn, 100),
        teammates=[record for _, record in team.list_teammates(conn, 0, teammates_limit)],
        last_activity_ms=last_activity(conn),
    )


def feed_page(conn: sqlite3.Connection, after_seq: int, limit: int, max_bytes: int) -> FeedPage:
    """Events after `after_seq` with the task or teammate each one is about: up to `limit`,
    as many as fit in `max_bytes` (at least one), chosen before any task is loaded."""
    found = events.read_events(conn, after_seq, limit)
    sizes = tasks.wire_bytes_by_id(conn, (e.data["id"] for e in found if e.kind in TASK_EVENT_KINDS))
    items: list[tuple[Event, TaskRecord | None, TeammateRecord | None]] = []
    total = 0
    for event in found:
        if event.kind in TASK_EVENT_KINDS:
            # The bound counts the task's progress now; the event shows its own.
            total += sizes.get(event.data["id"], 0) + len(event.data.get("progress", "").encode())
        if items and total > max_bytes:
            break
        task = tasks.get_task(conn, event.data["id"]) if event.kind in TASK_EVENT_KINDS else None
        mate = team.get_teammate(conn, event.data["name"]) if event.kind == "teammate_changed" else None
        items.append((event, task, mate))
    return FeedPage(items, more=len(items) < len(found) or len(found) == limit)
