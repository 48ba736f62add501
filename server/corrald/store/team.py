"""Teammates, their inboxes, plans and shutdown requests."""

from __future__ import annotations

import json
import sqlite3

from .. import errors
from . import tasks
from .events import emit
from ..model import ClaimOutcome, InboxItem, TeammateRecord, TeammateStatus, Txn

_STATUS_REASON = {
    TeammateStatus.OFFLINE: "left",
    TeammateStatus.IDLE: "idle",
    TeammateStatus.BUSY: "busy",
    TeammateStatus.AWAITING_PLAN: "awaiting_plan",
    TeammateStatus.SHUTTING_DOWN: "shutting_down",
    TeammateStatus.REMOVED: "removed",
}


# ---------------------------------------------------------------- teammates


def add_teammate(tx: Txn, name: str, roles: tuple[str, ...], require_plan: bool, token_hash: bytes) -> TeammateRecord:
    if tx.conn.execute("SELECT 1 FROM teammates WHERE name = ?", (name,)).fetchone():
        raise errors.AlreadyExists(f"teammate {name!r} exists", field="name")
    tx.conn.execute(
        "INSERT INTO teammates (name, token_hash, roles, require_plan, status, created_ms) VALUES (?, ?, ?, ?, ?, ?)",
        (name, token_hash, json.dumps(list(roles)), int(require_plan), int(TeammateStatus.OFFLINE), tx.now_ms),
    )
    teammate = get_teammate(tx.conn, name)
    emit(tx, "teammate_changed", {"name": name, "status": int(teammate.status), "reason": "added"})
    return teammate


def _row(conn: sqlite3.Connection, name: str) -> tuple:
    row = conn.execute(
        "SELECT roles, require_plan, removed, online, status, acked_seq, last_seq FROM teammates WHERE name = ?",
        (name,),
    ).fetchone()
    if row is None:
        raise errors.TeammateNotFound(f"no teammate {name!r}", name=name)
    return row


def get_teammate(conn: sqlite3.Connection, name: str) -> TeammateRecord:
    roles, require_plan, _, _, status, _, _ = _row(conn, name)
    held = tuple(r[0] for r in conn.execute("SELECT id FROM tasks WHERE owner = ? AND state = 2 ORDER BY seq", (name,)))
    return TeammateRecord(name, tuple(json.loads(roles)), bool(require_plan), TeammateStatus(status), held)


def list_teammates(conn: sqlite3.Connection) -> list[TeammateRecord]:
    return [get_teammate(conn, name) for (name,) in conn.execute("SELECT name FROM teammates ORDER BY created_ms, name")]


def roles_of(conn: sqlite3.Connection, name: str) -> tuple[str, ...]:
    return tuple(json.loads(_row(conn, name)[0]))


def count_by_status(conn: sqlite3.Connection) -> dict[TeammateStatus, int]:
    """Teammates by their stored status (kept current by refresh_status)."""
    rows = conn.execute("SELECT status, count(*) FROM teammates GROUP BY status")
    return {TeammateStatus(status): count for status, count in rows}


def credentials(conn: sqlite3.Connection) -> list[tuple[bytes, str, bool]]:
    """(token hash, name, removed) for every teammate ever minted."""
    return [(h, n, bool(r)) for h, n, r in conn.execute("SELECT token_hash, name, removed FROM teammates")]


def remove_teammate(tx: Txn, name: str, why: str = "removed") -> TeammateRecord:
    if _row(tx.conn, name)[2]:
        return get_teammate(tx.conn, name)
    tasks.release_all(tx, name, ClaimOutcome.REVOKED)
    tx.conn.execute("UPDATE teammates SET removed = 1, online = 0 WHERE name = ?", (name,))
    tx.conn.execute("UPDATE shutdowns SET answered = 1 WHERE teammate = ? AND answered = 0", (name,))
    tx.wakes.ended[name] = why
    refresh_status(tx, name, reason="removed")
    return get_teammate(tx.conn, name)


def set_online(tx: Txn, name: str, online: bool, reason: str | None = None) -> None:
    tx.conn.execute("UPDATE teammates SET online = ? WHERE name = ?", (int(online), name))
    refresh_status(tx, name, reason=reason or ("joined" if online else "left"), force=reason is not None)


def mark_all_offline(tx: Txn) -> None:
    for (name,) in tx.conn.execute("SELECT name FROM teammates WHERE online = 1").fetchall():
        set_online(tx, name, False)


_STATUS_QUERY = (
    "SELECT removed, online, require_plan, acked_seq, status,"
    " EXISTS (SELECT 1 FROM shutdowns WHERE teammate = :name AND answered = 0),"
    " EXISTS (SELECT 1 FROM tasks WHERE owner = :name AND state = 2)"
    " FROM teammates WHERE name = :name"
)


def _status(conn: sqlite3.Connection, name: str) -> tuple[TeammateStatus, int]:
    """(the status now, the status last stored), in one query."""
    row = conn.execute(_STATUS_QUERY, {"name": name}).fetchone()
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
    return TeammateStatus.IDLE, stored


def refresh_status(tx: Txn, name: str, *, reason: str | None = None, force: bool = False) -> None:
    """Stores the teammate's status and reports it on the Watch feed when it moved."""
    status, stored = _status(tx.conn, name)
    if status == stored and not force:
        return
    _store_status(tx, name, status, reason)


def mark_busy(tx: Txn, name: str) -> None:
    """After a claim: the holder is busy (the claim's gates ruled out every other status)."""
    if tx.conn.execute("UPDATE teammates SET status = 3 WHERE name = ? AND status != 3", (name,)).rowcount:
        emit(tx, "teammate_changed", {"name": name, "status": int(TeammateStatus.BUSY), "reason": "busy"})


def _store_status(tx: Txn, name: str, status: TeammateStatus, reason: str | None) -> None:
    tx.conn.execute("UPDATE teammates SET status = ? WHERE name = ?", (int(status), name))
    emit(tx, "teammate_changed", {"name": name, "status": int(status), "reason": reason or _STATUS_REASON[status]})


# ---------------------------------------------------------------- inbox


def _enqueue(tx: Txn, recipient: str, kind: str, limit: int, **fields) -> int:
    _, _, removed, _, _, acked, last = _row(tx.conn, recipient)
    if removed:
        raise errors.TeammateNotFound(f"teammate {recipient!r} was removed", name=recipient)
    if kind == "message" and last - acked >= limit:
        raise errors.Overloaded(f"inbox of {recipient!r} holds {limit} unacknowledged items", retry_after_ms=1000)
    seq = last + 1
    tx.conn.execute("UPDATE teammates SET last_seq = ? WHERE name = ?", (seq, recipient))
    tx.conn.execute(
        "INSERT INTO inbox (recipient, seq, kind, send_ms, sender, body, ref, approve, deadline_ms)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (recipient, seq, kind, tx.now_ms, fields.get("sender", ""), fields.get("body", ""),
         fields.get("ref", ""), int(fields.get("approve", False)), fields.get("deadline_ms")),
    )
    tx.wakes.teammates.add(recipient)
    return seq


def send_message(tx: Txn, sender: str, to: str, body: str, *, inbox_limit: int) -> list[str]:
    if to == "lead":
        emit(tx, "message", {"sender": sender, "body": body})
        return ["lead"]
    if to == "*":
        return _broadcast(tx, sender, body, inbox_limit)
    _enqueue(tx, to, "message", inbox_limit, sender=sender, body=body)
    return [to]


def _broadcast(tx: Txn, sender: str, body: str, limit: int) -> list[str]:
    """A message to every teammate but the sender, in three statements however large the team."""
    everyone_else = "removed = 0 AND name != ?"
    full = tx.conn.execute(f"SELECT name FROM teammates WHERE {everyone_else} AND last_seq - acked_seq >= ?"
                           " ORDER BY name LIMIT 1", (sender, limit)).fetchone()
    if full is not None:
        raise errors.Overloaded(f"inbox of {full[0]!r} holds {limit} unacknowledged items", retry_after_ms=1000)
    recipients = sorted(n for (n,) in tx.conn.execute(
        f"UPDATE teammates SET last_seq = last_seq + 1 WHERE {everyone_else} RETURNING name", (sender,)))
    tx.conn.execute(
        "INSERT INTO inbox (recipient, seq, kind, send_ms, sender, body)"
        f" SELECT name, last_seq, 'message', ?, ?, ? FROM teammates WHERE {everyone_else}",
        (tx.now_ms, sender, body, sender),
    )
    tx.wakes.teammates.update(recipients)
    return recipients


def inbox_after(conn: sqlite3.Connection, name: str, after_seq: int, limit: int = 64) -> list[InboxItem]:
    rows = conn.execute(
        "SELECT seq, kind, send_ms, sender, body, ref, approve, deadline_ms FROM inbox"
        " WHERE recipient = ? AND seq > ? ORDER BY seq LIMIT ?",
        (name, after_seq, limit),
    ).fetchall()
    return [InboxItem(s, k, ms, snd, b, ref, bool(a), dl) for s, k, ms, snd, b, ref, a, dl in rows]


def ack(tx: Txn, name: str, through_seq: int) -> int:
    _, _, _, _, _, acked, last = _row(tx.conn, name)
    if through_seq < 0 or through_seq > last:
        raise errors.InvalidArgument("through_seq", f"{through_seq} is not a delivered sequence number (last is {last})")
    if through_seq > acked:
        tx.conn.execute("UPDATE teammates SET acked_seq = ? WHERE name = ?", (through_seq, name))
        tx.wakes.teammates.add(name)  # a gate may have opened
        tx.wakes.may_claim.add(name)
        refresh_status(tx, name)
    return max(acked, through_seq)


def protocol_pending(conn: sqlite3.Connection, name: str, acked: int | None = None, last: int | None = None) -> bool:
    """An unacknowledged protocol message or an unanswered shutdown request waits."""
    if acked is None or last is None:
        # One statement (a lease renewal asks this on the writer, where every
        # statement gives up the GIL and may wait to get it back).
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM inbox INDEXED BY inbox_protocol"
            "               WHERE recipient = t.name AND seq > t.acked_seq AND kind != 'message')"
            " OR EXISTS (SELECT 1 FROM shutdowns WHERE teammate = t.name AND answered = 0)"
            " FROM teammates AS t WHERE t.name = ?", (name,)
        ).fetchone()
        if row is None:
            raise errors.TeammateNotFound(f"no teammate {name!r}", name=name)
        return bool(row[0])
    if last > acked and conn.execute(
        "SELECT 1 FROM inbox INDEXED BY inbox_protocol"
        " WHERE recipient = ? AND seq > ? AND kind != 'message' LIMIT 1", (name, acked)
    ).fetchone():
        return True
    return shutdown_pending(conn, name)


# ---------------------------------------------------------------- plans


def plan_approved(conn: sqlite3.Connection, name: str, acked: int) -> bool:
    """Only the newest plan counts, and only once its approval is acknowledged."""
    row = conn.execute(
        "SELECT approve, decision_seq FROM plans WHERE author = ? ORDER BY plan_id DESC LIMIT 1", (name,)
    ).fetchone()
    return row is not None and row[0] == 1 and row[1] <= acked


def submit_plan(tx: Txn, author: str, body: str) -> str:
    plan_id = tx.conn.execute(
        "INSERT INTO plans (author, body, submit_ms) VALUES (?, ?, ?)", (author, body, tx.now_ms)
    ).lastrowid
    emit(tx, "plan_submitted", {"plan_id": str(plan_id), "author": author, "plan": body})
    refresh_status(tx, author)
    return str(plan_id)


def _row_id(text: str) -> int:
    """An id the daemon issued ("42"), or -1, which matches nothing."""
    if text.isascii() and text.isdigit() and len(text) <= 18:
        return int(text)
    return -1


def decide_plan(tx: Txn, plan_id: str, approve: bool, feedback: str) -> int:
    row = tx.conn.execute("SELECT author, approve FROM plans WHERE plan_id = ?", (_row_id(plan_id),)).fetchone()
    if row is None:
        raise errors.PlanNotFound(f"no plan {plan_id!r}", plan_id=plan_id)
    author, decided = row
    if decided is not None:
        raise errors.FailedPrecondition(f"plan {plan_id!r} was already decided", plan_id=plan_id)
    seq = _enqueue(tx, author, "plan_decision", 0, ref=plan_id, approve=approve, body=feedback)
    tx.conn.execute(
        "UPDATE plans SET approve = ?, feedback = ?, decision_seq = ? WHERE plan_id = ?",
        (int(approve), feedback, seq, _row_id(plan_id)),
    )
    return seq


# ---------------------------------------------------------------- shutdown


def shutdown_pending(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM shutdowns WHERE teammate = ? AND answered = 0 LIMIT 1", (name,)).fetchone() is not None


def request_shutdown(tx: Txn, name: str, reason: str, grace_ms: int) -> tuple[str, int]:
    _row(tx.conn, name)
    deadline = tx.now_ms + grace_ms
    request_id = tx.conn.execute(
        "INSERT INTO shutdowns (teammate, reason, request_ms, deadline_ms) VALUES (?, ?, ?, ?)",
        (name, reason, tx.now_ms, deadline),
    ).lastrowid
    _enqueue(tx, name, "shutdown_request", 0, ref=str(request_id), body=reason, deadline_ms=deadline)
    tx.wakes.deadline(deadline)
    refresh_status(tx, name, reason="shutting_down")
    return str(request_id), deadline


def respond_shutdown(tx: Txn, name: str, request_id: str, approve: bool, reason: str) -> None:
    row = tx.conn.execute(
        "SELECT answered FROM shutdowns WHERE request_id = ? AND teammate = ?",
        (_row_id(request_id), name),
    ).fetchone()
    if row is None:
        raise errors.ShutdownRequestNotFound(f"no shutdown request {request_id!r} for you", request_id=request_id)
    if row[0]:
        raise errors.FailedPrecondition(f"shutdown request {request_id!r} was already answered", request_id=request_id)
    if approve:
        tasks.release_all(tx, name, ClaimOutcome.RELEASED)
        tx.conn.execute(
            "UPDATE shutdowns SET answered = 1, approve = 1, answer_reason = ? WHERE teammate = ? AND answered = 0",
            (reason, name),
        )
        tx.wakes.ended[name] = "shutdown approved"
    else:
        tx.conn.execute(
            "UPDATE shutdowns SET answered = 1, approve = 0, answer_reason = ? WHERE request_id = ?",
            (reason, _row_id(request_id)),
        )
        tx.wakes.teammates.add(name)  # the shutdown gate opened
        tx.wakes.may_claim.add(name)
    emit(tx, "shutdown_answered", {"request_id": request_id, "teammate": name, "approve": approve, "reason": reason})
    refresh_status(tx, name)


def expire_shutdowns(tx: Txn) -> list[str]:
    """The forced path: past its grace, an unanswered teammate is removed."""
    names = [n for (n,) in tx.conn.execute(
        "SELECT DISTINCT teammate FROM shutdowns WHERE answered = 0 AND deadline_ms <= ?", (tx.now_ms,)
    ).fetchall()]
    for name in names:
        remove_teammate(tx, name, why="shutdown grace ran out")
    return names
