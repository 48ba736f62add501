"""One stream's state (StreamState) as the delivery decision and the wake hub share it.

The decision runs in the writer while the stream's teammate may make a call of
its own on the event loop; these tests play that interleaving step by step.
"""

from __future__ import annotations

import pytest

from corrald import delivery
from corrald.model import Budget, BudgetExhausted, ClaimEnd, ClaimEndReason, Usage
from corrald.stream import Check, Claims, StreamState
from tests.support.boardkit import spec

pytestmark = pytest.mark.timeout(30)


def frozen_teammate(board, clock) -> StreamState:
    """w1 opened its stream, took task "a", then stayed silent past its lease, which
    was reclaimed: the stream it still has open gets no new claim until it shows life."""
    board.add("w1")
    board.create(spec("a", lease_ms=1000))
    stream = StreamState("w1", slots=1, opened_ms=clock.now_ms())
    (grant,) = board.next_for("w1", stream)
    assert grant.task.id == "a"
    clock.advance(1000)
    board.reap()
    return stream


def test_a_teammate_silent_since_its_lease_ran_out_gets_no_claim_until_it_shows_life(board, clock):
    stream = frozen_teammate(board, clock)
    assert board.next_for("w1", stream) == []
    assert stream.claims_paused and not stream.event.is_set()
    stream.showed_life(clock.now_ms())
    assert stream.check_due is Check.CLAIM and stream.event.is_set()
    (again,) = board.next_for("w1", stream)
    assert again.task.id == "a" and again.attempt == 2 and not stream.claims_paused


def test_life_shown_while_a_check_pauses_claims_wakes_the_stream(board, clock):
    """The check read the teammate's last call before the call arrived, so it pauses
    claims; the call saw no pause yet, so it woke nobody. Applying the check must."""
    stream = frozen_teammate(board, clock)
    found = board.call(lambda tx: delivery.next_for_teammate(tx, "w1", stream.view()))  # the check, in the writer
    assert found.claims_paused and found.items == []
    stream.showed_life(clock.now_ms())  # the call, on the loop, while the check is in flight
    assert not stream.event.is_set()  # nothing was paused yet as far as the stream knew
    stream.learned(found)
    assert stream.claims_paused and stream.check_due is Check.CLAIM and stream.event.is_set()
    (again,) = board.next_for("w1", stream)  # the re-check that wake-up causes
    assert again.task.id == "a" and not stream.claims_paused


def test_a_paused_check_with_no_call_since_wakes_nobody(board, clock):
    stream = frozen_teammate(board, clock)
    found = board.call(lambda tx: delivery.next_for_teammate(tx, "w1", stream.view()))
    stream.learned(found)
    assert stream.claims_paused and stream.check_due is Check.NONE and not stream.event.is_set()


def test_a_budget_notice_goes_out_once_however_it_reaches_the_stream() -> None:
    stream = StreamState("w1", slots=1)
    notice = BudgetExhausted("w1", Usage(cost_micros=10), Budget(max_cost_micros=10))
    # Handed by the commit that closed the gate and found by the same completion's check.
    assert stream.unsent([notice, notice]) == [notice]
    stream.mark_sent([notice])
    assert stream.unsent([notice]) == []
    # The gate closed again later (the budget was raised, then spent): a new notice.
    again = BudgetExhausted("w1", Usage(cost_micros=30), Budget(max_cost_micros=30))
    assert stream.unsent([again]) == [again]


def test_a_handoff_overtaken_by_its_claims_end_is_never_sent(board, clock) -> None:
    # A completion's job handed w1 task "a"; before its reply resumed the caller, a
    # commit elsewhere (a cancel through another daemon) ended that claim, and the
    # stream sent the notice. The late handoff must not send the dead claim.
    board.add("w1")
    board.create(spec("a"))
    stream = StreamState("w1", slots=1, opened_ms=clock.now_ms())
    (grant,) = board.next_for("w1", stream)
    stream.claim_ended(ClaimEnd("a", grant.token, ClaimEndReason.TASK_CANCELED))
    assert [end.token for end in stream.take_claims_ended()] == [grant.token]
    stream.take_check()  # as the check after the notice, which found a free slot
    stream.claims = Claims.OPEN
    stream.hand(delivery.Delivery([grant], frozenset(), can_claim=False))
    assert stream.take_handed() == []
    assert stream.can_claim, "the dead claim's slot is free: the stale handoff does not fill it"
    assert stream.check_due is Check.CLAIM, "what the handoff said of the slots is stale: it looks again"
