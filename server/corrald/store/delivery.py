"""What a teammate may receive now: design §5 steps 1–4 in one place.

The Idle stream (and, later, a bidirectional Session stream) calls this one
function; it runs as a single writer job so the gates and the claim are
decided in the same transaction. While a gate is closed it writes nothing.
"""

from __future__ import annotations

import dataclasses
import json

from .. import errors
from . import tasks, team
from .model import ClaimGrant, InboxItem, Txn


@dataclasses.dataclass
class StreamCursor:
    """What one Idle stream has already sent; a new stream starts empty."""

    slots: int
    sent_tokens: set[str] = dataclasses.field(default_factory=set)
    sent_through_seq: int | None = None
    # Whether the last check found the gates open and a free slot: only such
    # streams are woken when a task becomes ready.
    can_claim: bool = True
    # The teammate's last call of its own (opening the stream counts), daemon
    # clock. A teammate silent since one of its leases ran out may be frozen
    # with its stream open: it gets no new claim until it shows life.
    # None means "alive now" (a caller that does not track it).
    last_alive_ms: int | None = None
    claims_paused: bool = False


Delivery = ClaimGrant | InboxItem


def next_for_teammate(tx: Txn, name: str, cursor: StreamCursor) -> list[Delivery]:
    """Returns what to send now, in order; an empty list means "wait"."""
    row = tx.conn.execute(
        "SELECT roles, require_plan, removed, acked_seq, last_seq, last_expiry_ms FROM teammates WHERE name = ?",
        (name,),
    ).fetchone()
    if row is None or row[2]:
        raise errors.Unauthenticated(f"teammate {name!r} was removed")
    roles, require_plan, _, acked, last, last_expiry = row
    held = tasks.held_claim_refs(tx.conn, name, tx.now_ms)
    cursor.sent_tokens.intersection_update(ref.token for ref in held)  # forget ended claims
    # 1. Claims this teammate holds but this stream has not sent (a new stream re-sends all).
    resend = [ref for ref in held if ref.token not in cursor.sent_tokens]
    if resend:
        return [tasks.grant(tx.conn, ref) for ref in resend]
    # 2. Inbox items after what this stream sent, starting at the acknowledged sequence.
    after = acked if cursor.sent_through_seq is None else max(cursor.sent_through_seq, acked)
    if last > after:
        return list(team.inbox_after(tx.conn, name, after))
    cursor.can_claim = False
    # 3. The gates sit before the claim: control always beats the task board.
    if team.protocol_pending(tx.conn, name, acked, last):
        return []
    if require_plan and not team.plan_approved(tx.conn, name, acked):
        return []
    # 4. Claim while this teammate holds fewer claims than its slots.
    if len(held) >= cursor.slots:
        return []
    last_expiry = max(last_expiry, tasks.reclaim_expired(tx).get(name, 0))
    alive_ms = tx.now_ms if cursor.last_alive_ms is None else cursor.last_alive_ms
    cursor.claims_paused = last_expiry > alive_ms
    if cursor.claims_paused:
        return []
    grant = tasks.claim_next(tx, name, json.loads(roles), reclaimed=True)
    cursor.can_claim = grant is None or len(held) + 1 < cursor.slots
    return [grant] if grant else []


def settled(cursor: StreamCursor, sent: list[Delivery]) -> bool:
    """True when, after sending `sent`, asking again now would find nothing.

    That holds right after a fresh claim filled the last slot: the same check
    found the inbox empty and the gates open, and any later change wakes the
    stream. Skipping that empty re-check saves a writer job per claim.
    """
    return len(sent) == 1 and isinstance(sent[0], ClaimGrant) and not cursor.can_claim


def mark_sent(cursor: StreamCursor, sent: list[Delivery]) -> None:
    for item in sent:
        if isinstance(item, ClaimGrant):
            cursor.sent_tokens.add(item.token)
        else:
            cursor.sent_through_seq = max(cursor.sent_through_seq or 0, item.seq)
