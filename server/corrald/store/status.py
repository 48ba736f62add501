"""A teammate's status (offline, idle, busy, awaiting plan, shutting down, removed), stored and reported."""

from __future__ import annotations

import sqlite3

from .. import errors
from ..model import TeammateStatus
from ..txn import Txn
from .dialect import sql
from .events import emit
from .gates import plan_approved

_STATUS_REASON = {
    TeammateStatus.OFFLINE: "left",
    TeammateStatus.IDLE: "idle",
    TeammateStatus.BUSY: "busy",
    TeammateStatus.AWAITING_PLAN: "awaiting_plan",
    TeammateStatus.SHUTTING_DOWN: "shutting_down",
    TeammateStatus.REMOVED: "removed",
    TeammateStatus.WAITING: "waiting",
}


def count_by_status(conn: sqlite3.Connection) -> dict[TeammateStatus, int]:
    """Teammates by their stored status (kept current by refresh_status)."""
    rows = conn.execute("SELECT status, count(*) FROM teammates GROUP BY status")
    return {TeammateStatus(status): count for status, count in rows}


def _status(conn: sqlite3.Connection, name: str) -> tuple[TeammateStatus, int]:
    """(the status now, the status last stored), in one query."""
    row = conn.execute(sql(conn).STATUS, {"name": name}).fetchone()
    if row is None:
        raise errors.TeammateNotFound(f"no teammate {name!r}", name=name)
    removed, online, require_plan, acked, stored, shutting_down, busy = row
    if removed:
        return TeammateStatus.REMOVED, stored
    if shutting_down:
        return TeammateStatus.SHUTTING_DOWN, stored
    if busy:
        return TeammateStatus.BUSY, stored
    if not online:
        return TeammateStatus.OFFLINE, stored
    if require_plan and not plan_approved(conn, name, acked):
        return TeammateStatus.AWAITING_PLAN, stored
    # Idle or waiting: which one only the teammate's stream finds out, when a
    # poll interval passes (`set_waiting`); every other change keeps it.
    if stored == TeammateStatus.WAITING:
        return TeammateStatus.WAITING, stored
    return TeammateStatus.IDLE, stored


def refresh_status(tx: Txn, name: str, *, reason: str | None = None, force: bool = False) -> None:
    """Stores the teammate's status and reports it on the Watch feed when it moved."""
    status, stored = _status(tx.conn, name)
    if status == stored and not force:
        return
    _store_status(tx, name, status, reason)


def set_waiting(tx: Txn, name: str, waiting: bool) -> None:
    """An idle teammate's stream found work it could take still to come (or none left)."""
    frm, to = (
        (TeammateStatus.IDLE, TeammateStatus.WAITING) if waiting else (TeammateStatus.WAITING, TeammateStatus.IDLE)
    )
    if tx.conn.execute(sql(tx.conn).SET_WAITING, (int(to), name, int(frm))).rowcount:
        emit(tx, "teammate_changed", {"name": name, "status": int(to), "reason": _STATUS_REASON[to]})


def mark_busy(tx: Txn, name: str) -> None:
    """After a claim: the holder is busy (the claim's gates ruled out every other status)."""
    if tx.conn.execute(sql(tx.conn).MARK_BUSY, (name,)).rowcount:
        emit(tx, "teammate_changed", {"name": name, "status": int(TeammateStatus.BUSY), "reason": "busy"})


def _store_status(tx: Txn, name: str, status: TeammateStatus, reason: str | None) -> None:
    tx.conn.execute(sql(tx.conn).STORE_STATUS, (int(status), name))
    emit(tx, "teammate_changed", {"name": name, "status": int(status), "reason": reason or _STATUS_REASON[status]})
