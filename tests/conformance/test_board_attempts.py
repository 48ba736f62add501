"""A task's attempt history and the previous attempt a claim carries (issue #16),
on a real board with a fake clock: every way a claim ends, the bound, restart."""

from __future__ import annotations

import pytest

from corrald import errors
from corrald.model import AttemptRecord, ClaimOutcome, TaskState
from corrald.store import tasks
from corrald.stream import StreamState
from tests.support.boardkit import spec

pytestmark = pytest.mark.timeout(30)

LEASE = 10_000


@pytest.fixture
def team(board):
    board.add("w1")
    board.add("w2")
    return board


def _history(board, task_id: str) -> list[AttemptRecord]:
    return board.run(board.board.task_history(task_id))[1]


def test_the_history_records_every_way_a_claim_ends(team, clock):
    team.create(spec("t", max_attempts=5, lease_ms=LEASE))

    first = team.claim("w1")
    assert first is not None and first.previous_attempt is None, "a first claim has no previous attempt"
    (live,) = _history(team, "t")
    assert (live.attempt, live.owner, live.fence, live.claim_ms) == (1, "w1", first.fence, clock.now_ms())
    assert live.outcome is None and live.end_ms is None and live.error == ""

    clock.advance(5)
    team.fail("w1", "t", first.token, "disk full on /tmp")
    failed_at = clock.now_ms()
    second = team.claim("w2")
    assert second is not None and second.attempt == 2
    assert second.previous_attempt == AttemptRecord(
        1, "w1", first.fence, failed_at - 5, failed_at, ClaimOutcome.FAILED, "disk full on /tmp"
    )

    clock.advance(LEASE)
    team.reap()
    expired_at = clock.now_ms()
    third = team.claim("w1")
    assert third is not None and third.attempt == 3
    assert third.previous_attempt is not None
    assert third.previous_attempt.outcome is ClaimOutcome.EXPIRED
    assert third.previous_attempt.error == "lease expired on attempt 2"
    assert (third.previous_attempt.fence, third.previous_attempt.end_ms) == (second.fence, expired_at)

    team.release("w1", "t", third.token)
    fourth = team.claim("w2")
    assert fourth is not None and fourth.attempt == 3, "a release uses no attempt up"
    assert fourth.previous_attempt is not None
    assert (fourth.previous_attempt.outcome, fourth.previous_attempt.error) == (ClaimOutcome.RELEASED, "")

    clock.advance(7)
    team.complete("w2", "t", fourth.token)
    history = _history(team, "t")
    assert [(a.attempt, a.owner, a.outcome, a.error) for a in history] == [
        (1, "w1", ClaimOutcome.FAILED, "disk full on /tmp"),
        (2, "w2", ClaimOutcome.EXPIRED, "lease expired on attempt 2"),
        (3, "w1", ClaimOutcome.RELEASED, ""),
        (3, "w2", ClaimOutcome.COMPLETED, ""),
    ]
    assert [a.fence for a in history] == [first.fence, second.fence, third.fence, fourth.fence]
    assert history[-1].end_ms == clock.now_ms() and history[-1].claim_ms == clock.now_ms() - 7
    assert all(a.end_ms is not None and a.end_ms >= a.claim_ms for a in history)


def test_a_cancel_and_a_removal_end_the_live_claim_with_why(team):
    team.create(spec("root", lease_ms=LEASE), spec("leaf", "root", lease_ms=LEASE), spec("other", lease_ms=LEASE))
    root = team.claim("w1")
    other = team.claim("w2")
    assert root is not None and other is not None
    team.cancel("root")
    (ended,) = _history(team, "root")
    assert (ended.outcome, ended.error) == (ClaimOutcome.CANCELED, "canceled by the lead")
    assert _history(team, "leaf") == [], "a task never claimed has no history"

    team.run(team.board.remove_teammate("w2"))
    (revoked,) = _history(team, other.task.id)
    assert (revoked.outcome, revoked.error) == (ClaimOutcome.REVOKED, "teammate 'w2' was removed")
    assert team.state(other.task.id) is TaskState.PENDING


def test_a_final_failure_keeps_its_error_in_the_history(team):
    team.create(spec("once", max_attempts=1, lease_ms=LEASE))
    grant = team.claim("w1")
    assert grant is not None
    team.fail("w1", "once", grant.token, "no such file", retryable=False)
    (failed,) = _history(team, "once")
    assert (failed.outcome, failed.error) == (ClaimOutcome.FAILED, "no such file")
    assert team.state("once") is TaskState.FAILED


@pytest.mark.sqlite_only  # counts statements through SQLite's trace callback
def test_a_first_claim_reads_no_history_and_a_later_one_does(team):
    team.create(spec("t", lease_ms=LEASE))
    statements: list[str] = []
    team.call(lambda tx: tx.conn.set_trace_callback(statements.append))
    try:
        grant = team.claim("w1")
        assert grant is not None
        first_claim = [s for s in statements if "FROM claims" in s]
        assert first_claim == [], f"a first claim asked the claims table: {first_claim}"
        team.release("w1", "t", grant.token)
        statements.clear()
        again = team.claim("w1")
        assert again is not None and again.previous_attempt is not None
        assert [s for s in statements if "FROM claims" in s], "a second claim reads its previous attempt"
    finally:
        team.call(lambda tx: tx.conn.set_trace_callback(None))


def test_a_held_claim_sent_again_on_a_new_stream_carries_its_previous_attempt(team):
    team.create(spec("t", max_attempts=3, lease_ms=LEASE))
    first = team.claim("w1")
    assert first is not None
    team.fail("w1", "t", first.token, "flaky network")
    (sent,) = team.next_for("w1", StreamState(slots=1))
    assert sent.previous_attempt is not None and sent.previous_attempt.error == "flaky network"
    (again,) = team.next_for("w1", StreamState(slots=1))  # a new stream re-sends what w1 holds
    assert again.token == sent.token
    assert again.previous_attempt == sent.previous_attempt


def test_the_history_shows_the_most_recent_attempts_only(team):
    team.create(spec("busy", lease_ms=LEASE))
    fences = []
    for _ in range(tasks.ATTEMPTS_SHOWN + 5):
        grant = team.claim("w1")
        assert grant is not None
        fences.append(grant.fence)
        team.release("w1", "busy", grant.token)
    history = _history(team, "busy")
    assert len(history) == tasks.ATTEMPTS_SHOWN
    assert [a.fence for a in history] == fences[-tasks.ATTEMPTS_SHOWN :], "the newest ones, oldest first"
    assert team.scalar("SELECT count(*) FROM claims") == tasks.ATTEMPTS_SHOWN + 5, "all of them stay stored"


def test_the_history_survives_a_restart(team, clock):
    team.create(spec("t", max_attempts=3, lease_ms=LEASE))
    grant = team.claim("w1")
    assert grant is not None
    team.fail("w1", "t", grant.token, "before the restart")
    held = team.claim("w2")
    assert held is not None
    before = _history(team, "t")
    team.restart()
    assert _history(team, "t") == before
    assert before[-1].outcome is None
    (sent,) = team.next_for("w2", StreamState(slots=1))
    assert sent.token == held.token and sent.previous_attempt == before[0]


def test_the_history_of_an_unknown_task_is_not_found(team):
    with pytest.raises(errors.TaskNotFound):
        team.run(team.board.task_history("nope"))
