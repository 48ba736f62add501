"""Claims and leases (design §2.1–2.4, §2.9, §4 "Which error a dead token gets").

Leases are real time here (the minimum lease is 1 s), so expiry tests wait
about a second by reading streams with deadlines, never by sleeping.
"""

from __future__ import annotations

import secrets
import time

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.support import wait_until

from .wire import assert_status, rpc_error, spec, ts_seconds

CLOCK_SLACK = 0.05  # seconds; the daemon and the tests share the machine's clock


def _renew(client, task_id: str, token: str):
    return client.teammate.RenewLease(pb.RenewLeaseRequest(task_id=task_id, claim_token=token))


def _complete(client, task_id: str, token: str, result: bytes = b""):
    return client.teammate.CompleteTask(pb.CompleteTaskRequest(task_id=task_id, claim_token=token, result=result))


def _fail(client, task_id: str, token: str, retryable: bool = True, error: str = "boom"):
    return client.teammate.FailTask(
        pb.FailTaskRequest(task_id=task_id, claim_token=token, error=error, retryable=retryable)
    )


def _release(client, task_id: str, token: str):
    return client.teammate.ReleaseTask(pb.ReleaseTaskRequest(task_id=task_id, claim_token=token))


def _every_write(client, task_id: str, token: str):
    """Each claim-bound write with this token, as (name, thunk)."""
    return [
        ("RenewLease", lambda: _renew(client, task_id, token)),
        ("CompleteTask", lambda: _complete(client, task_id, token, b"stale")),
        ("FailTask", lambda: _fail(client, task_id, token)),
        ("ReleaseTask", lambda: _release(client, task_id, token)),
    ]


@pytest.mark.timeout(30)
def test_expired_lease_moves_the_task_to_another_teammate(daemon):
    a, b = daemon.add_teammate("ann"), daemon.add_teammate("bob")
    daemon.create_tasks(spec("leased", lease=1.0, max_attempts=3))

    opened = time.time()
    stream_a = a.idle()
    claim_a = stream_a.next_event("claim")
    assert claim_a.task.id == "leased" and claim_a.attempt == 1 and claim_a.fence > 0
    expires = ts_seconds(claim_a.lease_expire_time)
    assert opened + 1.0 - CLOCK_SLACK <= expires <= time.time() + 1.0 + CLOCK_SLACK, "lease != claim time + 1 s"
    assert len(claim_a.claim_token) >= 22  # >= 128 bits of randomness, in any text encoding
    assert claim_a.task.state == pb.TASK_STATE_IN_PROGRESS and claim_a.task.owner == "ann"
    assert claim_a.lease_expire_time == claim_a.task.lease_expire_time
    stream_a.cancel()  # ann goes quiet: she keeps the claim but never renews

    stream_b = b.idle()
    claim_b = stream_b.next_event("claim", timeout=5.0)  # after about one second
    assert time.time() >= ts_seconds(claim_a.lease_expire_time) - CLOCK_SLACK, "reclaimed before the lease ended"
    assert claim_b.task.id == "leased"
    assert claim_b.attempt == 2
    assert claim_b.fence > claim_a.fence
    assert claim_b.claim_token != claim_a.claim_token
    assert claim_b.task.owner == "bob"
    before = time.time()
    renewed = _renew(b, "leased", claim_b.claim_token)  # keep bob's 1 s lease alive through the checks
    assert ts_seconds(renewed.lease_expire_time) >= before + 1.0 - CLOCK_SLACK
    assert ts_seconds(renewed.lease_expire_time) >= ts_seconds(claim_b.lease_expire_time)

    def keep_bob() -> None:  # bob's lease is 1 s too: renew it between groups of checks
        _renew(b, "leased", claim_b.claim_token)

    # Ann's token ended by expiry: every write gets LEASE_EXPIRED, never a silent success.
    for _name, call in _every_write(a, "leased", claim_a.claim_token):
        assert_status(rpc_error(call), grpc.StatusCode.FAILED_PRECONDITION, reason="LEASE_EXPIRED")
        keep_bob()
    # Any token that is not the caller's claim on this task: CLAIM_TOKEN_MISMATCH.
    for client, token in (
        (a, secrets.token_urlsafe(24)),
        (a, claim_b.claim_token),
        (b, claim_a.claim_token),
        (b, secrets.token_urlsafe(24)),
    ):
        for _name, call in _every_write(client, "leased", token):
            assert_status(rpc_error(call), grpc.StatusCode.FAILED_PRECONDITION, reason="CLAIM_TOKEN_MISMATCH")
        keep_bob()
    assert daemon.get_task("leased").owner == "bob"

    done = _complete(b, "leased", claim_b.claim_token, b"result-1").task
    assert done.state == pb.TASK_STATE_COMPLETED and done.result == b"result-1"
    assert done.owner == "bob" and done.attempt == 2 and done.HasField("finish_time")
    again = _complete(b, "leased", claim_b.claim_token, b"result-1").task
    assert again == done, "a repeated CompleteTask with the same token must return the stored result"
    other_result = _complete(b, "leased", claim_b.claim_token, b"something else").task
    assert other_result.result == b"result-1" and other_result.finish_time == done.finish_time
    assert daemon.get_task("leased") == done

    # Completed once: ann's expired token still gets LEASE_EXPIRED, anything else a mismatch.
    assert_status(
        rpc_error(_complete, a, "leased", claim_a.claim_token),
        grpc.StatusCode.FAILED_PRECONDITION,
        reason="LEASE_EXPIRED",
    )
    assert_status(
        rpc_error(_complete, b, "leased", secrets.token_urlsafe(24)),
        grpc.StatusCode.FAILED_PRECONDITION,
        reason="CLAIM_TOKEN_MISMATCH",
    )
    for name, call in _every_write(b, "leased", claim_b.claim_token):
        if name == "CompleteTask":
            continue  # idempotent, checked above
        error = rpc_error(call)  # renew / fail / release of a completed claim
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, (name, error.details())
    assert daemon.get_task("leased") == done
    stream_b.cancel()


@pytest.mark.timeout(30)
def test_renewing_keeps_a_short_lease_alive_well_past_its_first_end(daemon):
    a, b = daemon.add_teammate("ann"), daemon.add_teammate("bob")
    daemon.create_tasks(spec("kept", lease=1.0))
    stream_a = a.idle()
    claim = stream_a.next_event("claim")
    first_end = ts_seconds(claim.lease_expire_time)
    stream_b = b.idle()

    last_end = first_end
    for _ in range(8):  # ~2.4 s: more than twice the lease
        # Bob never gets the task while ann renews: her renewal still succeeds after the window.
        before, response = stream_b.expect_quiet(0.3, then=lambda: (time.time(), a.renew(claim)))
        end = ts_seconds(response.lease_expire_time)
        assert end >= before + 1.0 - CLOCK_SLACK, "renew must extend to now + lease_duration"
        assert end >= last_end
        last_end = end
    assert time.time() > first_end + 1.0
    assert daemon.get_task("kept").lease_expire_time == response.lease_expire_time

    done = a.complete(claim)
    assert done.state == pb.TASK_STATE_COMPLETED and done.attempt == 1 and done.owner == "ann"
    stream_a.cancel()
    stream_b.cancel()


@pytest.mark.timeout(30)
def test_cancel_kills_the_live_claim_and_its_dependents(daemon):
    mate = daemon.add_teammate()
    daemon.create_tasks(spec("held"), spec("child", "held"), spec("grandchild", "child"))
    stream = mate.idle()
    claim = stream.next_event("claim")
    assert claim.task.id == "held"

    canceled = daemon.lead.lead.CancelTasks(pb.CancelTasksRequest(ids=["held"])).tasks
    assert {t.id for t in canceled} == {"held", "child", "grandchild"}
    assert all(t.state == pb.TASK_STATE_CANCELED for t in canceled)
    ended = stream.next_event("claim_ended")  # the holder hears of it at once
    assert (ended.task_id, ended.claim_token) == ("held", claim.claim_token)
    assert ended.reason == pb.CLAIM_END_REASON_TASK_CANCELED
    for task_id in ("held", "child", "grandchild"):
        task = daemon.get_task(task_id)
        assert task.state == pb.TASK_STATE_CANCELED and task.HasField("finish_time"), task
        assert not task.HasField("lease_expire_time")

    for _name, call in _every_write(mate, "held", claim.claim_token):
        assert_status(rpc_error(call), grpc.StatusCode.FAILED_PRECONDITION, reason="TASK_CANCELED")
    assert_status(
        rpc_error(_complete, mate, "held", secrets.token_urlsafe(24)),
        grpc.StatusCode.FAILED_PRECONDITION,
        reason="CLAIM_TOKEN_MISMATCH",
    )

    # The slot is free again: the holder's stream claims the next ready task.
    daemon.create_tasks(spec("next"))
    assert stream.next_event("claim").task.id == "next"
    assert daemon.get_task("held").state == pb.TASK_STATE_CANCELED
    stream.cancel()


@pytest.mark.timeout(30)
def test_a_foreign_teammate_cannot_use_a_live_token(daemon):
    a, b = daemon.add_teammate("ann"), daemon.add_teammate("bob")
    daemon.create_tasks(spec("mine"))
    stream = a.idle()
    claim = stream.next_event("claim")
    for _name, call in _every_write(b, "mine", claim.claim_token):
        assert_status(rpc_error(call), grpc.StatusCode.FAILED_PRECONDITION, reason="CLAIM_TOKEN_MISMATCH")
    task = daemon.get_task("mine")
    assert task.state == pb.TASK_STATE_IN_PROGRESS and task.owner == "ann"
    # A token for the wrong task id is not a claim on that task either.
    daemon.create_tasks(spec("other"))
    assert_status(
        rpc_error(_complete, a, "other", claim.claim_token),
        grpc.StatusCode.FAILED_PRECONDITION,
        reason="CLAIM_TOKEN_MISMATCH",
    )
    assert_status(rpc_error(_complete, a, "no-such-task", claim.claim_token), grpc.StatusCode.NOT_FOUND)
    assert a.complete(claim, b"ok").state == pb.TASK_STATE_COMPLETED
    stream.cancel()


@pytest.mark.timeout(30)
def test_expiry_with_no_attempts_left_fails_the_task_and_cancels_dependents(daemon):
    mate = daemon.add_teammate()
    daemon.create_tasks(spec("once", lease=1.0, max_attempts=1), spec("after", "once"))
    stream = mate.idle()
    claim = stream.next_event("claim")
    stream.cancel()
    failed = wait_until(
        lambda: (t := daemon.get_task("once")).state == pb.TASK_STATE_FAILED and t,
        timeout=5.0,
        what="task FAILED after its only lease expired",
    )
    assert failed.attempt == 1 and failed.HasField("finish_time")
    assert daemon.get_task("after").state == pb.TASK_STATE_CANCELED
    assert_status(
        rpc_error(_complete, mate, "once", claim.claim_token),
        grpc.StatusCode.FAILED_PRECONDITION,
        reason="LEASE_EXPIRED",
    )


@pytest.mark.timeout(30)
def test_release_keeps_the_attempt_and_failures_use_them_up(daemon):
    mate = daemon.add_teammate()
    daemon.create_tasks(spec("flaky", max_attempts=2), spec("downstream", "flaky"))
    stream = mate.idle()

    first = stream.next_event("claim")
    assert first.attempt == 1
    released = _release(mate, "flaky", first.claim_token).task
    assert released.state == pb.TASK_STATE_PENDING and released.owner == ""
    second = stream.next_event("claim")  # the freed slot claims it again
    assert second.attempt == 1, "a released claim does not count as an attempt"
    assert second.fence > first.fence and second.claim_token != first.claim_token
    assert_status(
        rpc_error(_complete, mate, "flaky", first.claim_token),
        grpc.StatusCode.FAILED_PRECONDITION,
        reason="CLAIM_TOKEN_MISMATCH",
    )

    retried = _fail(mate, "flaky", second.claim_token, retryable=True, error="try again").task
    assert retried.state == pb.TASK_STATE_PENDING and retried.error == "try again"
    third = stream.next_event("claim")
    assert third.attempt == 2 and third.fence > second.fence
    final = _fail(mate, "flaky", third.claim_token, retryable=True, error="out of attempts").task
    assert final.state == pb.TASK_STATE_FAILED and final.attempt == 2 and final.HasField("finish_time")
    assert daemon.get_task("downstream").state == pb.TASK_STATE_CANCELED
    assert_status(
        rpc_error(_fail, mate, "flaky", third.claim_token),
        grpc.StatusCode.FAILED_PRECONDITION,
        reason="CLAIM_TOKEN_MISMATCH",
    )
    # No third attempt: a task created now is the next claim.
    assert stream.expect_quiet(0.3, then=lambda: daemon.create_tasks(spec("next")), arrives="claim").task.id == "next"
    stream.cancel()


@pytest.mark.timeout(30)
def test_non_retryable_failure_is_final(daemon):
    mate = daemon.add_teammate()
    daemon.create_tasks(spec("fatal", max_attempts=5), spec("child", "fatal"), spec("grandchild", "child"))
    stream = mate.idle()
    claim = stream.next_event("claim")
    task = _fail(mate, "fatal", claim.claim_token, retryable=False, error="fatal error").task
    assert task.state == pb.TASK_STATE_FAILED and task.error == "fatal error" and task.attempt == 1
    assert daemon.get_task("child").state == pb.TASK_STATE_CANCELED
    assert daemon.get_task("grandchild").state == pb.TASK_STATE_CANCELED
    # No retry: a task created now is the next claim.
    assert stream.expect_quiet(0.3, then=lambda: daemon.create_tasks(spec("next")), arrives="claim").task.id == "next"
    stream.cancel()


@pytest.mark.timeout(30)
def test_a_task_is_not_claimed_before_its_dependencies_complete(daemon):
    mate = daemon.add_teammate()
    daemon.create_tasks(spec("first"), spec("second", "first"), spec("third", "first", "second"))
    stream = mate.idle(slots=3)
    first = stream.next_event("claim")
    assert first.task.id == "first"
    second = stream.expect_quiet(0.4, then=lambda: mate.complete(first), arrives="claim")
    assert second.task.id == "second"
    assert list(second.task.depends_on) == ["first"]
    assert stream.expect_quiet(0.4, then=lambda: mate.complete(second), arrives="claim").task.id == "third"
    stream.cancel()


@pytest.mark.timeout(30)
def test_priority_then_board_order_and_required_role(daemon):
    plain, builder = daemon.add_teammate("plain"), daemon.add_teammate("builder", roles=["build"])
    daemon.create_tasks(
        spec("low", priority=-1),
        spec("first-normal"),
        spec("second-normal"),
        spec("high", priority=10),
        spec("build-only", priority=100, required_role="build"),
    )
    stream = plain.idle(slots=5)  # a slot left free for "build-only", which needs a role plain lacks
    order = [stream.next_event("claim").task.id for _ in range(4)]
    assert order == ["high", "first-normal", "second-normal", "low"]
    assert stream.expect_quiet(0.3, then=lambda: daemon.create_tasks(spec("last")), arrives="claim").task.id == "last"
    other = builder.idle()
    assert other.next_event("claim").task.id == "build-only"
    stream.cancel()
    other.cancel()


@pytest.mark.timeout(60)
def test_every_task_is_claimed_exactly_once_across_a_team(daemon):
    count = 40
    mates = [daemon.add_teammate(f"w{i}") for i in range(4)]
    daemon.create_tasks(*(spec(f"job-{i:02d}", priority=i % 3) for i in range(count)))
    streams = [m.idle(slots=2) for m in mates]
    claims: dict[str, list[tuple[str, pb.Claim]]] = {}
    deadline = time.monotonic() + 30
    done = 0
    while done < count:
        assert time.monotonic() < deadline, f"only {done}/{count} tasks completed"
        for mate, stream in zip(mates, streams, strict=True):
            item = stream.try_next(0.005)
            if item is None:
                continue
            claim = item.claim
            assert item.WhichOneof("event") == "claim", item
            claims.setdefault(claim.task.id, []).append((mate.name, claim))
            finished = mate.complete(claim, mate.name.encode())
            assert finished.state == pb.TASK_STATE_COMPLETED
            done += 1
    assert sorted(claims) == [f"job-{i:02d}" for i in range(count)]
    assert all(len(v) == 1 for v in claims.values()), {k: v for k, v in claims.items() if len(v) > 1}
    tokens = [c.claim_token for v in claims.values() for _, c in v]
    fences = [c.fence for v in claims.values() for _, c in v]
    assert len(set(tokens)) == count and len(set(fences)) == count
    for task in daemon.all_tasks():
        assert task.state == pb.TASK_STATE_COMPLETED and task.attempt == 1
        assert task.result == task.owner.encode() == claims[task.id][0][0].encode()
    for stream in streams:
        stream.cancel()
