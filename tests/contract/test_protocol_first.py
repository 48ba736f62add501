"""Control beats the task board (design §2.5, §5 steps 2–4).

No claim is delivered while a shutdown request is pending or a protocol
message is unacknowledged; plain messages come before claims but do not gate.
"""

from __future__ import annotations

import pytest

from corral.v1 import corral_pb2 as pb
from tests.support import wait_until

from .wire import duration, spec

QUIET = 0.4  # how long "nothing else arrives" is watched for


@pytest.mark.timeout(30)
@pytest.mark.parametrize("order", ["reject_then_ack", "ack_then_reject"])
def test_pending_shutdown_request_blocks_claims_until_rejected_and_acked(daemon, order):
    mate = daemon.add_teammate()
    daemon.create_tasks(spec("ready-1"))
    shutdown = daemon.lead.lead.RequestShutdown(
        pb.RequestShutdownRequest(name=mate.name, reason="wrap up", grace=duration(3600))
    )
    assert shutdown.request_id

    stream = mate.idle()
    request = stream.next_event("shutdown_request")
    assert request.request_id == shutdown.request_id
    assert request.reason == "wrap up"
    assert request.seq > 0
    assert request.HasField("send_time") and request.HasField("deadline_time")
    assert request.deadline_time == shutdown.deadline_time
    # A ready task, but the shutdown gate is shut.
    assert stream.expect_quiet(QUIET, then=lambda: daemon.get_task("ready-1")).state == pb.TASK_STATE_PENDING

    reject = pb.RespondShutdownRequest(request_id=request.request_id, approve=False, reason="busy")
    # Only the second of the two opens the gate, and the claim is the next item after it.
    if order == "reject_then_ack":
        mate.teammate.RespondShutdown(reject)  # answered, but the request itself is still unacknowledged
        claim = stream.expect_quiet(QUIET, then=lambda: mate.ack(request.seq), arrives="claim")
    else:
        mate.ack(request.seq)  # acknowledged, but the shutdown is still pending
        claim = stream.expect_quiet(QUIET, then=lambda: mate.teammate.RespondShutdown(reject), arrives="claim")
    assert claim.task.id == "ready-1"
    assert claim.attempt == 1
    stream.cancel()


@pytest.mark.timeout(30)
def test_shutdown_and_task_arriving_together_on_an_idle_stream_deliver_only_the_shutdown(daemon):
    mate = daemon.add_teammate()
    stream = mate.idle()
    wait_until(lambda: daemon.teammate(mate.name).status == pb.TEAMMATE_STATUS_IDLE, what="teammate idle")
    request_id = daemon.lead.lead.RequestShutdown(pb.RequestShutdownRequest(name=mate.name, reason="stop")).request_id
    daemon.create_tasks(spec("late"))

    request = stream.next_event("shutdown_request")
    assert request.request_id == request_id
    assert stream.expect_quiet(QUIET, then=lambda: daemon.get_task("late")).state == pb.TASK_STATE_PENDING
    assert daemon.teammate(mate.name).status == pb.TEAMMATE_STATUS_SHUTTING_DOWN

    # Approving ends the stream; the task was never claimed by this teammate.
    mate.ack(request.seq)
    mate.teammate.RespondShutdown(pb.RespondShutdownRequest(request_id=request_id, approve=True))
    stream.wait_end(5)  # design §4: approve -> "its stream ends" (no status fixed)
    assert daemon.get_task("late").state == pb.TASK_STATE_PENDING


@pytest.mark.timeout(30)
def test_plain_message_comes_before_the_claim_and_does_not_gate_it(daemon):
    mate = daemon.add_teammate()
    daemon.create_tasks(spec("work"))
    recipients = daemon.lead.board.SendMessage(pb.SendMessageRequest(to=mate.name, body="hello")).recipients
    assert list(recipients) == [mate.name]

    stream = mate.idle()
    message = stream.next_event("message")
    assert message.body == "hello"
    assert message.sender == "lead"
    assert message.seq > 0 and message.HasField("send_time")
    claim = stream.next_event("claim")  # no ack needed: a plain message is not a protocol message
    assert claim.task.id == "work"
    stream.cancel()


@pytest.mark.timeout(30)
def test_message_then_shutdown_then_task_order(daemon):
    mate = daemon.add_teammate()
    daemon.lead.board.SendMessage(pb.SendMessageRequest(to=mate.name, body="first"))
    daemon.lead.lead.RequestShutdown(pb.RequestShutdownRequest(name=mate.name))
    daemon.create_tasks(spec("t"))
    stream = mate.idle()
    first = stream.next_event("message")
    second = stream.next_event("shutdown_request")
    assert second.seq > first.seq
    assert stream.expect_quiet(QUIET, then=lambda: daemon.get_task("t")).state == pb.TASK_STATE_PENDING
    stream.cancel()


@pytest.mark.timeout(30)
def test_unacknowledged_plan_decision_blocks_claims(daemon):
    mate = daemon.add_teammate()  # not required to plan: the decision still is a protocol message
    plan_id = mate.teammate.SubmitPlan(pb.SubmitPlanRequest(plan="do it")).plan_id
    decided = daemon.lead.lead.DecidePlan(pb.DecidePlanRequest(plan_id=plan_id, approve=True, feedback="ok"))
    daemon.create_tasks(spec("after-plan"))

    stream = mate.idle()
    decision = stream.next_event("plan_decision")
    assert decision.plan_id == plan_id and decision.approve and decision.feedback == "ok"
    assert decision.seq == decided.seq
    assert stream.expect_quiet(QUIET, then=lambda: daemon.get_task("after-plan")).state == pb.TASK_STATE_PENDING

    mate.ack(decision.seq)
    assert stream.next_event("claim").task.id == "after-plan"
    stream.cancel()


@pytest.mark.timeout(30)
def test_renew_reports_pending_protocol_messages_and_holder_gets_no_second_claim(daemon):
    mate = daemon.add_teammate()
    daemon.create_tasks(spec("a"), spec("b"))
    stream = mate.idle(slots=2)
    first = stream.next_event("claim")
    second = stream.next_event("claim")
    assert {first.task.id, second.task.id} == {"a", "b"}
    assert not mate.renew(first).protocol_pending

    daemon.lead.lead.RequestShutdown(pb.RequestShutdownRequest(name=mate.name, reason="now"))
    request = stream.next_event("shutdown_request")
    assert mate.renew(first).protocol_pending
    mate.complete(first)
    daemon.create_tasks(spec("c"))
    # A free slot and a ready task, but shutdown is pending.
    assert stream.expect_quiet(QUIET, then=lambda: daemon.get_task("c")).state == pb.TASK_STATE_PENDING
    mate.ack(request.seq)
    mate.teammate.RespondShutdown(pb.RespondShutdownRequest(request_id=request.request_id, approve=False))
    assert stream.next_event("claim").task.id == "c"
    assert not mate.renew(second).protocol_pending
    stream.cancel()
