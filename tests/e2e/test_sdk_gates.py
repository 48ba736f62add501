"""Delays and retry backoff through a real daemon and the SDK, on both transports:
a waiting teammate is handed a delayed task when its time comes (a timer, not
its poll), and a retry waits out its backoff."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator

import pytest

import corral

pytestmark = [pytest.mark.usefixtures("transport"), pytest.mark.timeout(30)]

# Far longer than any wait here: a claim that comes sooner came from a timer.
SLOW_POLL = 20.0


@pytest.fixture
def ann(lead: corral.Lead) -> Iterator[corral.Teammate]:
    new = lead.add_teammate("ann")
    with corral.Teammate.connect(lead.address, new.token) as teammate:
        yield teammate


def _claimed_at(claim: corral.Claim) -> datetime.datetime:
    """When the daemon made the claim: its lease runs from then."""
    assert claim.lease_expire_time is not None
    return claim.lease_expire_time - claim.task.lease_duration


def _next_claim(events: Iterator[corral.IdleEvent]) -> tuple[corral.Claim, float]:
    claim = next(events)
    assert isinstance(claim, corral.Claim), claim
    return claim, time.monotonic()


def test_a_waiting_teammate_is_handed_a_delayed_task_at_its_time(lead: corral.Lead, ann: corral.Teammate) -> None:
    events = ann.idle(poll_interval=SLOW_POLL)  # opened by the first next(), before the task's time
    try:
        at = datetime.datetime.now(datetime.UTC) + datetime.timedelta(milliseconds=600)
        (created,) = lead.create_tasks([corral.TaskSpec("later", not_before=at)])
        assert created.state is corral.TaskState.PENDING
        task = lead.get_task("later")
        assert task.not_before_time is not None and abs(task.not_before_time - at) < datetime.timedelta(milliseconds=1)
        assert task.ready_time == task.not_before_time
        claim, arrived = _next_claim(events)
        assert claim.task.id == "later"
        assert _claimed_at(claim) >= task.not_before_time
        # Before the stream's first poll (SLOW_POLL after it opened, before `at`): the timer did it.
        first_poll = at + datetime.timedelta(seconds=SLOW_POLL / 2)
        assert _claimed_at(claim) < first_poll, f"handed over at {_claimed_at(claim)}: by a poll, not the timer"
        claim.complete(b"done")
    finally:
        events.close()


def test_a_retry_waits_out_its_backoff(lead: corral.Lead, ann: corral.Teammate) -> None:
    backoff = datetime.timedelta(milliseconds=400)
    lead.create_tasks([corral.TaskSpec("flaky", max_attempts=3, retry_backoff=backoff)])
    events = ann.idle(poll_interval=SLOW_POLL)
    try:
        first, _ = _next_claim(events)
        failed = first.fail("try again", retryable=True)
        assert failed.state is corral.TaskState.PENDING and failed.ready_time is not None
        assert failed.retry_backoff == backoff and failed.retry_backoff_max == 100 * backoff
        second, _ = _next_claim(events)
        assert second.task.id == "flaky" and second.attempt == 2
        assert _claimed_at(second) >= failed.ready_time
        waited = failed.ready_time - _claimed_at(first)
        assert backoff * 0.8 <= waited, f"retry gate only {waited} after the first claim"
        second.complete(b"done")
    finally:
        events.close()


def test_out_of_range_gates_are_refused_with_the_field(lead: corral.Lead) -> None:
    far = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=400)
    with pytest.raises(corral.InvalidArgument) as refused:
        lead.create_tasks([corral.TaskSpec("far", not_before=far)])
    assert "tasks[0].not_before_time" in str(refused.value)
    with pytest.raises(corral.InvalidArgument) as refused:
        backoffs = {"retry_backoff": datetime.timedelta(seconds=5), "retry_backoff_max": datetime.timedelta(seconds=1)}
        lead.create_tasks([corral.TaskSpec("odd", **backoffs)])
    assert "tasks[0].retry_backoff_max" in str(refused.value)
    assert list(lead.list_tasks()) == []
