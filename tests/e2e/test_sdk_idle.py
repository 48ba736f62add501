"""The Idle stream through the SDK: claim dedupe, acks, control before work,
plan gating, superseded streams, slots and roles."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

import corral
from tests.support import FAST_POLL, watch_until

# Each test runs on both teammate transports (CORRAL_TRANSPORT=session, =idle).
pytestmark = pytest.mark.usefixtures("transport")


@pytest.fixture
def ann(lead: corral.Lead) -> Iterator[corral.Teammate]:
    new = lead.add_teammate("ann", roles=("dev",))
    with corral.Teammate.connect(lead.address, new.token) as teammate:
        yield teammate


def first_event(teammate: corral.Teammate, **options: object) -> corral.IdleEvent:
    """The first event of a fresh stream, which is then closed without resuming."""
    events = teammate.idle(poll_interval=FAST_POLL, **options)  # type: ignore[arg-type]
    try:
        return next(events)
    finally:
        events.close()


@pytest.mark.timeout(30)
def test_resent_claims_are_yielded_once_per_client(lead: corral.Lead, ann: corral.Teammate) -> None:
    lead.create_tasks([corral.TaskSpec("a")])
    claim = first_event(ann)
    assert isinstance(claim, corral.Claim) and claim.attempt == 1

    # A new client with the same credential gets the claim re-sent, same token.
    with corral.Teammate.connect(lead.address, ann.token) as again:
        resent = first_event(again)
    assert isinstance(resent, corral.Claim)
    assert (resent.token, resent.attempt, resent.fence) == (claim.token, claim.attempt, claim.fence)

    (info,) = lead.list_teammates()
    assert info.held_task_ids == ("a",) and info.status is corral.TeammateStatus.BUSY

    # The original client already holds it: the re-send is skipped.
    lead.send_message("ann", "ping")
    event = first_event(ann)
    assert isinstance(event, corral.Message) and event.body == "ping"
    assert ann.held_claims() == [claim]
    claim.complete(b"ok")
    assert ann.held_claims() == []


@pytest.mark.timeout(30)
def test_inbox_items_are_acked_only_after_handling(lead: corral.Lead, ann: corral.Teammate) -> None:
    lead.send_message("ann", "one")
    lead.send_message("ann", "two")
    first = first_event(ann)  # closed before resuming: not acknowledged
    assert isinstance(first, corral.Message) and first.body == "one" and first.sender == "lead"

    events = list(ann.idle(max_idle_polls=2, poll_interval=FAST_POLL))
    assert [e.body for e in events if isinstance(e, corral.Message)] == ["one", "two"]
    assert isinstance(events[-1], corral.IdleTimeout)

    events = list(ann.idle(max_idle_polls=2, poll_interval=FAST_POLL))
    assert len(events) == 1 and isinstance(events[0], corral.IdleTimeout), "acked items are not re-sent"


@pytest.mark.timeout(30)
def test_shutdown_request_comes_before_work(lead: corral.Lead, ann: corral.Teammate) -> None:
    lead.create_tasks([corral.TaskSpec("work")])
    request_id = lead.request_shutdown("ann", reason="not now")
    events = ann.idle(poll_interval=FAST_POLL)
    request = next(events)
    assert isinstance(request, corral.ShutdownRequest)
    assert (request.request_id, request.reason) == (request_id, "not now")
    assert request.deadline_time is not None
    ann.respond_shutdown(request_id, approve=False, reason="busy")
    claim = next(events)  # resuming acks the request; the gate opens
    assert isinstance(claim, corral.Claim) and claim.task.id == "work"
    events.close()
    answer = watch_until(lead, lambda e: isinstance(e, corral.ShutdownAnswered))
    assert (answer.request_id, answer.approve, answer.reason) == (request_id, False, "busy")
    claim.complete()


@pytest.mark.timeout(30)
def test_approved_shutdown_releases_claims_and_ends_the_stream(lead: corral.Lead, ann: corral.Teammate) -> None:
    lead.create_tasks([corral.TaskSpec("held")])
    events = ann.idle(poll_interval=FAST_POLL)
    claim = next(events)
    assert isinstance(claim, corral.Claim)
    assert not claim.protocol_pending
    lead.request_shutdown("ann")
    claim.renew()
    assert claim.protocol_pending, "a renew tells the holder that control messages wait"
    request = next(events)
    assert isinstance(request, corral.ShutdownRequest)
    ann.respond_shutdown(request.request_id, approve=True)
    assert list(events) == [], "the daemon ends the stream after an approved shutdown"
    assert lead.get_task("held").state is corral.TaskState.PENDING
    assert ann.held_claims() == []


@pytest.mark.timeout(30)
def test_plan_gate_holds_claims_until_approval(lead: corral.Lead) -> None:
    new = lead.add_teammate("planner", require_plan_approval=True)
    lead.create_tasks([corral.TaskSpec("design")])
    with corral.Teammate.connect(lead.address, new.token) as planner:
        plan_id = planner.submit_plan("first draft")
        events = planner.idle(poll_interval=FAST_POLL)
        submitted = watch_until(lead, lambda e: isinstance(e, corral.PlanSubmitted))
        assert (submitted.plan_id, submitted.author, submitted.plan) == (plan_id, "planner", "first draft")
        lead.decide_plan(plan_id, approve=False, feedback="more tests")
        rejection = next(events)
        assert isinstance(rejection, corral.PlanDecision) and not rejection.approve
        assert rejection.feedback == "more tests"

        second = planner.submit_plan("with tests")
        lead.decide_plan(second, approve=True)
        approval = next(events)
        assert isinstance(approval, corral.PlanDecision) and approval.approve and approval.plan_id == second
        claim = next(events)
        assert isinstance(claim, corral.Claim) and claim.task.id == "design"
        events.close()
        claim.complete()


@pytest.mark.timeout(30)
def test_a_second_stream_supersedes_the_first(lead: corral.Lead, ann: corral.Teammate) -> None:
    lead.send_message("ann", "hello")
    old = ann.idle(poll_interval=FAST_POLL)
    assert isinstance(next(old), corral.Message)
    with corral.Teammate.connect(lead.address, ann.token) as again:
        new = again.idle(poll_interval=FAST_POLL)
        assert isinstance(next(new), corral.Message)
        with pytest.raises(corral.CorralError) as raised:
            next(old)
        assert raised.value.code is grpc.StatusCode.ABORTED
        new.close()


@pytest.mark.timeout(30)
def test_a_second_idle_of_the_same_client_supersedes_the_first(lead: corral.Lead, ann: corral.Teammate) -> None:
    lead.send_message("ann", "hello")
    old = ann.idle(poll_interval=FAST_POLL)
    assert isinstance(next(old), corral.Message)
    new = ann.idle(poll_interval=FAST_POLL)
    again = next(new)  # not acknowledged on the old stream, so sent again
    assert isinstance(again, corral.Message) and again.body == "hello"
    with pytest.raises(corral.CorralError) as raised:
        next(old)
    assert raised.value.code is grpc.StatusCode.ABORTED
    lead.create_tasks([corral.TaskSpec("work")])
    claim = next(new)  # resuming acknowledged "hello"
    assert isinstance(claim, corral.Claim) and claim.complete().state is corral.TaskState.COMPLETED
    new.close()


@pytest.mark.timeout(30)
def test_slots_and_roles(lead: corral.Lead, ann: corral.Teammate) -> None:
    lead.create_tasks(
        [
            corral.TaskSpec("gpu-job", required_role="gpu", priority=9),
            corral.TaskSpec("first", priority=5),
            corral.TaskSpec("second", priority=1),
        ]
    )
    events = ann.idle(slots=2, poll_interval=FAST_POLL)
    claims = [next(events), next(events)]
    events.close()
    assert [c.task.id for c in claims] == ["first", "second"], "priority order; the gpu task is not for a dev"
    assert claims[0].fence < claims[1].fence
    for claim in claims:
        claim.complete()
    gpu = lead.add_teammate("gina", roles=("gpu",))
    with corral.Teammate.connect(lead.address, gpu.token) as gina:
        claim = first_event(gina)
        assert isinstance(claim, corral.Claim) and claim.task.id == "gpu-job"
        claim.complete()
