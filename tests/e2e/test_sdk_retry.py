"""RetryTasks and `waiting_for` through a real daemon and the SDK."""

from __future__ import annotations

import asyncio

import grpc
import pytest

import corral
import corral.aio
from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

pytestmark = pytest.mark.timeout(30)


def _fail_for_good(lead: corral.Lead, token: str, task_id: str) -> None:
    with corral.Teammate.connect(lead.address, token) as teammate:
        events = teammate.idle(max_idle_polls=1, poll_interval=0.2)
        try:
            claim = next(events)
            assert isinstance(claim, corral.Claim) and claim.task.id == task_id
            claim.fail("broken", retryable=False)
        finally:
            events.close()


def test_a_failed_subtree_is_retried_and_worked_again(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("a"), corral.TaskSpec("b", depends_on=("a",))])
    ann = lead.add_teammate("ann")
    _fail_for_good(lead, ann.token, "a")
    assert [lead.get_task(t).state for t in "ab"] == [corral.TaskState.FAILED, corral.TaskState.CANCELED]
    retried = lead.retry_tasks(["a"], reset_attempts=True)
    assert [(t.id, t.state) for t in retried] == [("a", corral.TaskState.PENDING), ("b", corral.TaskState.PENDING)]
    waiting = lead.get_task("b").waiting_for
    assert waiting is not None and waiting.dependencies == ("a",)
    listed = {task.id: task.waiting_for for task in lead.list_tasks()}
    assert listed["b"] == waiting
    summary = corral.run_teammate(
        lambda task: b"ok", address=lead.address, token=ann.token, max_idle_polls=2, poll_interval=0.2
    )
    assert summary.completed == 2
    assert [lead.get_task(t).state for t in "ab"] == [corral.TaskState.COMPLETED] * 2


def test_retry_on_asyncio_and_its_refusals(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("p")])

    async def scenario() -> None:
        async with await corral.aio.Lead.connect(lead.address, lead.token) as aio_lead:
            with pytest.raises(corral.FailedPrecondition, match="'p' is PENDING"):
                await aio_lead.retry_tasks(["p"])
            with pytest.raises(corral.NotFound):
                await aio_lead.retry_tasks(["nope"])
            with pytest.raises(corral.InvalidArgument, match="ids"):
                await aio_lead.retry_tasks([])

    asyncio.run(scenario())
    assert lead.get_task("p").state is corral.TaskState.PENDING


def test_a_task_whose_dependency_was_canceled_is_not_retried_alone(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("up"), corral.TaskSpec("down", depends_on=("up",))])
    lead.cancel_tasks(["up"])  # down is canceled along
    before = [lead.get_task(t) for t in ("up", "down")]
    with pytest.raises(corral.FailedPrecondition, match="'down' depends on 'up', which is CANCELED") as refused:
        lead.retry_tasks(["down"])
    assert refused.value.code is grpc.StatusCode.FAILED_PRECONDITION
    assert refused.value.metadata == {"id": "down", "dependency": "up"}
    assert [lead.get_task(t) for t in ("up", "down")] == before  # nothing written
    retried = lead.retry_tasks(["up", "down"])
    assert [(t.id, t.state) for t in retried] == [("up", corral.TaskState.PENDING), ("down", corral.TaskState.PENDING)]


def test_a_teammate_may_not_retry(lead: corral.Lead) -> None:
    ann = lead.add_teammate("ann")
    with grpc.insecure_channel(lead.address) as channel:
        stub = pb_grpc.LeadServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.RetryTasks(pb.RetryTasksRequest(ids=["x"]), metadata=[("authorization", f"Bearer {ann.token}")])
    assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED


def test_waiting_for_says_no_teammate_holds_the_role(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("review", required_role="reviewer")])
    waiting = lead.get_task("review").waiting_for
    assert waiting is not None and waiting.teammates is corral.TeammateAvailability.NONE_REGISTERED
