"""Usage sums and the budget gate (design §5 step 3), through the Board."""

from __future__ import annotations

import json

import pytest

from corrald import errors
from corrald.model import Budget, BudgetExhausted, ClaimGrant, Usage
from corrald.stream import ParkedStreams, StreamState
from tests.support.boardkit import spec

pytestmark = pytest.mark.timeout(30)


def teammate(board, name: str):
    ((_, record),) = [(p, r) for p, r in board.run(board.board.list_teammates()) if r.name == name]
    return record


def set_budget(board, name: str, max_cost_micros: int = 0, max_tokens: int = 0) -> Budget:
    return board.run(board.board.set_budget(name, max_cost_micros, max_tokens))


def claim_next(board, name: str, cursor: StreamState) -> ClaimGrant:
    (grant,) = board.next_for(name, cursor)
    assert isinstance(grant, ClaimGrant)
    return grant


def assert_gate_closed(board, name: str, cursor: StreamState) -> None:
    """No claim: a stream that has not heard of the spent budget is told (once), then gets nothing."""
    if cursor.budget_notice is None:
        (notice,) = board.next_for(name, cursor)
        assert isinstance(notice, BudgetExhausted) and notice.teammate == name, notice
    assert board.next_for(name, cursor) == []


def exhausted_events(board) -> list[dict]:
    return [json.loads(data) for _, _, data in board.events("budget_exhausted")]


def test_usage_is_summed_per_task_per_teammate_and_per_board(board):
    board.add("w1")
    board.add("w2")
    board.create(spec("a"), spec("b"), spec("c", max_attempts=2))
    a, b = board.claim("w1"), board.claim("w2")
    board.run(board.board.renew("w1", "a", a.token, reported=Usage(10, 1, 100, "small")))
    board.run(board.board.complete("w1", "a", a.token, b"ok", reported=Usage(5, 2, 50)))
    board.run(board.board.fail("w2", "b", b.token, "no", False, reported=Usage(1, 1, 1, "big")))
    c = board.claim("w2")
    board.run(board.board.complete("w2", "c", c.token, b"ok"))  # no usage: the sums stay

    assert board.task("a").usage == Usage(15, 3, 150, "small")  # the model is the last one named
    assert board.task("b").usage == Usage(1, 1, 1, "big")
    assert board.task("c").usage == Usage()
    assert teammate(board, "w1").usage == Usage(15, 3, 150, "small")
    assert teammate(board, "w2").usage == Usage(1, 1, 1, "big")
    assert board.run(board.board.stats()).usage == Usage(16, 4, 151)


def test_a_repeated_completion_counts_its_usage_once(board):
    board.add("w1")
    board.create(spec("a"))
    grant = board.claim("w1")
    for _ in range(2):
        board.run(board.board.complete("w1", "a", grant.token, b"ok", reported=Usage(cost_micros=7)))
    assert board.task("a").usage.cost_micros == 7


def test_a_spent_budget_shuts_the_gate_and_says_so_once(board):
    board.add("w1")
    set_budget(board, "w1", max_cost_micros=100)
    board.create(spec("a"), spec("b"), spec("c"))
    cursor = StreamState(slots=1)
    grant = claim_next(board, "w1", cursor)
    board.run(board.board.complete("w1", grant.task.id, grant.token, b"ok", reported=Usage(cost_micros=100)))
    before = board.snapshot()
    assert_gate_closed(board, "w1", cursor)  # no claim, and nothing written
    assert board.next_for("w1", cursor, look_first=True) == []
    assert board.snapshot() == before
    (event,) = exhausted_events(board)
    assert event["name"] == "w1" and event["cost_micros"] == 100 and event["max_cost_micros"] == 100

    set_budget(board, "w1", max_cost_micros=200)  # raised: it may claim again
    grant = claim_next(board, "w1", cursor)
    board.run(board.board.complete("w1", grant.task.id, grant.token, b"ok", reported=Usage(cost_micros=99)))
    assert board.next_for("w1", cursor) != []  # 199 < 200: still open
    assert len(exhausted_events(board)) == 1


def test_tokens_count_input_and_output(board):
    board.add("w1")
    set_budget(board, "w1", max_tokens=10)
    board.create(spec("a"), spec("b"))
    cursor = StreamState(slots=1)
    grant = claim_next(board, "w1", cursor)
    board.run(board.board.renew("w1", "a", grant.token, reported=Usage(input_tokens=6, output_tokens=4)))
    assert len(exhausted_events(board)) == 1
    board.complete("w1", "a", grant.token)
    assert_gate_closed(board, "w1", cursor)


def test_held_claims_stay_when_the_budget_is_spent(board):
    board.add("w1")
    set_budget(board, "w1", max_cost_micros=5)
    board.create(spec("a"), spec("b"), spec("c"))
    cursor = StreamState(slots=3)
    first, second = claim_next(board, "w1", cursor), claim_next(board, "w1", cursor)
    board.run(board.board.renew("w1", first.task.id, first.token, reported=Usage(cost_micros=5)))
    assert_gate_closed(board, "w1", cursor)  # a free slot, but the gate is closed
    assert board.next_for("w1", StreamState(slots=3)) != []  # a new stream still gets its held claims
    board.renew("w1", second.task.id, second.token)
    board.complete("w1", second.task.id, second.token)
    board.complete("w1", first.task.id, first.token)
    assert board.state("c").name == "PENDING"


def test_the_completion_that_spends_the_budget_hands_off_nothing(board):
    board.add("w1")
    set_budget(board, "w1", max_cost_micros=10)
    board.create(spec("a"), spec("b"))
    cursor = StreamState("w1", slots=1)
    grant = claim_next(board, "w1", cursor)
    _, found = board.run(
        board.board.complete(
            "w1", "a", grant.token, b"ok", stream=cursor.view(), waiters=ParkedStreams(), reported=Usage(cost_micros=10)
        )
    )
    cursor.hand(found)
    # The completion's own check tells the stream why no claim follows (the commit hands
    # the same notice to the registered stream, and it goes out once: test_stream_state).
    assert [type(item) for item in cursor.mailbox.handoffs] == [BudgetExhausted]
    assert board.state("b").name == "PENDING"
    assert board.scalar("SELECT count(*) FROM claims") == 1


def test_the_default_budget_applies_to_teammates_without_their_own(board):
    board.add("w1")
    board.add("w2")
    board.create(spec("a"), spec("b"), spec("c"), spec("d"))
    for name in ("w1", "w2"):
        grant = board.claim(name)
        board.run(board.board.complete(name, grant.task.id, grant.token, b"ok", reported=Usage(cost_micros=50)))
    set_budget(board, "w2", max_cost_micros=1000)
    assert set_budget(board, "*", max_cost_micros=50) == Budget(50, 0)
    assert [e["name"] for e in exhausted_events(board)] == ["w1"]  # the default closed w1's gate, not w2's
    assert teammate(board, "w1").budget == Budget(50, 0)
    assert teammate(board, "w2").budget == Budget(1000, 0)
    assert_gate_closed(board, "w1", StreamState(slots=1))
    assert board.next_for("w2", StreamState(slots=1)) != []
    set_budget(board, "*")  # 0: no limit
    assert board.next_for("w1", StreamState(slots=1)) != []


@pytest.mark.parametrize(
    ("reported", "field"),
    [
        (Usage(input_tokens=-1), "usage.input_tokens"),
        (Usage(output_tokens=-1), "usage.output_tokens"),
        (Usage(cost_micros=-1), "usage.cost_micros"),
        (Usage(model="m" * 201), "usage.model"),
    ],
)
@pytest.mark.parametrize("call", ["complete", "fail", "renew"])
def test_bad_usage_is_refused_and_writes_nothing(board, reported, field, call):
    board.add("w1")
    board.create(spec("a"))
    grant = board.claim("w1")
    before = board.snapshot()
    calls = {
        "complete": lambda: board.board.complete("w1", "a", grant.token, b"ok", reported=reported),
        "fail": lambda: board.board.fail("w1", "a", grant.token, "no", True, reported=reported),
        "renew": lambda: board.board.renew("w1", "a", grant.token, reported=reported),
    }
    with pytest.raises(errors.InvalidArgument) as raised:
        board.run(calls[call]())
    assert raised.value.field == field
    assert board.snapshot() == before


def test_a_model_of_200_characters_is_taken(board):
    board.add("w1")
    board.create(spec("a"))
    grant = board.claim("w1")
    board.run(board.board.renew("w1", "a", grant.token, reported=Usage(model="m" * 200)))
    assert board.task("a").usage.model == "m" * 200


@pytest.mark.parametrize(
    ("name", "cost", "tokens", "error", "field"),
    [
        ("nobody", 1, 1, errors.TeammateNotFound, None),
        ("w1", -1, 0, errors.InvalidArgument, "max_cost_micros"),
        ("w1", 0, -1, errors.InvalidArgument, "max_tokens"),
        ("", 1, 1, errors.InvalidArgument, "teammate"),
    ],
)
def test_bad_budgets_are_refused_and_write_nothing(board, name, cost, tokens, error, field):
    board.add("w1")
    before = board.snapshot()
    with pytest.raises(error) as raised:
        set_budget(board, name, cost, tokens)
    if field is not None:
        assert raised.value.field == field
    assert board.snapshot() == before


def test_sums_and_budgets_survive_a_restart(board):
    board.add("w1")
    board.create(spec("a"), spec("b"))
    set_budget(board, "w1", max_tokens=30)
    set_budget(board, "*", max_cost_micros=7)
    grant = board.claim("w1")
    board.run(board.board.complete("w1", "a", grant.token, b"ok", reported=Usage(20, 10, 3, "m")))
    board.restart()
    assert board.task("a").usage == Usage(20, 10, 3, "m")
    record = teammate(board, "w1")
    assert record.usage == Usage(20, 10, 3, "m") and record.budget == Budget(0, 30)
    assert board.run(board.board.stats()).usage == Usage(20, 10, 3)
    assert_gate_closed(board, "w1", StreamState(slots=1))
    board.add("w2")
    assert teammate(board, "w2").budget == Budget(7, 0)


def test_sums_stop_at_the_largest_int64(board):
    board.add("w1")
    board.add("w2")
    board.create(spec("a"), spec("b"))
    most = 2**63 - 1
    for name in ("w1", "w2"):
        grant = board.claim(name)
        for _ in range(2):
            board.run(board.board.renew(name, grant.task.id, grant.token, reported=Usage(most, most, most)))
    assert board.task("a").usage == Usage(most, most, most)
    assert teammate(board, "w2").usage == Usage(most, most, most)
    assert board.run(board.board.stats()).usage == Usage(most, most, most)


def test_a_token_budget_gates_sums_past_the_largest_int64(board):
    """input_tokens + output_tokens near 2**63 each: the gate's sum stops at the largest
    int64 instead of overflowing (PostgreSQL refuses a bigint past it), on every path that
    asks the gate: the completion's handoff, a stream's check and SetBudget's."""
    most = 2**63 - 1
    board.add("w1")
    board.add("w2")
    set_budget(board, "*", max_tokens=1000)
    board.create(spec("a"), spec("b"))
    cursor = StreamState("w1", slots=1)
    grant = claim_next(board, "w1", cursor)
    board.run(board.board.renew("w1", "a", grant.token, reported=Usage(most - 1, most - 1)))
    _, found = board.run(
        board.board.complete(
            "w1", "a", grant.token, b"ok", stream=cursor.view(), waiters=ParkedStreams(), reported=Usage(most, most)
        )
    )
    cursor.hand(found)
    assert board.state("a").name == "COMPLETED" and board.state("b").name == "PENDING"
    assert teammate(board, "w1").usage == Usage(most, most)
    assert len(exhausted_events(board)) == 1  # the renewal closed the gate; the completion at the cap did not again
    assert_gate_closed(board, "w1", cursor)
    assert set_budget(board, "w2", max_tokens=5) == Budget(0, 5)
    assert set_budget(board, "w1", max_tokens=most) == Budget(0, most)  # reached: the capped sum is `most`
    assert_gate_closed(board, "w1", StreamState(slots=1))
    set_budget(board, "w1")  # no limit of its own: the gate opens
    assert claim_next(board, "w1", StreamState(slots=1)).task.id == "b"


def test_the_first_report_past_the_largest_int64_closes_the_gate_and_says_so_once(board):
    most = 2**63 - 1
    board.add("w1")
    set_budget(board, "w1", max_tokens=10, max_cost_micros=most)
    board.create(spec("a"), spec("b"))
    grant = board.claim("w1")
    for _ in range(2):  # the second report finds every sum at the cap already: no second notice
        board.run(board.board.renew("w1", "a", grant.token, reported=Usage(most, most, most)))
    assert teammate(board, "w1").usage == Usage(most, most, most)
    (event,) = exhausted_events(board)
    assert (event["input_tokens"], event["output_tokens"], event["cost_micros"]) == (most, most, most)
    board.complete("w1", "a", grant.token)
    assert_gate_closed(board, "w1", StreamState(slots=1))
