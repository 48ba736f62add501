"""Attempt history on the wire (issue #16): GetTask's `attempts` and the
`previous_attempt` of a claim, on Idle, on Session (handoff included), on a
claim sent again after a reconnect, and across a restart."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import code_pb2

from corral.v1 import corral_pb2 as pb

from .wire import assert_status, rpc_error, spec, ts_seconds

pytestmark = pytest.mark.timeout(60)

LEASE = 30.0  # no lease runs out here: expiry is the fake clock's, in tests/server


def _fail(client, claim: pb.Claim, error: str, retryable: bool = True) -> pb.Task:
    request = pb.FailTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token, error=error, retryable=retryable)
    return client.teammate.FailTask(request).task


def _release(client, claim: pb.Claim) -> pb.Task:
    return client.teammate.ReleaseTask(pb.ReleaseTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token)).task


def _history(daemon, task_id: str) -> pb.GetTaskResponse:
    return daemon.lead.board.GetTask(pb.GetTaskRequest(task_id=task_id))


def test_get_task_lists_every_claim_oldest_first_without_tokens(daemon):
    ann, bob = daemon.add_teammate("ann"), daemon.add_teammate("bob")
    daemon.create_tasks(spec("t", lease=LEASE, max_attempts=3))
    assert list(_history(daemon, "t").attempts) == [], "a task never claimed has no attempts"

    ann_idle = ann.idle()
    first = ann_idle.next_event("claim")
    assert not first.HasField("previous_attempt"), "a first claim carries no previous attempt"
    (live,) = _history(daemon, "t").attempts
    assert (live.attempt, live.owner, live.fence) == (1, "ann", first.fence)
    assert live.outcome == pb.ATTEMPT_OUTCOME_IN_PROGRESS and not live.HasField("end_time") and live.error == ""
    ann_idle.cancel()

    _fail(ann, first, "compiler crashed")
    bob_idle = bob.idle()
    second = bob_idle.next_event("claim")
    previous = second.previous_attempt
    assert (previous.attempt, previous.owner, previous.fence) == (1, "ann", first.fence)
    assert previous.outcome == pb.ATTEMPT_OUTCOME_FAILED and previous.error == "compiler crashed"
    assert previous.HasField("end_time") and previous.HasField("claim_time")
    # It ended before the claim that follows it began (its lease runs from that claim).
    assert ts_seconds(previous.claim_time) <= ts_seconds(previous.end_time)
    assert ts_seconds(previous.end_time) <= ts_seconds(second.lease_expire_time) - LEASE + 1e-6

    _release(bob, second)
    third = bob_idle.next_event("claim")
    assert third.attempt == 2 and third.previous_attempt.outcome == pb.ATTEMPT_OUTCOME_RELEASED
    assert third.previous_attempt.fence == second.fence and third.previous_attempt.error == ""
    bob.complete(third)
    bob_idle.cancel()

    response = _history(daemon, "t")
    assert [(a.attempt, a.owner, a.outcome, a.error) for a in response.attempts] == [
        (1, "ann", pb.ATTEMPT_OUTCOME_FAILED, "compiler crashed"),
        (2, "bob", pb.ATTEMPT_OUTCOME_RELEASED, ""),
        (2, "bob", pb.ATTEMPT_OUTCOME_COMPLETED, ""),
    ]
    assert [a.fence for a in response.attempts] == [first.fence, second.fence, third.fence]
    assert all(a.HasField("end_time") for a in response.attempts)
    assert response.attempts[-1].end_time == response.task.finish_time
    wire = response.SerializeToString()
    for claim in (first, second, third):
        assert claim.claim_token.encode() not in wire, "GetTask must never show a claim token"


def test_a_cancel_ends_the_live_attempt_with_its_reason(daemon):
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("t", lease=LEASE))
    idle = ann.idle()
    idle.next_event("claim")
    daemon.lead.lead.CancelTasks(pb.CancelTasksRequest(ids=["t"]))
    (ended,) = _history(daemon, "t").attempts
    assert ended.outcome == pb.ATTEMPT_OUTCOME_CANCELED and ended.error == "canceled by the lead"
    assert ended.HasField("end_time")
    idle.cancel()


def test_get_task_of_an_unknown_task_is_not_found(daemon):
    assert_status(rpc_error(_history, daemon, "nope"), grpc.StatusCode.NOT_FOUND)


def test_a_session_handoff_carries_the_previous_attempt_of_a_retried_task(daemon):
    ada, bob = daemon.add_teammate("ada"), daemon.add_teammate("bob")
    daemon.create_tasks(spec("retried", lease=LEASE, max_attempts=3))
    bob_idle = bob.idle()
    retried = bob_idle.next_event("claim")
    bob_idle.cancel()  # bob keeps the claim, but no stream of his claims again

    daemon.create_tasks(spec("first", lease=LEASE))
    session = ada.session(slots=1)
    first = session.next_event("claim")
    assert first.task.id == "first"
    _fail(bob, retried, "out of memory")  # back to PENDING while ada's one slot is full
    handed = daemon.stats().claims_handed_off
    response = session.complete(first)
    assert response.op_result.status.code == code_pb2.OK
    assert response.WhichOneof("event") == "claim", "the retried task rides with the completion"
    again = response.claim
    assert again.task.id == "retried" and again.attempt == 2
    assert again.previous_attempt.owner == "bob" and again.previous_attempt.error == "out of memory"
    assert again.previous_attempt.outcome == pb.ATTEMPT_OUTCOME_FAILED
    assert again.previous_attempt.fence == retried.fence and again.previous_attempt.HasField("end_time")
    assert daemon.stats().claims_handed_off == handed + 1

    # A new stream sends the held claim again, its previous attempt with it.
    session.cancel()
    resumed = ada.session(slots=1)
    sent_again = resumed.next_event("claim")
    assert sent_again.claim_token == again.claim_token
    assert sent_again.previous_attempt == again.previous_attempt
    resumed.cancel()
    idle = ada.idle(slots=1)
    assert idle.next_event("claim").previous_attempt == again.previous_attempt, "and so does an Idle stream"
    idle.cancel()


def test_get_task_shows_the_most_recent_hundred_attempts(daemon):
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("busy", lease=LEASE))
    idle = ann.idle()
    fences = []
    for _ in range(105):
        claim = idle.next_event("claim")
        fences.append(claim.fence)
        _release(ann, claim)
    last = idle.next_event("claim")
    fences.append(last.fence)
    attempts = _history(daemon, "busy").attempts
    assert len(attempts) == 100
    assert [a.fence for a in attempts] == fences[-100:], "the newest, oldest first"
    assert attempts[-1].outcome == pb.ATTEMPT_OUTCOME_IN_PROGRESS
    idle.cancel()


def test_long_errors_keep_the_reply_under_the_limit_with_the_newest_attempts(daemon):
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("flaky", lease=LEASE, max_attempts=70))
    idle = ann.idle()
    fences = []
    for round_ in range(70):
        claim = idle.next_event("claim")
        fences.append(claim.fence)
        _fail(ann, claim, f"{round_:03d}" + "x" * (64 * 1024 - 3))  # the longest error FailTask takes
    idle.cancel()
    response = _history(daemon, "flaky")  # 70 x 64 KiB would not pass gRPC's 4 MiB default
    assert response.task.state == pb.TASK_STATE_FAILED
    shown = [a.fence for a in response.attempts]
    assert 0 < len(shown) < 70 and shown == fences[-len(shown) :]
    assert response.attempts[-1].error.startswith("069")


def test_the_history_survives_a_restart(corrald):
    before = corrald()
    ann = before.add_teammate("ann")
    before.create_tasks(spec("t", lease=LEASE, max_attempts=3))
    idle = ann.idle()
    first = idle.next_event("claim")
    _fail(ann, first, "lost on the way")
    held = idle.next_event("claim")
    idle.cancel()
    history = list(_history(before, "t").attempts)
    before.stop_and_check()

    after = corrald(state_dir=before.state_dir)
    assert list(_history(after, "t").attempts) == history
    ann_again = after.client(ann.token, "ann")
    resent = ann_again.idle()
    claim = resent.next_event("claim")
    assert claim.claim_token == held.claim_token
    assert claim.previous_attempt == history[0] and claim.previous_attempt.error == "lost on the way"
    resent.cancel()


def _watched_attempts_used(daemon, task_id: str) -> list[tuple[int, int, int]]:
    """(state, attempt, attempts_used) of each task_changed event of `task_id`, replayed
    up to its completion (the last change the test makes)."""
    seen = []
    call = daemon.lead.lead.Watch(pb.WatchRequest(after_seq=0), timeout=5)
    try:
        for response in call:
            if response.HasField("task_changed") and response.task_changed.id == task_id:
                task = response.task_changed
                seen.append((task.state, task.attempt, task.attempts_used))
                if task.state == pb.TASK_STATE_COMPLETED:
                    break
    finally:
        call.cancel()
    return seen


def test_attempts_used_counts_what_max_attempts_counts_and_a_reset_clears_it(daemon):
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("t", lease=LEASE, max_attempts=2))
    fresh = _history(daemon, "t").task
    assert (fresh.attempt, fresh.attempts_used) == (0, 0)

    idle = ann.idle()
    first = idle.next_event("claim")
    assert (first.task.attempt, first.task.attempts_used) == (1, 1), "the live claim uses an attempt"
    failed = _fail(ann, first, "flaky")
    assert (failed.state, failed.attempt, failed.attempts_used) == (pb.TASK_STATE_PENDING, 1, 1)

    second = idle.next_event("claim")
    assert (second.task.attempt, second.task.attempts_used) == (2, 2)
    released = _release(ann, second)
    assert (released.attempt, released.attempts_used) == (2, 1), "a release uses no attempt"
    third = idle.next_event("claim")
    idle.cancel()
    assert (third.task.attempt, third.task.attempts_used) == (2, 2)
    last = _fail(ann, third, "flaky again")
    assert (last.state, last.attempt, last.attempts_used) == (pb.TASK_STATE_FAILED, 2, 2)

    (revived,) = daemon.lead.lead.RetryTasks(pb.RetryTasksRequest(ids=["t"], reset_attempts=True)).tasks
    assert (revived.state, revived.attempt, revived.attempts_used) == (pb.TASK_STATE_PENDING, 2, 0)
    shown = _history(daemon, "t").task
    assert (shown.attempt, shown.attempts_used) == (2, 0), "GetTask shows the reset before any claim"
    (listed,) = daemon.lead.board.ListTasks(pb.ListTasksRequest()).tasks
    assert listed.attempts_used == 0

    idle = ann.idle()
    fourth = idle.next_event("claim")
    idle.cancel()
    assert (fourth.task.attempt, fourth.task.attempts_used) == (1, 1)
    done = ann.complete(fourth)
    assert (done.state, done.attempts_used) == (pb.TASK_STATE_COMPLETED, 1), "the completing claim counts"
    assert (_history(daemon, "t").attempts[-1].attempt, len(_history(daemon, "t").attempts)) == (1, 4)

    # The event log tells the same story, the reset included.
    watched = _watched_attempts_used(daemon, "t")
    assert (pb.TASK_STATE_PENDING, 2, 0) in watched, watched
    assert watched[-1] == (pb.TASK_STATE_COMPLETED, 1, 1), watched
