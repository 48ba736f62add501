"""A claim is never lost in a broken stream (design §5 step 1), and a second
Idle stream from the same identity supersedes the first."""

from __future__ import annotations

import grpc
import pytest

from corral.v1 import corral_pb2 as pb

from .wire import spec


def _same_claim(resent: pb.Claim, original: pb.Claim) -> None:
    assert resent.task.id == original.task.id
    assert resent.claim_token == original.claim_token
    assert resent.attempt == original.attempt
    assert resent.fence == original.fence
    assert resent.lease_expire_time == original.lease_expire_time


@pytest.mark.timeout(30)
def test_claim_is_resent_after_the_stream_breaks(daemon):
    mate = daemon.add_teammate()
    daemon.create_tasks(spec("survivor"), spec("waiting"))
    first = mate.idle()
    claim = first.next_event("claim")
    first.cancel()  # the connection drops right after the claim was sent
    assert first.end_status[0] == grpc.StatusCode.CANCELLED

    second = mate.idle()
    _same_claim(second.next_event("claim"), claim)
    # One slot, already held: no new claim.
    assert second.expect_quiet(0.4, then=lambda: daemon.get_task("waiting")).state == pb.TASK_STATE_PENDING
    second.cancel()

    third = mate.idle()  # and again: still the same claim
    _same_claim(third.next_event("claim"), claim)
    mate.complete(claim)
    assert third.next_event("claim").task.id == "waiting"
    third.cancel()


@pytest.mark.timeout(30)
def test_every_held_claim_is_resent_with_more_slots(daemon):
    mate = daemon.add_teammate()
    daemon.create_tasks(spec("a"), spec("b"), spec("c"))
    first = mate.idle(slots=2)
    held = {c.task.id: c for c in (first.next_event("claim"), first.next_event("claim"))}
    first.cancel()
    second = mate.idle(slots=2)
    for _ in range(2):
        resent = second.next_event("claim")
        _same_claim(resent, held[resent.task.id])
    # Both slots held: "c" is claimed only once one frees, and is the next item then.
    assert second.expect_quiet(0.3, then=lambda: mate.complete(resent), arrives="claim").task.id == "c"
    second.cancel()


@pytest.mark.timeout(30)
def test_second_idle_stream_supersedes_the_first_with_aborted(daemon):
    mate = daemon.add_teammate()
    first = mate.idle()
    daemon.wait_open_streams(1)  # the first stream is registered before the second opens
    second = mate.idle()
    code, details = first.wait_end(5)
    assert code == grpc.StatusCode.ABORTED, details
    daemon.create_tasks(spec("for-the-new-stream"))
    assert second.next_event("claim").task.id == "for-the-new-stream"
    assert daemon.stats().open_streams == 1
    second.cancel()


@pytest.mark.timeout(30)
def test_superseding_stream_gets_the_held_claim(daemon):
    mate = daemon.add_teammate()
    daemon.create_tasks(spec("held"))
    first = mate.idle()
    claim = first.next_event("claim")
    second = mate.idle()
    code, details = first.wait_end(5)
    assert code == grpc.StatusCode.ABORTED, details
    _same_claim(second.next_event("claim"), claim)
    assert mate.complete(claim).state == pb.TASK_STATE_COMPLETED
    second.cancel()
