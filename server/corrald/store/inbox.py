"""Per-recipient inboxes: messages, broadcasts, acknowledgements."""

from __future__ import annotations

import sqlite3

from .. import errors
from ..model import InboxItem
from ..txn import Txn
from .dialect import sql
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
    tx.conn.execute(sql(tx.conn).SET_LAST_SEQ, (seq, recipient))
    tx.conn.execute(
        sql(tx.conn).INSERT_INBOX_ITEM,
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
    statements = sql(tx.conn)
    full = tx.conn.execute(statements.BROADCAST_FULL, (sender, limit)).fetchone()
    if full is not None:
        raise errors.Overloaded(f"inbox of {full[0]!r} holds {limit} unacknowledged items", retry_after_ms=1000)
    recipients = sorted(n for (n,) in tx.conn.execute(statements.BROADCAST_COUNT, (sender,)))
    tx.conn.execute(statements.BROADCAST_INSERT, (tx.now_ms, sender, body, sender))
    tx.wakes.teammates.update(recipients)
    return recipients


def inbox_after(conn: sqlite3.Connection, name: str, after_seq: int, limit: int = 64) -> list[InboxItem]:
    rows = conn.execute(
        sql(conn).INBOX_AFTER,
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
        tx.conn.execute(sql(tx.conn).ACK, (through_seq, name))
        tx.wakes.teammates.add(name)  # a gate may have opened
        tx.wakes.may_claim.add(name)
        refresh_status(tx, name)
    return max(acked, through_seq)
