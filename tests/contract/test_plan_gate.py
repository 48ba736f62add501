"""The plan gate (design §2.5, §4 DecidePlan, "Plans"): only the newest plan
counts, and only once its approval is acknowledged."""

from __future__ import annotations

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.support import wait_until

from .wire import rpc_error, spec

QUIET = 0.4


def _decide(daemon, plan_id: str, approve: bool, feedback: str = "") -> int:
    return daemon.lead.lead.DecidePlan(pb.DecidePlanRequest(plan_id=plan_id, approve=approve, feedback=feedback)).seq


@pytest.mark.timeout(30)
def test_no_claim_until_plan_approved_and_decision_acknowledged(daemon):
    watch = daemon.watch()
    mate = daemon.add_teammate("planner", require_plan_approval=True)
    assert daemon.teammate("planner").require_plan_approval
    daemon.create_tasks(spec("gated"))

    stream = mate.idle()
    # No plan yet: the gate is shut.
    assert stream.expect_quiet(QUIET, then=lambda: daemon.get_task("gated")).state == pb.TASK_STATE_PENDING
    wait_until(
        lambda: daemon.teammate("planner").status == pb.TEAMMATE_STATUS_AWAITING_PLAN, what="status awaiting_plan"
    )

    plan_id = mate.teammate.SubmitPlan(pb.SubmitPlanRequest(plan="step 1, step 2")).plan_id
    assert plan_id
    submitted = watch.next_matching(lambda e: e.WhichOneof("event") == "plan_submitted", what="plan_submitted")
    assert submitted.plan_submitted.plan_id == plan_id
    assert submitted.plan_submitted.author == "planner"
    assert submitted.plan_submitted.plan == "step 1, step 2"
    # Submitted is not approved.
    assert stream.expect_quiet(QUIET, then=lambda: daemon.get_task("gated")).state == pb.TASK_STATE_PENDING

    seq = _decide(daemon, plan_id, True, "go")
    decision = stream.next_event("plan_decision")
    assert (decision.plan_id, decision.approve, decision.feedback, decision.seq) == (plan_id, True, "go", seq)
    # Every watcher learns the plan waits no more, whoever decided it.
    decided = watch.next_matching(lambda e: e.WhichOneof("event") == "plan_decided", what="plan_decided")
    assert decided.plan_decided == pb.PlanDecided(plan_id=plan_id, author="planner", approve=True, feedback="go")
    assert decided.seq > submitted.seq
    # Approved but not yet acknowledged.
    assert stream.expect_quiet(QUIET, then=lambda: daemon.get_task("gated")).state == pb.TASK_STATE_PENDING

    mate.ack(decision.seq)
    claim = stream.next_event("claim")
    assert claim.task.id == "gated"
    stream.cancel()
    watch.cancel()


@pytest.mark.timeout(30)
def test_approving_an_older_plan_does_not_unlock_a_newer_one(daemon):
    mate = daemon.add_teammate(require_plan_approval=True)
    daemon.create_tasks(spec("gated"))
    stream = mate.idle()
    p1 = mate.teammate.SubmitPlan(pb.SubmitPlanRequest(plan="plan one")).plan_id
    p2 = mate.teammate.SubmitPlan(pb.SubmitPlanRequest(plan="plan two")).plan_id
    assert p1 != p2

    _decide(daemon, p1, True)
    decision = stream.next_event("plan_decision")
    assert decision.plan_id == p1 and decision.approve
    mate.ack(decision.seq)
    # p2 is the newest plan and it is undecided.
    assert stream.expect_quiet(QUIET, then=lambda: daemon.get_task("gated")).state == pb.TASK_STATE_PENDING
    assert daemon.teammate(mate.name).status == pb.TEAMMATE_STATUS_AWAITING_PLAN

    _decide(daemon, p2, True)
    decision = stream.next_event("plan_decision")
    assert decision.plan_id == p2
    mate.ack(decision.seq)
    assert stream.next_event("claim").task.id == "gated"
    stream.cancel()


@pytest.mark.timeout(30)
def test_a_newer_plan_closes_a_gate_an_older_approval_opened(daemon):
    mate = daemon.add_teammate(require_plan_approval=True)
    stream = mate.idle()
    p1 = mate.teammate.SubmitPlan(pb.SubmitPlanRequest(plan="one")).plan_id
    _decide(daemon, p1, True)
    mate.ack(stream.next_event("plan_decision").seq)
    wait_until(lambda: daemon.teammate(mate.name).status == pb.TEAMMATE_STATUS_IDLE, what="status idle")

    p2 = mate.teammate.SubmitPlan(pb.SubmitPlanRequest(plan="two")).plan_id  # only the newest plan counts
    daemon.create_tasks(spec("gated"))
    # Shut until p2 is decided: its decision, not a claim, is the next item, and it gates claims.
    decision = stream.expect_quiet(QUIET, then=lambda: _decide(daemon, p2, True), arrives="plan_decision")
    assert decision.plan_id == p2
    assert daemon.get_task("gated").state == pb.TASK_STATE_PENDING
    stream.cancel()


@pytest.mark.timeout(30)
def test_rejected_plan_keeps_the_gate_shut(daemon):
    mate = daemon.add_teammate(require_plan_approval=True)
    daemon.create_tasks(spec("gated"))
    stream = mate.idle()
    p1 = mate.teammate.SubmitPlan(pb.SubmitPlanRequest(plan="bad plan")).plan_id
    _decide(daemon, p1, False, "no")
    decision = stream.next_event("plan_decision")
    assert decision.plan_id == p1 and not decision.approve and decision.feedback == "no"
    mate.ack(decision.seq)
    assert stream.expect_quiet(QUIET, then=lambda: daemon.get_task("gated")).state == pb.TASK_STATE_PENDING

    # A decided plan cannot be decided again (the gate cannot be flipped after the fact).
    error = rpc_error(daemon.lead.lead.DecidePlan, pb.DecidePlanRequest(plan_id=p1, approve=True))
    assert error.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ALREADY_EXISTS), error.details()
    assert stream.expect_quiet(QUIET, then=lambda: daemon.get_task("gated")).state == pb.TASK_STATE_PENDING

    p2 = mate.teammate.SubmitPlan(pb.SubmitPlanRequest(plan="better plan")).plan_id
    _decide(daemon, p2, True)
    mate.ack(stream.next_event("plan_decision").seq)
    assert stream.next_event("claim").task.id == "gated"
    stream.cancel()
