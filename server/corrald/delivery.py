"""What does this teammate get next: design §5 steps 1–4, decided in one place.

`next_for_teammate` is the one function every stream's check asks (Idle and
Session streams, and a completion's handoff). It is the body of a writer job,
so the gates and the claim are decided in one transaction, and it composes
with other jobs' work in the same one. It reads a `StreamView`, the frozen
snapshot of the stream its loop took, and returns a `Delivery`, which the
stream's loop applies. While a gate is closed it writes nothing.

`serve_waiters` and `after_completion` are the handoff: a completion's job
claims for the streams that wait for work (in the order they began to wait)
and then decides the completing teammate's next item, so one transaction
completes a task and claims the next, and dependency → claim costs one commit.

`look` is the same steps 1–3 without writing, for checks that a read can
answer; it defers to the writer whenever a claim is possible. `readable` is
what a read can deliver when the writer cannot commit. The SQL is the
store's; this module only composes it.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Sequence

from .model import (
    BudgetExhausted,
    ClaimGrant,
    ClaimRef,
    Completion,
    DeliveryView,
    HandedClaim,
    TaskRecord,
    TeammateView,
    Usage,
)
from .store import gates, inbox, status, tasks, usage
from .stream import Delivery, ParkedStreams, StreamItem, StreamView
from .txn import PendingOpRecord, Txn, Wakes


def next_for_teammate(
    tx: Txn, name: str, stream: StreamView, *, busy: bool = False, view: DeliveryView | None = None
) -> Delivery:
    """What to send now, in order; no items means "wait". `busy`: its status is stored
    busy already (see `tasks.claim_next`). `view`: the teammate's delivery view as the
    board holds it now, when the job has read it already."""
    checked = _before_claim(tx.conn, name, stream, tx.now_ms, view)
    if checked.found is not None:
        return checked.found
    # 4. Claim while this teammate holds fewer claims than its slots.
    last_expiry = checked.teammate.last_expiry_ms
    if not tx.leases.none_due(tx.now_ms):  # a lease may have run out: reclaimed first (claim_next may not)
        last_expiry = max(last_expiry, tasks.reclaim_expired(tx).get(name, 0))
    alive_ms = stream.last_alive_ms
    if _claims_paused(alive_ms, last_expiry, tx.now_ms):
        return Delivery([], checked.live, can_claim=False, claims_paused=True, alive_ms=alive_ms)
    grant = tasks.claim_next(tx, name, checked.teammate.roles, reclaimed=True, busy=busy)
    can_claim = grant is None or _taken(checked.held, checked.live, stream) + 1 < stream.slots
    return Delivery([grant] if grant else [], checked.live, can_claim=can_claim, claims_paused=False)


def complete_then_next(
    tx: Txn,
    completion: Completion,
    stream: StreamView,
    waiters: ParkedStreams | None,
    spent: Usage | None = None,
    op_record: PendingOpRecord | None = None,
) -> tuple[TaskRecord, Delivery]:
    """A completion and its handoff, in one job: the streams waiting for work (their
    snapshots as the line holds them when the job runs) first, then the teammate's next
    item, decided from `stream`, its stream's snapshot. Its usage is counted first, so a
    completion that spends the budget hands off nothing. `op_record`: the Session op's
    record, which the completion writes (`ops.RecordingBody`)."""
    # The teammate's delivery view comes with the completion where the driver reads it in
    # the completion's own step (PostgreSQL), so the handoff reads it for free.
    done = tasks.complete_claim(tx, completion, status_after=False, usage=spent, view_after=True, op_record=op_record)
    waiting = waiters.snapshot() if waiters is not None else []
    handoff = after_completion(tx, completion.teammate, stream, waiting, ended_claim=done.ended_claim, view=done.view)
    return done.task, handoff


def serve_waiters(tx: Txn, waiters: Sequence[StreamView], *, besides: str = "") -> bool:
    """Claims, for each stream waiting for work (in the order they began to wait), the
    first ready task it may take, inside this job; each claim goes out on its stream
    (`Wakes.handed`). Every claim is decided by `next_for_teammate` from what is
    committed: a waiter whose gates shut, whose slots filled, or that has inbox
    items or held claims still to send since it parked gets nothing here, and its
    own check (it was woken by that change) decides. `besides` is skipped (the
    completing teammate, served last). Says whether it checked any waiter (a check
    may reclaim expired leases, anyone's)."""
    waiters = [stream for stream in waiters if stream.name != besides]  # a stream that ends leaves the line
    if not waiters or not tasks.any_ready(tx.conn, {role for stream in waiters for role in stream.roles}):
        return False
    checked = False
    for stream in waiters:
        if not tasks.any_ready(tx.conn, stream.roles, stream.name):
            continue
        checked = True
        found = next_for_teammate(tx, stream.name, stream)
        if found.can_claim is None or not found.items:
            continue  # steps 1-2 had something to send first, or the gates or slots said no
        (grant,) = found.items
        assert isinstance(grant, ClaimGrant)
        tx.wakes.handed.setdefault(stream.name, []).append(HandedClaim(grant, bool(found.can_claim)))
        _handed_off(tx, grant)
    return checked


def after_completion(
    tx: Txn,
    name: str,
    stream: StreamView,
    waiters: Sequence[StreamView],
    *,
    ended_claim: bool,
    view: DeliveryView | None = None,
) -> Delivery:
    """The completing teammate's next item, decided in its completion's job (which ran
    `tasks.complete_claim` with `status_after=False`; `ended_claim` is what it
    returned: the teammate is stored busy, and a claim that follows keeps it so)
    once the waiters took what they may (waiters first, so a busy teammate never
    starves one that waits). The answer is a whole check: its stream sends it,
    and needs no wake-up for the slot the completion freed. `view`: the teammate's
    delivery view as the completion left it, read in the completion's statement;
    it is read again if a waiter's check came between."""
    if serve_waiters(tx, waiters, besides=name):
        view = None
    found = next_for_teammate(tx, name, stream, busy=ended_claim, view=view)
    tx.wakes.may_claim.discard(name)
    tx.wakes.teammates.discard(name)
    grant = found.items[0] if found.can_claim is not None and found.items else None
    if isinstance(grant, ClaimGrant):  # step 4 sends only its claim
        _handed_off(tx, grant)
    else:
        status.refresh_status(tx, name)  # no claim followed: idle, waiting or gated now
    return found


def views_touched(wakes: Wakes) -> set[str] | None:
    """Whose delivery views (`tasks.view_for_delivery`) a job may have changed, as its
    wake-ups show: their inbox, claims, gates or streams; None for anyone's."""
    if wakes.everyone:
        return None
    return (
        wakes.teammates
        | wakes.may_claim
        | wakes.handed.keys()
        | wakes.claims_ended.keys()
        | wakes.ended.keys()
        | wakes.exhausted.keys()
        | wakes.streams_opened
    )


def _handed_off(tx: Txn, grant: ClaimGrant) -> None:
    tx.wakes.tally["handoffs"] += 1
    # A task this job made ready and then claimed wakes no one else for it; a task
    # that was ready before (and its wake-up) is left alone.
    if grant.task.seq in tx.made_ready:
        tx.made_ready.discard(grant.task.seq)
        role = grant.task.required_role
        if tx.wakes.ready_roles.get(role, 0) > 0:
            tx.wakes.ready_roles[role] -= 1


def look(conn: sqlite3.Connection, name: str, stream: StreamView, now_ms: int) -> Delivery | None:
    """Steps 1–3 without writing, on any connection (a reader's).

    Returns what `next_for_teammate` would send, or None when only the writer
    can decide: a task this teammate may take is ready, or a lease has run out
    and must be reclaimed first, or a time gate is due and must be opened. So a stream that finds nothing to do, or a
    gate shut, costs one read instead of a writer transaction.
    """
    checked = _before_claim(conn, name, stream, now_ms)
    if checked.found is not None:
        return checked.found
    if tasks.any_lease_ended(conn, now_ms) or tasks.any_gate_due(conn, now_ms):
        return None
    alive_ms = stream.last_alive_ms
    if _claims_paused(alive_ms, checked.teammate.last_expiry_ms, now_ms):
        return Delivery([], checked.live, can_claim=False, claims_paused=True, alive_ms=alive_ms)
    if tasks.any_ready(conn, checked.teammate.roles, name):
        return None
    # As after a claim attempt that found nothing: a task becoming ready wakes this stream.
    return Delivery([], checked.live, can_claim=True, claims_paused=False)


def readable(conn: sqlite3.Connection, name: str, stream: StreamView, now_ms: int) -> Delivery:
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
    held: list[ClaimRef]  # its live claims
    live: frozenset[str]  # their tokens


def _before_claim(
    conn: sqlite3.Connection, name: str, stream: StreamView, now_ms: int, view: DeliveryView | None = None
) -> _Checked:
    """Steps 1–3, on `view` if the caller read it already."""
    teammate, held = view if view is not None else tasks.view_for_delivery(conn, name, now_ms)
    live = frozenset(ref.token for ref in held)
    if stream.epoch is not None and teammate.stream_epoch != stream.epoch:
        # A newer stream opened, perhaps on another daemon that has not told this one
        # yet: everything goes to that stream, so none of it can reach the old one.
        return _Checked(Delivery([], live, can_claim=False, superseded=True), teammate, held, live)
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
    # Only an item after `acked` can be an unacknowledged protocol message: none, no read.
    if teammate.shutdown_pending or (teammate.last_seq > acked and gates.protocol_unacked(conn, name, acked)):
        return shut
    if teammate.require_plan and not gates.plan_approved(conn, name, acked):
        return shut
    if teammate.budget_spent:  # held claims stay; no new one until the lead raises the budget
        if stream.budget_notice is None:  # opened behind the closed gate: it hears why first
            spent, budget = usage.of_teammate(conn, name)
            notice = BudgetExhausted(name, spent, budget)
            return _Checked(Delivery([notice], live, can_claim=False), teammate, held, live)
        return shut
    if _taken(held, live, stream) >= stream.slots:
        return shut
    return _Checked(None, teammate, held, live)


def _taken(held: list[ClaimRef], live: frozenset[str], stream: StreamView) -> int:
    """Slots taken: its live claims, and the claims whose slots the teammate has not freed
    (a stream opened with hold_slots_until_freed) that are not live any more."""
    return len(held) + len(stream.busy_tokens - live)


def _claims_paused(alive_ms: int | None, last_expiry_ms: int, now_ms: int) -> bool:
    """A teammate silent since one of its leases ran out may be frozen: no claim until it shows life.
    `alive_ms` is its last call of its own (None: alive now)."""
    return last_expiry_ms > (now_ms if alive_ms is None else alive_ms)
