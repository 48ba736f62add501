"""What does this teammate get next: design §5 steps 1–4, decided in one place.

`next_for_teammate` is the one function a stream loop asks (the Idle stream
now; a bidirectional Session stream and a completion's handoff will ask it
too). It is the body of a writer job, so the gates and the claim are decided
in one transaction, and it composes with other jobs' work in the same one. It
reads the stream's state and never writes it: it returns a `Delivery`, which
the stream loop applies. While a gate is closed it writes nothing.

`look` is the same steps 1–3 without writing, for checks that a read can
answer; it defers to the writer whenever a claim is possible. `readable` is
what a read can deliver when the writer cannot commit. The SQL is the
store's; this module only composes it.
"""

from __future__ import annotations

import dataclasses
import sqlite3

from .model import TeammateView, Txn
from .store import gates, inbox, tasks, team
from .stream import Delivery, StreamItem, StreamState


def next_for_teammate(tx: Txn, name: str, stream: StreamState) -> Delivery:
    """What to send now, in order; no items means "wait"."""
    checked = _before_claim(tx.conn, name, stream, tx.now_ms)
    if checked.found is not None:
        return checked.found
    # 4. Claim while this teammate holds fewer claims than its slots.
    last_expiry = max(checked.teammate.last_expiry_ms, tasks.reclaim_expired(tx).get(name, 0))
    alive_ms = stream.last_alive_ms
    if _claims_paused(alive_ms, last_expiry, tx.now_ms):
        return Delivery([], checked.live, can_claim=False, claims_paused=True, alive_ms=alive_ms)
    grant = tasks.claim_next(tx, name, checked.teammate.roles, reclaimed=True)
    can_claim = grant is None or len(checked.held) + 1 < stream.slots
    return Delivery([grant] if grant else [], checked.live, can_claim=can_claim, claims_paused=False)


def look(conn: sqlite3.Connection, name: str, stream: StreamState, now_ms: int) -> Delivery | None:
    """Steps 1–3 without writing, on any connection (a reader's).

    Returns what `next_for_teammate` would send, or None when only the writer
    can decide: a task this teammate may take is ready, or a lease has run out
    and must be reclaimed first. So a stream that finds nothing to do, or a
    gate shut, costs one read instead of a writer transaction.
    """
    checked = _before_claim(conn, name, stream, now_ms)
    if checked.found is not None:
        return checked.found
    if tasks.any_lease_ended(conn, now_ms):
        return None
    alive_ms = stream.last_alive_ms
    if _claims_paused(alive_ms, checked.teammate.last_expiry_ms, now_ms):
        return Delivery([], checked.live, can_claim=False, claims_paused=True, alive_ms=alive_ms)
    if tasks.any_ready(conn, checked.teammate.roles):
        return None
    # As after a claim attempt that found nothing: a task becoming ready wakes this stream.
    return Delivery([], checked.live, can_claim=True, claims_paused=False)


def readable(conn: sqlite3.Connection, name: str, stream: StreamState, now_ms: int) -> Delivery:
    """Steps 1–3 on a read, for when the writer cannot commit (a full disk).

    Held claims are re-sent and inbox items delivered from what is stored;
    there is never a new claim here, so no claim passes a gate (§2 invariant 5).
    Nothing else to send means wait, as behind a shut gate."""
    checked = _before_claim(conn, name, stream, now_ms)
    return checked.found if checked.found is not None else Delivery([], checked.live)


@dataclasses.dataclass(frozen=True, slots=True)
class _Checked:
    found: Delivery | None  # None when step 4 may claim
    teammate: TeammateView
    held: list[tasks.ClaimRef]  # its live claims
    live: frozenset[str]  # their tokens


def _before_claim(conn: sqlite3.Connection, name: str, stream: StreamState, now_ms: int) -> _Checked:
    """Steps 1–3."""
    teammate = team.view_for_delivery(conn, name)
    held = tasks.held_claim_refs(conn, name, now_ms)
    live = frozenset(ref.token for ref in held)
    sent = stream.sent_tokens & live  # a claim that ended is forgotten (see StreamState.learned)
    # 1. Claims this teammate holds but this stream has not sent (a new stream re-sends all).
    resend = [ref for ref in held if ref.token not in sent]
    if resend:
        return _Checked(Delivery([tasks.grant(conn, ref) for ref in resend], live), teammate, held, live)
    # 2. Inbox items after what this stream sent, starting at the acknowledged sequence.
    acked = teammate.acked_seq
    after = acked if stream.sent_through_seq is None else max(stream.sent_through_seq, acked)
    if teammate.last_seq > after:
        items: list[StreamItem] = [*inbox.inbox_after(conn, name, after)]
        return _Checked(Delivery(items, live), teammate, held, live)
    # 3. The gates sit before the claim: control always beats the task board.
    shut = _Checked(Delivery([], live, can_claim=False), teammate, held, live)
    if teammate.shutdown_pending or gates.protocol_unacked(conn, name, acked, teammate.last_seq):
        return shut
    if teammate.require_plan and not gates.plan_approved(conn, name, acked):
        return shut
    if len(held) >= stream.slots:
        return shut
    return _Checked(None, teammate, held, live)


def _claims_paused(alive_ms: int | None, last_expiry_ms: int, now_ms: int) -> bool:
    """A teammate silent since one of its leases ran out may be frozen: no claim until it shows life.
    `alive_ms` is its last call of its own (None: alive now)."""
    return last_expiry_ms > (now_ms if alive_ms is None else alive_ms)
