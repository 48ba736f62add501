"""Every unary write takes a `request_id`: a call sent again with the same id has the effect of
one call and is answered with the first call's outcome, its error included; the same id
with other fields is INVALID_ARGUMENT and writes nothing; a retried AddTeammate or AddViewer
hands out a new credential and revokes the first (whose answer was lost). The records
survive a restart."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest

from corral.v1 import corral_pb2 as pb

from .wire import Daemon, assert_status, rpc_error, spec

pytestmark = pytest.mark.timeout(60)


def _twice(call: Callable[..., Any], request: Any) -> tuple[Any, Any]:
    return call(request), call(request)


def _held_claim(daemon: Daemon, task_id: str) -> pb.Claim:
    mate = daemon.add_teammate(f"holder-{task_id}")
    daemon.create_tasks(spec(task_id))
    stream = mate.idle()
    claim = stream.next_event("claim")
    stream.cancel()
    return claim


def test_each_write_sent_twice_with_one_request_id_runs_once_and_is_answered_alike(daemon):
    lead, board = daemon.lead.lead, daemon.lead.board
    ann = daemon.add_teammate("ann", require_plan_approval=True)
    daemon.add_teammate("bob")

    first, again = _twice(board.SendMessage, pb.SendMessageRequest(to="*", body="hi", request_id="m1"))
    assert first == again and sorted(first.recipients) == ["ann", "bob"]

    first, again = _twice(lead.RequestShutdown, pb.RequestShutdownRequest(name="bob", request_id="s1"))
    assert first == again  # the same shutdown request, not a second one

    plan_id = ann.teammate.SubmitPlan(pb.SubmitPlanRequest(plan="p")).plan_id
    first, again = _twice(lead.DecidePlan, pb.DecidePlanRequest(plan_id=plan_id, approve=True, request_id="d1"))
    assert first == again  # a second decision would be FAILED_PRECONDITION

    claim = _held_claim(daemon, "held")
    first, again = _twice(lead.RevokeClaim, pb.RevokeClaimRequest(task_id="held", reason="r", request_id="r1"))
    assert first == again and first.task.state == pb.TASK_STATE_PENDING
    assert claim.claim_token  # (the claim that was revoked)

    daemon.create_tasks(spec("c1"), spec("c2", "c1"))
    first, again = _twice(lead.CancelTasks, pb.CancelTasksRequest(ids=["c1"], request_id="x1"))
    assert first == again and [task.id for task in first.tasks] == ["c1", "c2"]

    first, again = _twice(lead.RetryTasks, pb.RetryTasksRequest(ids=["c1"], request_id="y1"))
    assert first == again and {task.id for task in first.tasks} == {"c1", "c2"}
    assert {task.attempt for task in first.tasks} == {0}

    first, again = _twice(lead.SetConcurrencyLimit, pb.SetConcurrencyLimitRequest(key="k", limit=2, request_id="k1"))
    assert first == again and first.limit.limit == 2
    first, again = _twice(lead.SetBudget, pb.SetBudgetRequest(teammate="ann", max_tokens=5, request_id="b1"))
    assert first == again and first.budget.max_tokens == 5

    first, again = _twice(lead.RemoveTeammate, pb.RemoveTeammateRequest(name="bob", request_id="t1"))
    assert first == again  # a second removal would find nobody
    lead.AddViewer(pb.AddViewerRequest(name="eve"))
    first, again = _twice(lead.RemoveViewer, pb.RemoveViewerRequest(name="eve", request_id="v1"))
    assert first == again

    stream = ann.idle()
    bodies = []
    while (item := stream.try_next(timeout=0.5)) is not None:
        if item.WhichOneof("event") == "message":
            bodies.append(item.message.body)
    stream.cancel()
    assert bodies == ["hi"]  # sent twice, queued once


def test_a_retried_add_teammate_replaces_the_lost_credential(daemon):
    lead = daemon.lead.lead
    request = pb.AddTeammateRequest(name="ann", roles=["r"], request_id="a1")
    first, again = _twice(lead.AddTeammate, request)
    assert first.teammate == again.teammate and first.token != again.token
    assert [mate.name for mate in daemon.lead.board.ListTeammates(pb.ListTeammatesRequest()).teammates] == ["ann"]
    assert daemon.client(again.token, "ann").board.GetIdentity(pb.GetIdentityRequest()).identity == "ann"
    refused = rpc_error(daemon.client(first.token, "ann").board.GetIdentity, pb.GetIdentityRequest())
    assert refused.code() == grpc.StatusCode.UNAUTHENTICATED

    viewer = pb.AddViewerRequest(name="eve", request_id="e1")
    first_viewer, again_viewer = _twice(lead.AddViewer, viewer)
    assert first_viewer.name == again_viewer.name == "eve" and first_viewer.token != again_viewer.token
    stats = daemon.client(again_viewer.token, "eve").board.GetStats(pb.GetStatsRequest())
    assert stats.teammates_by_status
    refused = rpc_error(daemon.client(first_viewer.token, "eve").board.GetStats, pb.GetStatsRequest())
    assert refused.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_request_id_keeps_the_first_outcome_even_when_it_was_an_error(daemon):
    lead = daemon.lead.lead
    request = pb.SendMessageRequest(to="nobody", body="x", request_id="late")
    assert_status(rpc_error(daemon.lead.board.SendMessage, request), grpc.StatusCode.NOT_FOUND)
    daemon.add_teammate("nobody")
    assert_status(rpc_error(daemon.lead.board.SendMessage, request), grpc.StatusCode.NOT_FOUND)
    assert daemon.lead.board.SendMessage(pb.SendMessageRequest(to="nobody", body="x", request_id="new")).recipients
    failed = rpc_error(lead.RemoveTeammate, pb.RemoveTeammateRequest(name="ghost", request_id="g"))
    assert failed.code() == grpc.StatusCode.NOT_FOUND


def test_one_request_id_for_another_call_is_refused_and_writes_nothing(daemon):
    lead = daemon.lead.lead
    daemon.add_teammate("ann")
    lead.SetBudget(pb.SetBudgetRequest(teammate="ann", max_tokens=5, request_id="same"))
    error = rpc_error(lead.SetBudget, pb.SetBudgetRequest(teammate="ann", max_tokens=6, request_id="same"))
    assert_status(error, grpc.StatusCode.INVALID_ARGUMENT, field="request_id")
    assert "same" in error.details()
    assert daemon.teammate("ann").budget.max_tokens == 5
    # The same id sent to another RPC names another call.
    lead.SetConcurrencyLimit(pb.SetConcurrencyLimitRequest(key="k", limit=1, request_id="same"))
    too_long = pb.SetBudgetRequest(teammate="ann", max_tokens=7, request_id="x" * 129)
    assert_status(rpc_error(lead.SetBudget, too_long), grpc.StatusCode.INVALID_ARGUMENT, field="request_id")
    assert daemon.teammate("ann").budget.max_tokens == 5


def test_request_ids_outlive_a_restart(corrald, tmp_path):
    daemon = corrald()
    daemon.add_teammate("ann")
    request = pb.RequestShutdownRequest(name="ann", reason="done", request_id="s")
    first = daemon.lead.lead.RequestShutdown(request)
    daemon.close_channel()
    daemon.stop_and_check()
    daemon.start()
    assert daemon.lead.lead.RequestShutdown(request) == first
