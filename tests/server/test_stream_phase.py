"""A stream's phase machine (`stream.Phase`) and the state around it, on their own.

Every move `NEXT_PHASES` does not list is refused and changes nothing; random
sequences of what the loop, the wake hub and the board's callers do to a stream
keep its invariants (hypothesis).
"""

from __future__ import annotations

import asyncio
import itertools

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from corrald.model import ClaimEnd, ClaimEndReason, ClaimGrant
from corrald.stream import (
    NEXT_PHASES,
    Check,
    Claims,
    Delivery,
    IllegalTransition,
    ParkedStreams,
    Phase,
    StreamState,
    claims_after,
)
from tests.support.boardkit import claim_grant

pytestmark = pytest.mark.timeout(120)

# A legal way into each phase from NEW.
PATH_TO = {
    Phase.NEW: [],
    Phase.ACTIVE: [Phase.ACTIVE],
    Phase.WAITING: [Phase.ACTIVE, Phase.WAITING],
    Phase.ENDED: [],  # through end()
}

MOVES = list(itertools.product(Phase, Phase))
LEGAL = [(at, to) for at, to in MOVES if to in NEXT_PHASES[at]]
ILLEGAL = [(at, to) for at, to in MOVES if to not in NEXT_PHASES[at]]
LOOP_MOVES = [(at, to) for at, to in LEGAL if to is not Phase.ENDED]  # the loop's `to`; `end` ends


def stream_in(phase: Phase) -> StreamState:
    stream = StreamState("w1")
    for step in PATH_TO[phase]:
        stream.to(step)
    if phase is Phase.ENDED:
        stream.end("removed")
    assert stream.phase is phase
    return stream


def test_every_phase_is_reachable_and_ended_leads_nowhere():
    assert set(PATH_TO) == set(Phase) == set(NEXT_PHASES)
    assert NEXT_PHASES[Phase.ENDED] == frozenset()
    assert all(Phase.NEW not in NEXT_PHASES[phase] for phase in Phase), "no way back to NEW"
    assert all(Phase.ENDED in NEXT_PHASES[phase] for phase in Phase if phase is not Phase.ENDED), "any phase may end"


@pytest.mark.parametrize(("at", "to"), ILLEGAL, ids=[f"{at.name}->{to.name}" for at, to in ILLEGAL])
def test_an_illegal_move_is_refused_and_changes_nothing(at, to):
    stream = stream_in(at)
    with pytest.raises(IllegalTransition) as refused:
        stream.to(to)
    assert stream.phase is at and (refused.value.at, refused.value.to) == (at, to)


@pytest.mark.parametrize(("at", "to"), LOOP_MOVES, ids=[f"{at.name}->{to.name}" for at, to in LOOP_MOVES])
def test_a_legal_move_is_made(at, to):
    stream = stream_in(at)
    stream.to(to)
    assert stream.phase is to


@pytest.mark.parametrize("at", [phase for phase in Phase if phase is not Phase.ENDED])
def test_only_end_ends_a_stream_so_it_always_says_why(at):
    stream = stream_in(at)
    with pytest.raises(IllegalTransition):
        stream.to(Phase.ENDED)
    assert stream.phase is at and stream.ended is None


@pytest.mark.parametrize("at", list(Phase))
def test_end_ends_from_any_phase_and_the_last_reason_stands(at):
    stream = stream_in(at)
    stream.end("superseded", superseded=True)
    stream.end("daemon draining")
    assert stream.phase is Phase.ENDED and stream.ended == "daemon draining" and not stream.superseded
    assert stream.event.is_set()


@pytest.mark.parametrize("now", list(Claims))
@pytest.mark.parametrize("can_claim", [None, False, True])
@pytest.mark.parametrize("paused", [None, False, True])
def test_what_a_check_found_about_claiming(now, can_claim, paused):
    after = claims_after(now, can_claim, paused)
    if paused:
        assert after is Claims.PAUSED
    elif can_claim:
        assert after is Claims.OPEN
    elif can_claim is False:
        assert after is (Claims.PAUSED if now is Claims.PAUSED and paused is None else Claims.SHUT)
    elif paused is False and now is Claims.PAUSED:
        assert after is Claims.SHUT  # no longer paused, and a check said nothing of the slots
    else:
        assert after is now  # the check stopped before the claim step: nothing learned


def test_a_stronger_ask_to_check_wins_and_taking_it_clears_it():
    stream = StreamState("w1")
    stream.ask_check(claim_likely=True)
    stream.ask_check()
    assert stream.check_due is Check.CLAIM
    assert stream.take_check() is Check.CLAIM and stream.check_due is Check.NONE


def test_an_ended_stream_leaves_the_line_of_waiting_streams():
    line = ParkedStreams()
    stream = StreamState("w1")
    line.park(stream)
    assert [view.name for view in line.snapshot()] == ["w1"] and stream.line is line
    stream.end("left")
    assert line.snapshot() == [] and stream.line is None


def test_a_stream_fed_by_handoffs_forgets_each_claim_its_teammate_ends():
    """A Session cycling complete-then-handoff may see no check for a long time: each
    claim the teammate ends itself is forgotten then, so the stream's snapshot holds its
    live claims only, not every token it ever sent."""
    loop = asyncio.new_event_loop()  # StreamState's event wants one to exist
    asyncio.set_event_loop(loop)
    try:
        stream = StreamState("w1", slots=1, opened_ms=0)
        stream.mark_sent([claim_grant("c0", task_id="c0")])
        for n in range(1, 200):
            previous, token = f"c{n - 1}", f"c{n}"
            assert stream.view(finishing=previous).sent_tokens == {previous}
            stream.finished(previous, check=False)
            stream.hand(Delivery([claim_grant(token, task_id=token)], frozenset(), can_claim=False))
            stream.mark_sent(stream.take_handed())
        assert stream.view().sent_tokens == {"c199"}
        assert stream.held_tokens() == {"c199"}
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def test_freeing_a_slot_alone_keeps_the_claim_as_sent():
    """FreeSlot frees a slot of a claim that may still be live: its end is still to be told."""
    stream = StreamState("w1", slots=1, opened_ms=0)
    stream.hold_slots = True  # opened with hold_slots_until_freed
    stream.mark_sent([claim_grant("c0", task_id="c0")])
    stream.free_slot("c0", check=False)
    assert stream.sent_tokens == {"c0"} and stream.view().busy_tokens == frozenset()


TOKENS = [f"t{i}" for i in range(6)]


class StreamMachine(RuleBasedStateMachine):
    """What the loop, the wake hub and the board's callers do to one stream, in any order."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()  # StreamState's event wants one to exist
        asyncio.set_event_loop(self.loop)
        self.stream = StreamState("w1", slots=2, opened_ms=0)
        self.line = ParkedStreams()
        self.told: set[str] = set()  # tokens whose end the loop has sent
        self.was_ended = False

    def teardown(self) -> None:
        asyncio.set_event_loop(None)
        self.loop.close()

    # ------------------------------------------------------------ the loop

    @rule()
    def loop_turns(self):
        """A turn: it clears its event, then takes all its mailbox holds and any asked-for check."""
        stream = self.stream
        if stream.phase in (Phase.NEW, Phase.WAITING):
            stream.to(Phase.ACTIVE)
        stream.event.clear()
        self.told |= {end.token for end in stream.take_claims_ended()}
        handed = stream.take_handed()
        assert not {item.token for item in handed if isinstance(item, ClaimGrant)} & self.told
        stream.mark_sent(handed)
        stream.take_check()

    @rule()
    def loop_waits(self):
        stream = self.stream
        if stream.phase is not Phase.ACTIVE:
            return
        if stream.claims is Claims.OPEN:
            self.line.park(stream)
        elif stream.line is not None:
            self.line.leave(stream)
        stream.to(Phase.WAITING)

    @rule(live=st.sets(st.sampled_from(TOKENS)), can_claim=st.sampled_from([None, False, True]), paused=st.booleans())
    def a_check_is_learned(self, live, can_claim, paused):
        found = Delivery([], frozenset(live), can_claim=False if paused else can_claim, claims_paused=paused)
        self.stream.learned(found)

    @rule(token=st.sampled_from(TOKENS))
    def the_loop_sends_a_claim(self, token):
        if token not in self.told:
            self.stream.mark_sent([claim_grant(token, task_id=token)])

    @rule(to=st.sampled_from(list(Phase)))
    def any_move(self, to):
        before = self.stream.phase
        if to in NEXT_PHASES[before] and to is not Phase.ENDED:
            self.stream.to(to)
            assert self.stream.phase is to
        else:
            with pytest.raises(IllegalTransition):
                self.stream.to(to)
            assert self.stream.phase is before

    # ------------------------------------------------------------ posted by the hub and the board's callers

    @rule(token=st.sampled_from(TOKENS), can_claim=st.sampled_from([None, False, True]))
    def a_handoff_arrives(self, token, can_claim):
        self.stream.hand(
            Delivery([claim_grant(token, task_id=token)], frozenset(), can_claim=can_claim, claims_paused=False)
        )

    @rule(token=st.sampled_from(TOKENS))
    def the_teammate_ends_its_claim(self, token):
        self.stream.finished(token)
        assert token not in self.stream.sent_tokens and token not in self.stream.view().sent_tokens

    @rule(token=st.sampled_from(TOKENS))
    def a_claim_ends_under_it(self, token):
        self.stream.claim_ended(ClaimEnd(token, token, ClaimEndReason.TASK_CANCELED))

    @rule(claim_likely=st.booleans())
    def the_board_asks_for_a_check(self, claim_likely):
        self.stream.ask_check(claim_likely=claim_likely)

    @rule(now=st.integers(0, 10))
    def the_teammate_shows_life(self, now):
        self.stream.showed_life(now)

    @rule(superseded=st.booleans())
    def it_is_told_to_end(self, superseded):
        self.stream.end("superseded" if superseded else "removed", superseded=superseded)
        self.was_ended = True

    # ------------------------------------------------------------ invariants

    @invariant()
    def ended_is_a_phase_and_nothing_follows_it(self):
        stream = self.stream
        assert (stream.phase is Phase.ENDED) == (stream.ended is not None)
        assert (stream.phase is Phase.ENDED) == self.was_ended

    @invariant()
    def a_wake_up_is_never_lost(self):
        stream = self.stream
        mailbox = stream.mailbox
        if mailbox.notices or mailbox.handoffs or stream.check_due is not Check.NONE:
            assert stream.event.is_set()

    @invariant()
    def a_claim_told_ended_is_neither_held_nor_handed(self):
        stream = self.stream
        assert not stream.sent_tokens & self.told
        assert not {item.token for item in stream.mailbox.handoffs if isinstance(item, ClaimGrant)} & self.told

    @invariant()
    def an_ended_stream_is_not_in_line_and_a_parked_one_is(self):
        parked = {view.name for view in self.line.snapshot()}
        if self.stream.phase is Phase.ENDED:
            assert parked == set() and self.stream.line is None
        assert (self.stream.line is not None) == (parked == {"w1"})

    @invariant()
    def claiming_and_paused_never_both(self):
        assert not (self.stream.can_claim and self.stream.claims_paused)

    @invariant()
    def what_it_sent_is_among_what_it_must_tell_of(self):
        assert self.stream.sent_tokens <= self.stream.held_tokens()


StreamMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
test_stream_machine = StreamMachine.TestCase
