"""A claim that dies under its holder is told on the holder's open stream at once
(issue #16 items 6 and 10): claim_ended on Idle and Session, after the commit that
ended it; RevokeClaim; the attempt time limit.

The tests check the order: the notice is the holder's next event, what it says is on
the board when it arrives (it follows the commit), and the job that ended an expired
lease or a timed-out attempt ran at its deadline, not before. How soon the notice
follows is measured in bench/latency.py (targets 3r and 3e). Leases and attempt limits
are real time here (both at least 1 s): the tests wait by reading streams with
deadlines.
"""

from __future__ import annotations

import time

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.support import wait_until

from .wire import assert_status, duration, rpc_error, spec, ts_seconds

pytestmark = pytest.mark.timeout(40)

CLOCK_SLACK = 0.05


def _open(mate, transport: str):
    return mate.session() if transport == "session" else mate.idle()


def _writes(client, task_id: str, token: str):
    return [
        lambda: client.teammate.RenewLease(pb.RenewLeaseRequest(task_id=task_id, claim_token=token)),
        lambda: client.teammate.CompleteTask(pb.CompleteTaskRequest(task_id=task_id, claim_token=token)),
        lambda: client.teammate.FailTask(pb.FailTaskRequest(task_id=task_id, claim_token=token, error="x")),
        lambda: client.teammate.ReleaseTask(pb.ReleaseTaskRequest(task_id=task_id, claim_token=token)),
    ]


def _revoke(daemon, task_id: str, reason: str = ""):
    return daemon.lead.lead.RevokeClaim(pb.RevokeClaimRequest(task_id=task_id, reason=reason))


def _ended_at(daemon, task_id: str, error: str) -> float:
    """When the daemon's job that ended the claim ran (the time of its Watch event,
    on the daemon's clock, which is this host's): the commit follows within the job."""
    event = daemon.watch(0).next_matching(
        lambda r: r.task_changed.id == task_id and r.task_changed.error == error, what=f"{task_id}: {error}"
    )
    return ts_seconds(event.time)


def _assert_told_after_the_deadline(daemon, told_at: float, deadline: float, task_id: str, error: str) -> None:
    """The job that ended the claim ran at its deadline, not before, and the notice came
    after that job."""
    ended_at = _ended_at(daemon, task_id, error)
    assert ended_at >= deadline - CLOCK_SLACK, f"the claim was ended {(deadline - ended_at) * 1000:.0f} ms early"
    assert told_at >= ended_at - CLOCK_SLACK, f"told {(ended_at - told_at) * 1000:.0f} ms before the job ended it"


def _notice(stream, claim: pb.Claim, reason: int) -> pb.ClaimEnded:
    """The stream's next event: claim_ended for `claim`."""
    ended = stream.next_event("claim_ended", timeout=5.0)
    assert (ended.task_id, ended.claim_token, ended.reason) == (claim.task.id, claim.claim_token, reason)
    return ended


@pytest.mark.parametrize("transport", ["idle", "session"])
def test_revoke_tells_the_holder_and_kills_its_token(daemon, transport):
    mate = daemon.add_teammate("ann")
    daemon.create_tasks(spec("t", lease=30.0, max_attempts=1))
    stream = _open(mate, transport)
    claim = stream.next_event("claim")

    revoked = _revoke(daemon, "t", "plan changed").task
    assert revoked.state == pb.TASK_STATE_PENDING and revoked.owner == ""
    ended = _notice(stream, claim, pb.CLAIM_END_REASON_REVOKED)
    assert ended.detail == "plan changed"
    # The notice follows the commit: what it says is on the board already.
    task = daemon.lead.board.GetTask(pb.GetTaskRequest(id="t"))
    assert task.attempts[0].outcome == pb.ATTEMPT_OUTCOME_REVOKED and task.attempts[0].error == "plan changed"
    assert task.attempts[0].fence == claim.fence

    for write in _writes(mate, "t", claim.claim_token):
        assert_status(rpc_error(write), grpc.StatusCode.FAILED_PRECONDITION, reason="CLAIM_REVOKED")
    # Ready again at once and not a failure (max_attempts=1): the holder's stream
    # claims it back, with a larger fence.
    again = stream.next_event("claim")
    assert again.task.id == "t" and again.fence > claim.fence and again.attempt == 1
    stream.cancel()


def test_revoke_refuses_what_has_no_live_claim(daemon):
    daemon.create_tasks(spec("pending"))
    for task_id, code in (("pending", grpc.StatusCode.FAILED_PRECONDITION), ("nope", grpc.StatusCode.NOT_FOUND)):
        assert_status(rpc_error(_revoke, daemon, task_id), code)
    mate = daemon.add_teammate()
    stream = mate.idle()
    stream.next_event("claim")
    stream.cancel()  # the claim stays held; no stream takes the task back after the revoke
    _revoke(daemon, "pending")
    assert_status(rpc_error(_revoke, daemon, "pending"), grpc.StatusCode.FAILED_PRECONDITION)  # revoked already
    assert_status(rpc_error(_revoke, daemon, "pending", "x" * 70_000), grpc.StatusCode.INVALID_ARGUMENT, field="reason")
    # Only the Lead may revoke.
    assert_status(
        rpc_error(mate.lead.RevokeClaim, pb.RevokeClaimRequest(task_id="pending")), grpc.StatusCode.PERMISSION_DENIED
    )


@pytest.mark.parametrize("transport", ["idle", "session"])
def test_cancel_and_removal_tell_the_holder(daemon, transport):
    mate = daemon.add_teammate("ann")
    daemon.create_tasks(spec("doomed", lease=30.0), spec("kept", lease=30.0))
    stream = _open(mate, transport)
    doomed = stream.next_event("claim")
    daemon.lead.lead.CancelTasks(pb.CancelTasksRequest(ids=["doomed"]))
    _notice(stream, doomed, pb.CLAIM_END_REASON_TASK_CANCELED)
    assert daemon.get_task("doomed").state == pb.TASK_STATE_CANCELED

    kept = stream.next_event("claim")
    daemon.lead.lead.RemoveTeammate(pb.RemoveTeammateRequest(name="ann"))
    _notice(stream, kept, pb.CLAIM_END_REASON_TEAMMATE_REMOVED)
    assert daemon.get_task("kept").state == pb.TASK_STATE_PENDING
    code, _ = stream.wait_end()
    assert code == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("transport", ["idle", "session"])
def test_an_expired_lease_is_told_when_it_is_reclaimed(daemon, transport):
    mate = daemon.add_teammate("ann")
    daemon.create_tasks(spec("t", lease=1.0, max_attempts=3))
    stream = _open(mate, transport)
    claim = stream.next_event("claim")
    lease_end = ts_seconds(claim.lease_expire_time)
    ended = stream.next_event("claim_ended", timeout=5.0)
    _assert_told_after_the_deadline(daemon, time.time(), lease_end, "t", "lease expired on attempt 1")
    assert ended.reason == pb.CLAIM_END_REASON_LEASE_EXPIRED and ended.claim_token == claim.claim_token
    task = daemon.get_task("t")  # the holder may be frozen: its claims wait until it shows life
    assert task.state == pb.TASK_STATE_PENDING and task.error == "lease expired on attempt 1"
    stream.cancel()


@pytest.mark.parametrize("transport", ["idle", "session"])
def test_a_teammate_that_shows_life_after_its_lease_expired_gets_the_next_task_at_once(daemon, transport):
    """Told its lease ended, the stream looks again: its slot is free, and claims wait only until
    the teammate shows life (a call of its own), not until the poll interval (30 s here)."""
    mate = daemon.add_teammate("ann")
    daemon.create_tasks(spec("t1", lease=1.0))
    stream = mate.session(poll_interval=30) if transport == "session" else mate.idle(poll_interval=30)
    claim = stream.next_event("claim")
    stream.next_event("claim_ended", timeout=5.0)
    refused = rpc_error(mate.complete, claim)  # its own call: it is alive, if late
    assert_status(refused, grpc.StatusCode.FAILED_PRECONDITION)
    daemon.create_tasks(spec("t2"))
    # The task it let expire is ready again too: whichever comes first, within seconds.
    again = stream.next_event("claim", timeout=5.0)
    assert again.task.id in {"t1", "t2"} and again.claim_token != claim.claim_token
    stream.cancel()


@pytest.mark.parametrize("transport", ["idle", "session"])
def test_renewing_does_not_outlast_the_attempt_timeout(daemon, transport):
    mate = daemon.add_teammate("ann")
    # A renewal lands after 0.5 s (a whole new lease would outlast the limit) and before the
    # lease ends at 2 s: a window wide enough for a loaded machine.
    timed = spec("t", lease=2.0, max_attempts=2, retry_backoff=0.3, attempt_timeout=duration(2.5))
    daemon.create_tasks(timed)
    stream = _open(mate, transport)
    claim = stream.next_event("claim")
    deadline = ts_seconds(claim.lease_expire_time) + 0.5  # lease 2 s, limit 2.5 s after the claim
    assert claim.task.attempt_timeout == duration(2.5)
    # Past the point where a whole new lease would outlast the limit, the claim still renews.
    renewed = ts_seconds(stream.expect_quiet(0.6, then=lambda: mate.renew(claim)).lease_expire_time)
    assert renewed == pytest.approx(deadline, abs=0.002), "a renewal stops at the attempt deadline"

    ended = stream.next_event("claim_ended", timeout=5.0)
    _assert_told_after_the_deadline(daemon, time.time(), deadline, "t", "attempt timed out after 2.5 s")
    assert ended.reason == pb.CLAIM_END_REASON_ATTEMPT_TIMEOUT and ended.claim_token == claim.claim_token
    assert ended.detail == "attempt timed out after 2.5 s"
    task = daemon.lead.board.GetTask(pb.GetTaskRequest(id="t"))
    assert task.attempts[0].outcome == pb.ATTEMPT_OUTCOME_FAILED
    assert task.attempts[0].error == "attempt timed out after 2.5 s"
    assert task.task.state in (pb.TASK_STATE_PENDING, pb.TASK_STATE_IN_PROGRESS)
    assert task.task.ready_time.seconds > 0, "the retry waits for its backoff"
    for write in _writes(mate, "t", claim.claim_token):
        assert_status(rpc_error(write), grpc.StatusCode.FAILED_PRECONDITION, reason="ATTEMPT_TIMEOUT")

    # The retry comes after the backoff, and its timeout is the last attempt's: FAILED.
    second = stream.next_event("claim", timeout=5.0)
    assert second.attempt == 2 and second.fence > claim.fence
    claimed_at = ts_seconds(second.task.lease_expire_time) - 2.0
    assert claimed_at >= ts_seconds(task.task.ready_time) - CLOCK_SLACK, "claimed before its backoff ended"
    renewed = ts_seconds(stream.expect_quiet(0.6, then=lambda: mate.renew(second)).lease_expire_time)
    assert renewed == pytest.approx(ts_seconds(second.lease_expire_time) + 0.5, abs=0.002), "ends at the limit"
    assert stream.next_event("claim_ended", timeout=5.0).reason == pb.CLAIM_END_REASON_ATTEMPT_TIMEOUT
    final = daemon.get_task("t")
    assert final.state == pb.TASK_STATE_FAILED and final.error == "attempt timed out after 2.5 s"
    stream.cancel()


def test_attempt_timeout_out_of_range_is_refused_and_nothing_written(daemon):
    for seconds in (0.0, 0.5, 7 * 24 * 3600 + 1):
        error = rpc_error(daemon.create_tasks, spec("t", attempt_timeout=duration(seconds)))
        assert_status(error, grpc.StatusCode.INVALID_ARGUMENT, field="tasks[0].attempt_timeout")
    assert daemon.all_tasks() == []
    (created,) = daemon.create_tasks(spec("t", attempt_timeout=duration(7 * 24 * 3600)))
    assert daemon.get_task("t").attempt_timeout == duration(7 * 24 * 3600)
    assert not daemon.create_tasks(spec("u"))[0].HasField("attempt_timeout")
    assert not daemon.get_task("u").HasField("attempt_timeout")


@pytest.mark.timeout(60)
def test_a_restart_keeps_the_attempt_deadline(corrald):
    before = corrald()
    mate = before.add_teammate("ann")
    before.create_tasks(spec("t", lease=20.0, max_attempts=1, attempt_timeout=duration(8.0)))  # outlasts a slow restart
    stream = mate.idle()
    claim = stream.next_event("claim")
    deadline = ts_seconds(claim.lease_expire_time)  # the limit comes before the 20 s lease
    before.kill()
    stream.wait_end(10)

    after = corrald(before.state_dir)
    task = after.get_task("t")
    assert task.state == pb.TASK_STATE_IN_PROGRESS
    assert ts_seconds(task.lease_expire_time) == pytest.approx(deadline, abs=0.002), "not a fresh 20 s lease"
    again = after.client(mate.token, "ann").idle()
    assert again.next_event("claim").claim_token == claim.claim_token  # held across the restart
    ended = again.next_event("claim_ended", timeout=10.0)
    assert ended.reason == pb.CLAIM_END_REASON_ATTEMPT_TIMEOUT
    assert time.time() >= deadline - CLOCK_SLACK
    assert after.get_task("t").state == pb.TASK_STATE_FAILED
    again.cancel()


COMMIT_DELAY_MS = 1500


@pytest.mark.parametrize("transport", ["idle", "session"])
def test_claim_ended_waits_for_the_commit_that_ended_the_claim(corrald, transport):
    """The revoke's batch waits COMMIT_DELAY_MS between its job and its COMMIT (a failpoint on
    the Lead's third batch, after AddTeammate and CreateTasks): all that time the holder's
    stream stays quiet, since the claim has not ended yet for anyone; claim_ended follows the
    commit, and the revoke is answered after it too."""
    daemon = corrald(failpoints=f"before_commit:lead=sleep:{COMMIT_DELAY_MS}:3")
    mate = daemon.add_teammate("ann")
    daemon.create_tasks(spec("t", lease=30.0))
    stream = _open(mate, transport)
    claim = stream.next_event("claim")
    revoked = daemon.lead.lead.RevokeClaim.future(pb.RevokeClaimRequest(task_id="t", reason="now"))
    wait_until(lambda: "failpoint: sleeping" in daemon.latest_log(), 5, "the revoke's batch waiting to commit")
    assert not stream.expect_quiet(COMMIT_DELAY_MS / 1000 * 0.6, then=revoked.done)
    ended = stream.next_event("claim_ended", timeout=10)
    assert (ended.task_id, ended.claim_token, ended.reason) == ("t", claim.claim_token, pb.CLAIM_END_REASON_REVOKED)
    assert revoked.result(timeout=10).task.state == pb.TASK_STATE_PENDING
