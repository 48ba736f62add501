"""Claim keepalive and lease loss against the real daemon."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator

import pytest

import corral
from tests.support import FAST_POLL, wait_until, watch_until

# Each test runs on both teammate transports (CORRAL_TRANSPORT=session, =idle).
pytestmark = pytest.mark.usefixtures("transport")

ONE_SECOND = datetime.timedelta(seconds=1)  # the daemon's minimum lease


def task_reclaimed(task_id: str) -> Callable[[corral.WatchEvent], bool]:
    """Predicate: `task_id` went back to PENDING after having been claimed."""
    return lambda e: (
        isinstance(e, corral.TaskChanged)
        and e.task.id == task_id
        and e.task.state is corral.TaskState.PENDING
        and e.task.attempt >= 1
    )


def claim_one(teammate: corral.Teammate) -> corral.Claim:
    for event in teammate.idle(poll_interval=FAST_POLL):
        if isinstance(event, corral.Claim):
            return event
    raise AssertionError("Idle stream ended without a claim")


@pytest.fixture
def teammate(lead: corral.Lead) -> Iterator[corral.Teammate]:
    new = lead.add_teammate("ann")
    with corral.Teammate.connect(lead.address, new.token) as teammate:
        yield teammate


@pytest.mark.timeout(30)
def test_keepalive_holds_a_claim_past_several_leases(lead: corral.Lead, teammate: corral.Teammate) -> None:
    lead.create_tasks([corral.TaskSpec("slow", lease_duration=ONE_SECOND)])
    claim = claim_one(teammate)
    assert claim.task.lease_duration == ONE_SECOND
    first_expiry = claim.lease_expire_time
    assert first_expiry is not None
    with claim.keepalive():
        # Wait (by polling the renewed expiry) until three lease lengths have passed.
        wait_until(lambda: claim.lease_expire_time >= first_expiry + 3 * ONE_SECOND, timeout=15, what="renewals")
        assert not claim.lost
        claim.check()
    task = claim.complete(b"kept")
    assert task.state is corral.TaskState.COMPLETED and task.attempt == 1 and task.result == b"kept"
    assert claim.complete(b"kept").result == b"kept", "completing again with the same token is idempotent"


@pytest.mark.timeout(30)
def test_expired_lease_is_reported_not_ignored(lead: corral.Lead, teammate: corral.Teammate) -> None:
    lead.create_tasks([corral.TaskSpec("forgotten", lease_duration=ONE_SECOND)])
    claim = claim_one(teammate)
    # No keepalive: wait for the daemon's reaper to take the task back.
    reclaimed = watch_until(lead, task_reclaimed("forgotten"), timeout=10)
    assert reclaimed.task.owner == "" and "expired" in reclaimed.task.error
    claim.start_keepalive()
    wait_until(lambda: claim.lost, timeout=10, what="keepalive noticing the loss")
    with pytest.raises(corral.LeaseLost) as raised:
        claim.check()
    assert isinstance(raised.value.cause, corral.LeaseExpired)
    with pytest.raises(corral.LeaseExpired):
        claim.complete(b"too late")


@pytest.mark.timeout(30)
def test_cancel_under_the_holder_stops_the_keepalive(lead: corral.Lead, teammate: corral.Teammate) -> None:
    lead.create_tasks([corral.TaskSpec("doomed", lease_duration=ONE_SECOND)])
    claim = claim_one(teammate)
    with claim.keepalive():
        lead.cancel_tasks(["doomed"])
        wait_until(lambda: claim.lost, timeout=10, what="keepalive noticing the cancel")
    assert isinstance(claim.lost_error.cause, corral.TaskCanceled)
    with pytest.raises(corral.TaskCanceled):
        claim.fail("whatever")
    assert lead.get_task("doomed").state is corral.TaskState.CANCELED


@pytest.mark.timeout(30)
def test_foreign_token_gets_a_definite_error(lead: corral.Lead, teammate: corral.Teammate) -> None:
    lead.create_tasks([corral.TaskSpec("mine")])
    claim = claim_one(teammate)
    other = lead.add_teammate("bob")
    with corral.Teammate.connect(lead.address, other.token) as bob:
        with pytest.raises(corral.FailedPrecondition) as raised:
            bob._claim_calls.complete("mine", "not-a-real-token", b"")
        assert raised.value.reason in ("CLAIM_TOKEN_MISMATCH", "LEASE_EXPIRED")
    assert claim.release().state is corral.TaskState.PENDING
    again = claim_one(teammate)
    assert again.token != claim.token and again.attempt == claim.attempt, "a release does not use up an attempt"
    again.complete()
