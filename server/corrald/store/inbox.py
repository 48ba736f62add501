"""Per-recipient inboxes: messages, broadcasts, acknowledgements."""

from __future__ import annotations

import sqlite3

from .. import errors
from ..model import InboxItem, Txn
from .events import emit
from .status import refresh_status
from .team import teammate_row


def enqueue(tx: Txn, recipient: str, kind: str, limit: int, **fields) -> int:
    """Appends one item to a teammate's inbox and returns its sequence number. Only plain
    messages count against `limit`: a protocol message is never refused for a full inbox."""
    _, _, removed, _, _, acked, last = teammate_row(tx.conn, recipient, lock=True)
    if removed:
        raise errors.TeammateNotFound(f"teammate {recipient!r} was removed", name=recipient)
    if kind == "message" and last - acked >= limit:
        raise errors.Overloaded(f"inbox of {recipient!r} holds {limit} unacknowledged items", retry_after_ms=1000)
    seq = last + 1
    tx.conn.execute("UPDATE teammates SET last_seq = ? WHERE name = ?", (seq, recipient))
    tx.conn.execute(
        "INSERT INTO inbox (recipient, seq, kind, send_ms, sender, body, ref, approve, deadline_ms)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            recipient,
            seq,
            kind,
            tx.now_ms,
            fields.get("sender", ""),
            fields.get("body", ""),
            fields.get("ref", ""),
            int(fields.get("approve", False)),
            fields.get("deadline_ms"),
        ),
    )
    tx.wakes.teammates.add(recipient)
    return seq


def send_message(tx: Txn, sender: str, to: str, body: str, *, inbox_limit: int) -> list[str]:
    if to == "lead":
        emit(tx, "message", {"sender": sender, "body": body})
        return ["lead"]
    if to == "*":
        return _broadcast(tx, sender, body, inbox_limit)
    enqueue(tx, to, "message", inbox_limit, sender=sender, body=body)
    return [to]


def _broadcast(tx: Txn, sender: str, body: str, limit: int) -> list[str]:
    """A message to every teammate but the sender, in three statements however large the team."""
    everyone_else = "removed = 0 AND name != ?"
    full = tx.conn.execute(
        f"SELECT name FROM teammates WHERE {everyone_else} AND last_seq - acked_seq >= ? ORDER BY name LIMIT 1",
        (sender, limit),
    ).fetchone()
    if full is not None:
        raise errors.Overloaded(f"inbox of {full[0]!r} holds {limit} unacknowledged items", retry_after_ms=1000)
    recipients = sorted(
        n
        for (n,) in tx.conn.execute(
            f"UPDATE teammates SET last_seq = last_seq + 1 WHERE {everyone_else} RETURNING name", (sender,)
        )
    )
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
    _, _, _, _, _, acked, last = teammate_row(tx.conn, name, lock=True)
    if through_seq < 0 or through_seq > last:
        raise errors.InvalidArgument(
            "through_seq", f"{through_seq} is not a delivered sequence number (last is {last})"
        )
    if through_seq > acked:
        tx.conn.execute("UPDATE teammates SET acked_seq = ? WHERE name = ?", (through_seq, name))
        tx.wakes.teammates.add(name)  # a gate may have opened
        tx.wakes.may_claim.add(name)
        refresh_status(tx, name)
    return max(acked, through_seq)
