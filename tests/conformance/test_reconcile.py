"""The reconciler: claims that ended under a holder while this daemon heard nothing of it
are told to the holder's stream from the claim history, once, with the history's reason;
a removed teammate's stream ends. On a real board; the endings' own notices go nowhere,
as those of another daemon's commits do while this one's listener is down."""

from __future__ import annotations

import pytest

from corrald.model import ClaimEnd, ClaimEndReason, Completion
from corrald.reconcile import Reconciler
from corrald.store import tasks, team
from corrald.stream import Delivery
from corrald.wake import WakeHub
from tests.support.boardkit import spec
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.timeout(30)


def _hub(board, clock) -> WakeHub:
    return WakeHub(board.loop, lambda deadline_ms: None, clock)


def test_claims_ended_unheard_are_told_once_in_claim_order_and_the_holders_own_endings_not(board, clock):
    board.add("w1")
    board.create(*(spec(task_id) for task_id in ("rev", "can", "own", "live")))
    grants = {task_id: board.claim("w1") for task_id in ("rev", "can", "own", "live")}
    tokens = {task_id: grant.token for task_id, grant in grants.items()}
    hub = _hub(board, clock)
    stream = hub.register("w1", ())
    stream.mark_sent(list(grants.values()))
    reconciler = Reconciler(board.board, hub)
    assert board.run(reconciler.reconcile()) == 0  # nothing ended yet

    board.call(lambda tx: tasks.revoke(tx, "rev", "taken back"))
    board.call(lambda tx: tasks.cancel(tx, ["can"]))
    board.call(lambda tx: tasks.complete(tx, Completion("w1", "own", tokens["own"], b"")))
    # A check ran before anyone told it: it found "can" gone, and forgot it had sent it.
    stream.learned(Delivery([], frozenset({tokens["rev"], tokens["own"], tokens["live"]})))
    assert tokens["can"] not in stream.sent_tokens

    assert board.run(reconciler.reconcile()) == 2
    assert board.run(reconciler.reconcile()) == 0  # told already, not again
    assert stream.take_claims_ended() == [
        ClaimEnd("rev", tokens["rev"], ClaimEndReason.REVOKED, "taken back"),
        ClaimEnd("can", tokens["can"], ClaimEndReason.TASK_CANCELED, "canceled by the lead"),
    ]
    assert stream.sent_tokens == {tokens["live"]}  # the completion is the teammate's own: no notice
    assert stream.held_tokens() == {tokens["live"]}
    assert board.run(reconciler.reconcile()) == 0
    # A notice that also comes with its commit (by NOTIFY, after the pass) is not told twice.
    stream.claim_ended(ClaimEnd("rev", tokens["rev"], ClaimEndReason.REVOKED, "taken back"))
    assert stream.take_claims_ended() == []
    assert stream.ended is None


def test_a_teammate_removed_unheard_hears_of_its_claims_and_its_stream_ends(board, clock):
    board.add("w1")
    board.add("w2")
    board.create(spec("held"))
    grant = board.claim("w1")
    hub = _hub(board, clock)
    stream, other = hub.register("w1", ()), hub.register("w2", ())
    stream.mark_sent([grant])
    board.call(lambda tx: team.remove_teammate(tx, "w1"))
    assert board.run(Reconciler(board.board, hub).reconcile()) == 1
    assert stream.take_claims_ended() == [
        ClaimEnd("held", grant.token, ClaimEndReason.TEAMMATE_REMOVED, "teammate 'w1' was removed")
    ]
    assert stream.ended == "removed" and other.ended is None


def test_a_handed_claim_that_ended_unheard_is_never_sent(board, clock):
    board.add("w1")
    board.create(spec("t"))
    grant = board.claim("w1")
    hub = _hub(board, clock)
    stream = hub.register("w1", ())
    stream.hand(Delivery([grant], frozenset()))
    board.call(lambda tx: tasks.revoke(tx, "t", ""))
    assert board.run(Reconciler(board.board, hub).reconcile()) == 0  # it never had the claim: nothing to tell
    assert stream.take_handed() == []
    stream.hand(Delivery([grant], frozenset()))  # the same handoff arriving late
    assert stream.take_handed() == []


def test_the_audit_tells_what_nobody_asked_about(board, clock):
    # A commit of this daemon answered in doubt that did commit: nothing asks for a pass.
    board.add("w1")
    board.create(spec("t"))
    grant = board.claim("w1")
    hub = _hub(board, clock)
    stream = hub.register("w1", ())
    stream.mark_sent([grant])
    board.call(lambda tx: tasks.revoke(tx, "t", "in doubt"))

    async def audited() -> list[ClaimEnd]:
        reconciler = Reconciler(board.board, hub, audit_s=0.05)
        reconciler.start()
        try:
            await wait_until_async(lambda: stream.claims_ended, 10, "the audit's notice")
        finally:
            await reconciler.close()
        return stream.take_claims_ended()

    assert board.run(audited()) == [ClaimEnd("t", grant.token, ClaimEndReason.REVOKED, "in doubt")]
