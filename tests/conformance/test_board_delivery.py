"""What a teammate gets next (design §5 steps 1–4), through Board.next_for.

`StreamState.mark_sent` plays the part of an Idle stream that sent what it was given; a new
`StreamState` is a new stream.
"""

from __future__ import annotations

import pytest

from corrald import errors
from corrald.model import ClaimGrant, InboxItem
from corrald.stream import Claims, StreamState
from tests.support.boardkit import spec

pytestmark = pytest.mark.timeout(30)


def kinds(items) -> list[str]:
    return ["claim" if isinstance(item, ClaimGrant) else item.kind for item in items]


def writer_jobs(board) -> int:
    return board.board.writer.stats().jobs


def assert_gated(board, name, cursor):
    """The gate is shut: nothing to send and nothing written, not even a status; and a
    stream that looks first (no ready-task wake-up) finds that out without the writer."""
    before = board.snapshot()
    claims = board.scalar("SELECT count(*) FROM claims")
    jobs = writer_jobs(board)
    assert board.next_for(name, cursor, look_first=True) == []
    assert writer_jobs(board) == jobs
    assert board.next_for(name, cursor) == []
    assert board.snapshot() == before
    assert board.scalar("SELECT count(*) FROM claims") == claims


# ---------------------------------------------------------------- step 1: re-send held claims


def test_new_stream_resends_every_held_claim_unchanged(board):
    board.add("w1")
    board.create(spec("a"), spec("b"), spec("c"))
    first = StreamState(slots=2)
    (ga,) = board.next_for("w1", first)
    (gb,) = board.next_for("w1", first)
    assert_gated(board, "w1", first)  # both slots taken
    second = StreamState(slots=2)
    resent = board.next_for("w1", second)
    assert [(g.task.id, g.token, g.attempt, g.fence, g.lease_expire_ms) for g in resent] == [
        (g.task.id, g.token, g.attempt, g.fence, g.lease_expire_ms) for g in (ga, gb)
    ]
    assert board.scalar("SELECT count(*) FROM claims") == 2
    assert_gated(board, "w1", second)


def test_resend_forgets_claims_that_ended(board):
    board.add("w1")
    board.create(spec("a"), spec("b"))
    cursor = StreamState(slots=1)
    (ga,) = board.next_for("w1", cursor)
    board.complete("w1", "a", ga.token)
    (gb,) = board.next_for("w1", cursor)
    assert gb.task.id == "b"
    assert cursor.sent_tokens == {gb.token}


def test_claims_are_resent_before_inbox_items(board):
    board.add("w1")
    board.create(spec("a"))
    (grant,) = board.next_for("w1", StreamState(slots=1))
    board.send("lead", "w1", "hello")
    cursor = StreamState(slots=1)
    assert board.next_for("w1", cursor) == [grant]
    assert kinds(board.next_for("w1", cursor)) == ["message"]


def test_a_new_stream_is_not_given_a_claim_whose_lease_ended(board, clock):
    board.add("w1")
    board.create(spec("a", lease_ms=1000))
    (dead,) = board.next_for("w1", StreamState(slots=1))
    clock.advance(1000)  # the lease is over; the reaper has not run yet
    items = board.next_for("w1", StreamState(slots=1))
    # Not re-sent, and not counted against the slot: the claim job reclaims and claims afresh.
    (grant,) = items
    assert (grant.task.id, grant.attempt) == ("a", 2) and grant.token != dead.token
    assert board.rows("SELECT outcome FROM claims ORDER BY fence") == [("expired",), (None,)]


def test_leases_ending_one_after_the_other_are_each_reclaimed_by_the_next_check(board, clock):
    """The writer asks for ended leases only once the earliest one it knows of is due: after
    reclaiming one it must know the next, or that one waits for the reaper's timer. (The
    checking teammate takes nothing, so no new lease tells the writer of a later end.)"""
    board.add("w1", roles=["r"])
    board.add("w2", roles=["r"])
    board.add("w3")
    board.create(spec("a", lease_ms=1000, required_role="r"), spec("b", lease_ms=2000, required_role="r"))
    assert [board.next_for(name, StreamState(slots=1))[0].task.id for name in ("w1", "w2")] == ["a", "b"]
    checker = StreamState(slots=1)
    clock.advance(1000)  # a's lease is over
    assert board.next_for("w3", checker) == []
    assert board.rows("SELECT outcome FROM claims ORDER BY fence") == [("expired",), (None,)]
    clock.advance(1000)  # and now b's
    assert board.next_for("w3", checker) == []
    assert board.rows("SELECT outcome FROM claims ORDER BY fence") == [("expired",), ("expired",)]


def test_a_dead_claim_is_not_resent_to_a_gated_stream(board, clock):
    board.add("w1")
    board.create(spec("a", lease_ms=1000))
    (dead,) = board.next_for("w1", StreamState(slots=1))
    board.run(board.board.request_shutdown("w1", "stop", 0))
    clock.advance(1000)
    cursor = StreamState(slots=1)
    assert kinds(board.next_for("w1", cursor)) == ["shutdown_request"]  # the dead claim is not re-sent
    assert_gated(board, "w1", cursor)


# ---------------------------------------------------------------- step 2: inbox


def test_inbox_items_come_in_order_and_before_a_claim(board):
    board.add("w1")
    board.create(spec("a"))
    for i in range(3):
        board.send("lead", "w1", f"m{i}")
    cursor = StreamState(slots=1)
    items = board.next_for("w1", cursor)
    assert [(i.seq, i.body, i.sender) for i in items] == [(1, "m0", "lead"), (2, "m1", "lead"), (3, "m2", "lead")]
    assert board.scalar("SELECT count(*) FROM claims") == 0
    # Plain messages do not gate the claim once sent, acknowledged or not.
    assert kinds(board.next_for("w1", cursor)) == ["claim"]


def test_new_stream_starts_after_the_acknowledged_sequence(board):
    board.add("w1")
    for i in range(4):
        board.send("lead", "w1", f"m{i}")
    assert [i.seq for i in board.next_for("w1", StreamState(slots=1))] == [1, 2, 3, 4]
    board.ack("w1", 2)
    assert [i.seq for i in board.next_for("w1", StreamState(slots=1))] == [3, 4]
    cursor = StreamState(slots=1)
    board.next_for("w1", cursor)
    board.send("w1", "w1", "note to self")  # a later item on the same stream comes next
    assert [i.seq for i in board.next_for("w1", cursor)] == [5]


def test_inbox_is_sent_in_pages(board):
    board.add("w1")
    for i in range(70):
        board.send("lead", "w1", str(i))
    cursor = StreamState(slots=1)
    first, second = board.next_for("w1", cursor), board.next_for("w1", cursor)
    assert [i.seq for i in first + second] == list(range(1, 71))
    assert len(first) <= 64


# ---------------------------------------------------------------- step 3: the gates


def test_unacked_protocol_message_shuts_the_gate(board):
    board.add("w1")
    board.create(spec("a"))
    plan_id = board.run(board.board.submit_plan("w1", "p"))  # no plan needed; a decision is still protocol
    seq = board.run(board.board.decide_plan(plan_id, True, "fine"))
    cursor = StreamState(slots=1)
    (decision,) = board.next_for("w1", cursor)
    assert isinstance(decision, InboxItem) and decision.kind == "plan_decision" and decision.is_protocol
    assert (decision.seq, decision.ref, decision.approve, decision.body) == (seq, plan_id, True, "fine")
    assert_gated(board, "w1", cursor)
    board.ack("w1", seq)
    assert kinds(board.next_for("w1", cursor)) == ["claim"]


def test_new_stream_resends_an_unacked_protocol_message_and_stays_gated(board):
    board.add("w1")
    board.create(spec("a"))
    request_id, _ = board.run(board.board.request_shutdown("w1", "stop", 0))
    cursor = StreamState(slots=1)
    (item,) = board.next_for("w1", cursor)
    assert (item.kind, item.ref) == ("shutdown_request", request_id)
    assert_gated(board, "w1", cursor)
    again = StreamState(slots=1)
    assert [i.seq for i in board.next_for("w1", again)] == [item.seq]
    assert_gated(board, "w1", again)


def test_pending_shutdown_shuts_the_gate_even_when_acknowledged(board):
    board.add("w1")
    board.create(spec("a"))
    request_id, _ = board.run(board.board.request_shutdown("w1", "stop", 0))
    cursor = StreamState(slots=1)
    (item,) = board.next_for("w1", cursor)
    board.ack("w1", item.seq)
    assert_gated(board, "w1", cursor)
    assert_gated(board, "w1", StreamState(slots=1))
    board.run(board.board.respond_shutdown("w1", request_id, False, "not yet"))
    assert kinds(board.next_for("w1", cursor)) == ["claim"]


def test_control_beats_a_ready_task_that_arrives_first(board):
    board.add("w1")
    board.create(spec("a"), spec("b"))
    board.run(board.board.request_shutdown("w1", "stop", 0))
    cursor = StreamState(slots=2)
    assert kinds(board.next_for("w1", cursor)) == ["shutdown_request"]
    assert_gated(board, "w1", cursor)


def _plan(board, name="w1"):
    return board.run(board.board.submit_plan(name, "plan"))


def _decide(board, plan_id, approve):
    return board.run(board.board.decide_plan(plan_id, approve, ""))


def _no_plan(board):
    pass


def _undecided(board):
    _plan(board)


def _approved_not_acked(board):
    _decide(board, _plan(board), True)


def _approved_and_acked(board):
    board.ack("w1", _decide(board, _plan(board), True))


def _rejected_and_acked(board):
    board.ack("w1", _decide(board, _plan(board), False))


def _older_approved_newer_undecided(board):
    board.ack("w1", _decide(board, _plan(board), True))
    _plan(board)


def _older_approved_after_newer_submitted(board):
    older = _plan(board)
    _plan(board)
    board.ack("w1", _decide(board, older, True))


def _rejected_then_newer_approved(board):
    board.ack("w1", _decide(board, _plan(board), False))
    board.ack("w1", _decide(board, _plan(board), True))


PLAN_CASES = {
    "no plan": (_no_plan, False),
    "plan undecided": (_undecided, False),
    "approved, not acknowledged": (_approved_not_acked, False),
    "approved and acknowledged": (_approved_and_acked, True),
    "rejected and acknowledged": (_rejected_and_acked, False),
    "older approved, newer undecided": (_older_approved_newer_undecided, False),
    "older approved after newer was submitted": (_older_approved_after_newer_submitted, False),
    "rejected, then newer approved": (_rejected_then_newer_approved, True),
}


@pytest.mark.parametrize("case", list(PLAN_CASES), ids=list(PLAN_CASES))
def test_plan_gate(board, case):
    setup, opens = PLAN_CASES[case]
    board.add("w1", require_plan=True)
    board.create(spec("a"))
    setup(board)
    cursor = StreamState(slots=1)
    while True:  # the stream first sends every inbox item
        items = board.next_for("w1", cursor)
        if not items or isinstance(items[0], ClaimGrant):
            break
        assert all(isinstance(i, InboxItem) for i in items)
    if opens:
        assert kinds(items) == ["claim"]
    else:
        assert items == []
        assert_gated(board, "w1", cursor)


def test_gated_check_at_a_later_instant_writes_nothing(board, clock):
    board.add("w1", require_plan=True)
    board.create(spec("a"))
    cursor = StreamState(slots=1)
    assert_gated(board, "w1", cursor)
    clock.advance(5_000)  # the next poll interval
    assert_gated(board, "w1", cursor)


# ---------------------------------------------------------------- step 4: slots


@pytest.mark.parametrize("slots", [1, 3])
def test_slots_are_respected(board, slots):
    board.add("w1")
    board.create(*[spec(f"t{i}") for i in range(5)])
    cursor = StreamState(slots=slots)
    grants = []
    for _ in range(slots):
        items = board.next_for("w1", cursor)
        assert kinds(items) == ["claim"]  # one claim per look
        grants.extend(items)
    assert_gated(board, "w1", cursor)
    board.complete("w1", grants[0].task.id, grants[0].token)
    assert kinds(board.next_for("w1", cursor)) == ["claim"]
    assert board.scalar("SELECT count(*) FROM tasks WHERE owner = 'w1' AND state = 2") == slots


@pytest.mark.parametrize("slots", [1, 2])
def test_a_completion_hands_its_stream_the_next_task_from_the_board_as_it_left_it(board, slots):
    """The completing stream's next item is decided in the completion's own job: the slot it
    freed is free, a claim it still holds is held (not re-sent, and it fills a slot)."""
    board.add("w1")
    board.create(*[spec(f"t{i}") for i in range(4)])
    stream = open_stream(board, "w1", slots=slots)
    grants = [board.next_for("w1", stream)[0] for _ in range(slots)]
    jobs = writer_jobs(board)
    task = complete_handing_off(board, "w1", grants[0], stream)
    assert task.state.name == "COMPLETED"
    assert writer_jobs(board) == jobs + 1  # completed and claimed in one job
    (handed,) = stream.mailbox.handoffs
    assert isinstance(handed, ClaimGrant) and handed.task.id not in {grant.task.id for grant in grants}
    assert stream.can_claim is False  # its slots are full again
    assert board.scalar("SELECT count(*) FROM tasks WHERE owner = 'w1' AND state = 2") == slots


def test_required_role_through_delivery(board):
    board.add("plain")
    board.add("builder", roles=["build"])
    board.create(spec("b", required_role="build"))
    assert board.next_for("plain", StreamState(slots=1)) == []
    assert kinds(board.next_for("builder", StreamState(slots=1))) == ["claim"]


def test_nothing_ready_writes_nothing(board):
    board.add("w1")
    board.create(spec("a"), spec("b", "a"))
    board.claim("w1")
    cursor = StreamState(slots=2)
    board.next_for("w1", cursor)  # re-sends "a"
    assert_gated(board, "w1", cursor)  # "b" waits for "a"


def test_removed_teammate_gets_unauthenticated(board):
    board.add("w1")
    board.run(board.board.remove_teammate("w1"))
    with pytest.raises(errors.Unauthenticated):
        board.next_for("w1", StreamState(slots=1))


# ---------------------------------------------------------------- looking first (a read, no writer job)


def test_looking_first_sends_inbox_and_resent_claims_from_a_read(board):
    board.add("w1")
    board.create(spec("a"), spec("b"))
    (held,) = board.next_for("w1", StreamState(slots=2))
    board.send("lead", "w1", "hello")
    jobs = writer_jobs(board)
    cursor = StreamState(slots=2)
    resent = board.next_for("w1", cursor, look_first=True)
    assert [(g.task.id, g.token) for g in resent] == [(held.task.id, held.token)]
    assert kinds(board.next_for("w1", cursor, look_first=True)) == ["message"]
    assert writer_jobs(board) == jobs  # neither needed the writer


def test_looking_first_hands_over_to_the_writer_when_a_claim_is_possible(board, clock):
    board.add("w1")
    board.add("w2")
    board.create(spec("a", lease_ms=1000))
    (first,) = board.next_for("w1", StreamState(slots=1), look_first=True)  # a ready task: the writer claims
    assert first.task.id == "a"
    assert board.next_for("w2", StreamState(slots=1), look_first=True) == []  # nothing ready for w2
    clock.advance(1000)  # w1's lease ends: only the writer may reclaim it
    (second,) = board.next_for("w2", StreamState(slots=1), look_first=True)
    assert second.task.id == "a" and second.attempt == 2 and second.token != first.token


def test_looking_first_with_nothing_ready_leaves_the_stream_wakeable(board):
    board.add("w1")
    cursor = StreamState(slots=1)
    cursor.claims = Claims.SHUT
    jobs = writer_jobs(board)
    assert board.next_for("w1", cursor, look_first=True) == []
    assert writer_jobs(board) == jobs
    assert cursor.can_claim  # a task becoming ready must wake this stream


# ---------------------------------------------------------------- a superseded stream


def complete_handing_off(board, name: str, grant, stream: StreamState):
    """A completion with its teammate's stream open: the delivery its job decided goes in the stream's mailbox."""
    task, found = board.run(board.board.complete(name, grant.task.id, grant.token, b"ok", stream=stream.view()))
    stream.hand(found)
    return task


def open_stream(board, name: str, slots: int = 1) -> StreamState:
    """A stream as an opening records it: online, with the stream epoch that opening advanced to."""
    stream = StreamState(slots=slots)
    stream.epoch = board.run(board.board.set_online(name, True))
    return stream


@pytest.mark.parametrize("look_first", [False, True])
def test_a_stream_superseded_by_a_newer_opening_gets_nothing_and_ends(board, look_first):
    """Another daemon may open the newer stream and not have told this one yet: the older
    stream's check (a write's or a read's) must deliver nothing, however much waits for it."""
    board.add("w1")
    board.create(spec("a"), spec("b"))
    older = open_stream(board, "w1", slots=2)
    (held,) = board.next_for("w1", older)
    newer = open_stream(board, "w1", slots=2)
    assert newer.epoch == older.epoch + 1
    board.send("lead", "w1", "hello")
    claims = board.scalar("SELECT count(*) FROM claims")

    assert board.next_for("w1", older, look_first=look_first) == []  # no re-send, no message, no claim
    assert older.ended is not None and older.superseded
    assert board.scalar("SELECT count(*) FROM claims") == claims

    sent = board.next_for("w1", newer)
    assert [getattr(item, "token", None) for item in sent] == [held.token]  # the held claim goes to the newer
    assert kinds(board.next_for("w1", newer)) == ["message"]
    assert kinds(board.next_for("w1", newer)) == ["claim"]


def test_a_completion_handing_off_to_a_superseded_stream_completes_and_hands_nothing(board):
    board.add("w1")
    board.create(spec("a"), spec("b"))
    older = open_stream(board, "w1")
    (grant,) = board.next_for("w1", older)
    open_stream(board, "w1")
    task = complete_handing_off(board, "w1", grant, older)
    assert task.state.name == "COMPLETED"
    assert older.mailbox.handoffs == [] and older.ended is not None and older.superseded
    assert board.scalar("SELECT count(*) FROM claims") == 1  # b was not claimed for the old stream
