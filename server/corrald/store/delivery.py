"""What a teammate may receive now: design §5 steps 1–4 in one place.

The Idle stream (and, later, a bidirectional Session stream) calls
`next_for_teammate`; it runs as a single writer job so the gates and the claim
are decided in the same transaction. While a gate is closed it writes nothing.
`look` is the same steps 1–3 without writing, for checks that can be answered
by a read; it defers to the writer whenever a claim is possible.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3

from .. import errors
from ..model import ClaimGrant, InboxItem, Txn
from . import gates, inbox, tasks


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
    found, teammate, held = _before_claim(tx.conn, name, cursor, tx.now_ms)
    if found is not None:
        return found
    # 4. Claim while this teammate holds fewer claims than its slots.
    last_expiry = max(teammate.last_expiry_ms, tasks.reclaim_expired(tx).get(name, 0))
    if _pause_claims(cursor, last_expiry, tx.now_ms):
        return []
    grant = tasks.claim_next(tx, name, teammate.roles, reclaimed=True)
    cursor.can_claim = grant is None or len(held) + 1 < cursor.slots
    return [grant] if grant else []


def look(conn: sqlite3.Connection, name: str, cursor: StreamCursor, now_ms: int) -> list[Delivery] | None:
    """Steps 1–3 without writing, on any connection (a reader's).

    Returns what `next_for_teammate` would send, or None when only the writer
    can decide: a task this teammate may take is ready, or a lease has run out
    and must be reclaimed first. So a stream that finds nothing to do, or a
    gate shut, costs one read instead of a writer transaction.
    """
    found, teammate, _ = _before_claim(conn, name, cursor, now_ms)
    if found is not None:
        return found
    if tasks.any_lease_ended(conn, now_ms):
        return None
    if _pause_claims(cursor, teammate.last_expiry_ms, now_ms):
        return []
    if tasks.any_ready(conn, teammate.roles):
        return None
    cursor.can_claim = True  # as after a claim attempt that found nothing
    return []


@dataclasses.dataclass(frozen=True, slots=True)
class _Teammate:
    roles: list[str]
    last_expiry_ms: int


def _before_claim(conn: sqlite3.Connection, name: str, cursor: StreamCursor,
                  now_ms: int) -> tuple[list[Delivery] | None, _Teammate, list[tasks.ClaimRef]]:
    """Steps 1–3. Returns (what to send, or None when step 4 may claim; the teammate; its live claims)."""
    row = conn.execute(
        "SELECT roles, require_plan, removed, acked_seq, last_seq, last_expiry_ms FROM teammates WHERE name = ?",
        (name,),
    ).fetchone()
    if row is None or row[2]:
        raise errors.Unauthenticated(f"teammate {name!r} was removed")
    roles, require_plan, _, acked, last, last_expiry = row
    teammate = _Teammate(json.loads(roles), last_expiry)
    held = tasks.held_claim_refs(conn, name, now_ms)
    cursor.sent_tokens.intersection_update(ref.token for ref in held)  # forget ended claims
    # 1. Claims this teammate holds but this stream has not sent (a new stream re-sends all).
    resend = [ref for ref in held if ref.token not in cursor.sent_tokens]
    if resend:
        return [tasks.grant(conn, ref) for ref in resend], teammate, held
    # 2. Inbox items after what this stream sent, starting at the acknowledged sequence.
    after = acked if cursor.sent_through_seq is None else max(cursor.sent_through_seq, acked)
    if last > after:
        return list(inbox.inbox_after(conn, name, after)), teammate, held
    cursor.can_claim = False
    # 3. The gates sit before the claim: control always beats the task board.
    if gates.protocol_pending(conn, name, acked, last):
        return [], teammate, held
    if require_plan and not gates.plan_approved(conn, name, acked):
        return [], teammate, held
    if len(held) >= cursor.slots:
        return [], teammate, held
    return None, teammate, held


def _pause_claims(cursor: StreamCursor, last_expiry_ms: int, now_ms: int) -> bool:
    """A teammate silent since one of its leases ran out may be frozen: no claim until it shows life."""
    alive_ms = now_ms if cursor.last_alive_ms is None else cursor.last_alive_ms
    cursor.claims_paused = last_expiry_ms > alive_ms
    return cursor.claims_paused


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
