"""Claims that die under their holder (issue #16 items 6 and 10), on a real board with a
fake clock: the notice each ending records for the holder's stream, RevokeClaim, and
the attempt time limit (renewals capped, a failure with backoff, kept across restart)."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from corrald import activity, errors, validate
from corrald.config import Limits
from corrald.model import ClaimEnd, ClaimEndReason, ClaimOutcome, Completion, TaskState
from corrald.store import claim_ends, tasks, team
from corrald.txn import Txn
from tests.support.boardkit import spec

pytestmark = pytest.mark.timeout(30)

LEASE = 10_000
TIMEOUT = 25_000


def _timed(task_id: str, timeout_ms: int = TIMEOUT, **fields) -> object:
    return dataclasses.replace(spec(task_id, lease_ms=LEASE, **fields), attempt_timeout_ms=timeout_ms)


def _ended_by(board, job) -> dict[str, list[ClaimEnd]]:
    """Runs `job(tx)` as one writer job; returns the claim-ended notices it recorded."""

    def run(tx: Txn) -> dict[str, list[ClaimEnd]]:
        job(tx)
        return tx.wakes.claims_ended

    return board.call(run)


def _history(board, task_id: str):
    return board.run(board.board.task_history(task_id))[1]


# ---------------------------------------------------------------- notices


def test_each_ending_under_the_holder_records_a_notice_for_it(board, clock):
    board.add("w1")
    board.create(spec("exp", lease_ms=LEASE), spec("can", lease_ms=3 * LEASE), spec("rem", lease_ms=3 * LEASE))
    expiring, canceled, removed = board.claim("w1"), board.claim("w1"), board.claim("w1")

    clock.advance(LEASE)
    assert _ended_by(board, tasks.reclaim_expired) == {
        "w1": [ClaimEnd("exp", expiring.token, ClaimEndReason.LEASE_EXPIRED, "lease expired on attempt 1")]
    }
    assert _ended_by(board, lambda tx: tasks.cancel(tx, ["can"])) == {
        "w1": [ClaimEnd("can", canceled.token, ClaimEndReason.TASK_CANCELED, "canceled by the lead")]
    }
    assert _ended_by(board, lambda tx: team.remove_teammate(tx, "w1")) == {
        "w1": [ClaimEnd("rem", removed.token, ClaimEndReason.TEAMMATE_REMOVED, "teammate 'w1' was removed")]
    }


def test_a_holder_ending_its_own_claim_gets_no_notice(board, clock):
    board.add("w1")
    board.create(spec("a", lease_ms=LEASE), spec("b", lease_ms=LEASE), spec("c", lease_ms=LEASE))
    ga, gb, gc = board.claim("w1"), board.claim("w1"), board.claim("w1")
    assert _ended_by(board, lambda tx: tasks.complete(tx, Completion("w1", "a", ga.token, b""))) == {}
    assert _ended_by(board, lambda tx: tasks.fail(tx, "w1", "b", gb.token, "no", True)) == {}
    assert _ended_by(board, lambda tx: tasks.release(tx, "w1", "c", gc.token)) == {}


def test_the_claim_history_gives_back_each_notice_its_commit_gave(board, clock):
    # What a daemon that may have missed a notice reads instead (store.claim_ends).
    board.add("w1")
    board.add("w2")
    board.create(
        spec("exp", lease_ms=LEASE),
        _timed("out", LEASE),
        *(spec(task_id, lease_ms=3 * LEASE) for task_id in ("can", "rev", "rem", "done", "live")),
    )
    held = {task_id: board.claim("w1").token for task_id in ("exp", "out", "can", "rev", "rem")}
    held |= {task_id: board.claim("w2").token for task_id in ("done", "live")}
    clock.advance(LEASE)
    notices: dict[str, list[ClaimEnd]] = {}
    for job in (
        tasks.reclaim_expired,
        lambda tx: tasks.cancel(tx, ["can"]),
        lambda tx: tasks.revoke(tx, "rev", "not this way"),
        lambda tx: team.remove_teammate(tx, "w1"),
        lambda tx: tasks.complete(tx, Completion("w2", "done", held["done"], b"")),
    ):
        for holder, ends in _ended_by(board, job).items():
            notices.setdefault(holder, []).extend(ends)
    assert [end.reason for end in notices["w1"]] == [
        ClaimEndReason.LEASE_EXPIRED,
        ClaimEndReason.ATTEMPT_TIMEOUT,
        ClaimEndReason.TASK_CANCELED,
        ClaimEndReason.REVOKED,
        ClaimEndReason.TEAMMATE_REMOVED,
    ]

    found = board.run(
        board.board.read(lambda conn: claim_ends.ended_claims(conn, {*held.values(), "nope"}, {"w1", "w2", "ghost"}))
    )
    # In claim order; the completion was its holder's own doing; the live claim has not ended.
    assert found.ends == {end.token: end for end in notices["w1"]} | {held["done"]: None}
    assert list(found.ends) == [held[task_id] for task_id in ("exp", "out", "can", "rev", "rem", "done")]
    assert found.removed == {"w1"}
    assert board.run(board.board.read(lambda conn: claim_ends.ended_claims(conn, (), ()))) == (
        claim_ends.EndedClaims({}, frozenset())
    )


# ---------------------------------------------------------------- RevokeClaim


def test_revoke_returns_the_task_and_kills_the_token(board, clock):
    board.add("w1")
    board.add("w2")
    board.create(spec("t", lease_ms=LEASE, max_attempts=1))
    first = board.claim("w1")
    clock.advance(7)

    notices = _ended_by(board, lambda tx: tasks.revoke(tx, "t", "wrong approach"))
    assert notices == {"w1": [ClaimEnd("t", first.token, ClaimEndReason.REVOKED, "wrong approach")]}
    task = board.task("t")
    assert (task.state, task.owner, task.lease_expire_ms) == (TaskState.PENDING, "", None)
    (ended,) = _history(board, "t")
    assert (ended.outcome, ended.error, ended.end_ms) == (ClaimOutcome.REVOKED, "wrong approach", clock.now_ms())

    for write in (
        lambda: board.renew("w1", "t", first.token),
        lambda: board.complete("w1", "t", first.token),
        lambda: board.fail("w1", "t", first.token),
        lambda: board.release("w1", "t", first.token),
    ):
        with pytest.raises(errors.ClaimRevoked):
            write()
    with pytest.raises(errors.FailedPrecondition):  # no live claim now
        board.run(board.board.revoke_claim("t", ""))

    # An ended attempt, not a failure: max_attempts=1 still allows the next claim.
    second = board.claim("w2")
    assert second is not None and second.fence > first.fence and second.attempt == 1
    assert second.previous_attempt is not None and second.previous_attempt.outcome is ClaimOutcome.REVOKED


def test_revoke_refuses_bad_input_and_writes_nothing(board, clock):
    board.create(spec("pending", lease_ms=LEASE))
    before = board.snapshot()
    with pytest.raises(errors.TaskNotFound):
        board.run(board.board.revoke_claim("nope", ""))
    with pytest.raises(errors.FailedPrecondition):
        board.run(board.board.revoke_claim("pending", ""))
    with pytest.raises(errors.InvalidArgument) as empty:
        board.run(board.board.revoke_claim("", ""))
    assert empty.value.field == "task_id"
    with pytest.raises(errors.InvalidArgument) as long:
        board.run(board.board.revoke_claim("pending", "x" * (board.limits.text_max_bytes + 1)))
    assert long.value.field == "reason"
    assert board.snapshot() == before


# ---------------------------------------------------------------- attempt_timeout


def test_attempt_timeout_is_checked_and_stored():
    limits = Limits()
    for bad in (0, 999, 7 * 24 * 3600 * 1000 + 1):
        with pytest.raises(errors.InvalidArgument) as refused:
            validate.normalize_spec(0, _timed("t", bad), limits, 0)
        assert refused.value.field == "tasks[0].attempt_timeout"
    assert validate.normalize_spec(0, _timed("t", 1000), limits, 0).attempt_timeout_ms == 1000
    assert validate.normalize_spec(0, spec("t"), limits, 0).attempt_timeout_ms is None
    # An unset limit keeps the digest a spec had before the field existed.
    normal = validate.normalize_spec(0, spec("t"), limits, 0)
    assert validate.spec_digest(normal) != validate.spec_digest(dataclasses.replace(normal, attempt_timeout_ms=1000))


def test_renewals_never_pass_the_attempt_deadline(board, clock):
    board.add("w1")
    board.create(_timed("t", max_attempts=3, retry_backoff_ms=2_000))
    claim = board.claim("w1")
    deadline = clock.now_ms() + TIMEOUT
    assert claim.lease_expire_ms == clock.now_ms() + LEASE
    assert board.task("t").attempt_timeout_ms == TIMEOUT

    clock.advance(9_000)
    assert board.renew("w1", "t", claim.token)[0] == clock.now_ms() + LEASE
    clock.advance(9_000)
    assert board.renew("w1", "t", claim.token)[0] == deadline, "the lease is capped at the attempt deadline"
    clock.advance(TIMEOUT - 18_000)
    with pytest.raises(errors.AttemptTimedOut):  # before the reaper ran, too
        board.renew("w1", "t", claim.token)

    notices = _ended_by(board, tasks.reclaim_expired)
    why = "attempt timed out after 25 s"
    assert notices == {"w1": [ClaimEnd("t", claim.token, ClaimEndReason.ATTEMPT_TIMEOUT, why)]}
    with pytest.raises(errors.AttemptTimedOut):
        board.complete("w1", "t", claim.token)
    task = board.task("t")
    assert task.state is TaskState.PENDING and task.error == why
    assert task.ready_ms is not None and clock.now_ms() < task.ready_ms <= clock.now_ms() + 2_000, "backoff"
    (ended,) = _history(board, "t")
    assert ended.outcome is ClaimOutcome.TIMED_OUT and ended.error == why
    # A timed-out holder was working, not frozen: nothing pauses its claims.
    assert board.scalar("SELECT last_expiry_ms FROM teammates WHERE name = 'w1'") == 0


def test_the_last_timed_out_attempt_fails_the_task(board, clock):
    board.add("w1")
    board.create(_timed("t", 2_000, max_attempts=2, retry_backoff_ms=500))
    first = board.claim("w1")
    clock.advance(2_000)
    board.reap()
    assert board.claim("w1") is None, "the retry waits for its backoff"
    clock.advance(500)
    board.reap()
    second = board.claim("w1")
    assert second is not None and second.attempt == 2 and second.fence > first.fence
    assert second.lease_expire_ms == clock.now_ms() + 2_000, "each attempt has its own deadline"
    clock.advance(2_000)
    board.reap()
    task = board.task("t")
    assert task.state is TaskState.FAILED and task.error == "attempt timed out after 2 s"


def test_a_restart_keeps_the_attempt_deadline(board, clock):
    board.add("w1")
    board.create(_timed("t"), spec("plain", lease_ms=LEASE))
    timed, plain = board.claim("w1"), board.claim("w1")
    deadline = clock.now_ms() + TIMEOUT
    for _ in range(2):
        clock.advance(9_000)
        board.renew("w1", "t", timed.token)
        board.renew("w1", "plain", plain.token)
    board.restart()
    assert board.task("t").lease_expire_ms == deadline, "the restart's fresh lease stops at the deadline"
    assert board.task("plain").lease_expire_ms == clock.now_ms() + LEASE
    clock.advance(TIMEOUT - 18_000)
    board.reap()
    assert board.task("t").error == "attempt timed out after 25 s"
    assert board.state("plain") is TaskState.IN_PROGRESS


def test_the_activity_log_words_revocations_and_timeouts(board, clock, caplog):
    board.add("w1")
    board.create(spec("r", lease_ms=LEASE), _timed("t", 2_000))
    board.claim("w1")
    board.claim("w1")
    clock.advance(2_000)
    notes = board.call(lambda tx: (tasks.revoke(tx, "r", "why not"), tasks.reclaim_expired(tx), tx.wakes.activity)[2])
    with caplog.at_level(logging.INFO, logger="corrald.activity"):
        activity.write(notes)
    lines = [record.getMessage() for record in caplog.records if record.name == "corrald.activity"]
    assert "task r: the claim of w1 was revoked (why not)" in lines
    assert "task t: the attempt of w1 timed out (attempt 1)" in lines


def test_revoking_a_claim_whose_lease_ran_out_finds_no_live_claim(board, clock):
    board.add("w1")
    board.create(spec("t", lease_ms=LEASE, max_attempts=3))
    grant = board.claim("w1")
    clock.advance(LEASE)
    with pytest.raises(errors.FailedPrecondition):
        board.run(board.board.revoke_claim("t", ""))
    (untouched,) = _history(board, "t")  # a refused call writes nothing: the reaper ends it
    assert untouched.fence == grant.fence and untouched.outcome is None
    board.reap()
    assert _history(board, "t")[0].outcome is ClaimOutcome.EXPIRED
