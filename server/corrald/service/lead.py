"""LeadService: thin conversions around the board."""

from __future__ import annotations

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

from .. import cpu, errors, validate
from ..board import Board
from ..credentials import Identity
from ..model import CanceledTask, TaskRecord
from ..wake import WakeHub
from . import convert, once, watch_convert

FEED_PAGE = 256
# What one Watch stream holds read and not yet sent: a few tasks with their
# payloads, not a page of 256 (see server/DESIGN.md, "Memory per client").
FEED_BYTES = 2 * 1024 * 1024


class LeadServicer(pb_grpc.LeadServiceServicer):
    def __init__(self, board: Board, hub: WakeHub) -> None:
        self._board = board
        self._hub = hub

    async def CreateTasks(self, request: pb.CreateTasksRequest, context, identity: Identity) -> pb.CreateTasksResponse:
        wire = request.tasks
        dependencies = sum(len(spec.depends_on) for spec in wire)
        # Refused before any conversion: a batch past the limits costs a count, not a parse.
        validate.check_batch_size(
            len(wire), dependencies, sum(validate.id_bytes(spec.id) for spec in wire), self._board.limits
        )
        specs = await cpu.run(
            lambda: [convert.task_spec(spec, f"tasks[{i}]") for i, spec in enumerate(wire)],
            inline=len(wire) + dependencies <= cpu.INLINE_ITEMS,
        )
        batch = await self._board.create_batch(specs, request.request_id)
        # The caller sent every spec: the reply says only where each task stands,
        # so it stays small (under a default client's 4 MiB) whatever the batch.
        return await cpu.run(
            lambda: pb.CreateTasksResponse(
                tasks=[convert.created_task(t) for t in batch.tasks], unchanged_task_ids=batch.unchanged_ids
            ),
            inline=len(batch.tasks) <= cpu.INLINE_ITEMS,
        )

    # Every unary write below is answered once per request id (service/once.py).

    async def CancelTasks(self, request: pb.CancelTasksRequest, context, identity: Identity) -> pb.CancelTasksResponse:
        return await self._answer(
            identity,
            request,
            lambda key: self._board.cancel_tasks(list(request.ids), key),
            _cancel_reply,
            inline=lambda canceled: len(canceled) <= cpu.INLINE_ITEMS,
        )

    async def RetryTasks(self, request: pb.RetryTasksRequest, context, identity: Identity) -> pb.RetryTasksResponse:
        return await self._answer(
            identity,
            request,
            lambda key: self._board.retry_tasks(list(request.ids), request.reset_attempts, key),
            lambda retried: pb.RetryTasksResponse(**_changed(*retried)),
        )

    async def AddTeammate(self, request: pb.AddTeammateRequest, context, identity: Identity) -> pb.AddTeammateResponse:
        return await self._answer(
            identity,
            request,
            lambda key: self._board.add_teammate(request.name, list(request.roles), request.require_plan_approval, key),
            lambda added: pb.AddTeammateResponse(teammate=convert.teammate(added[0]), token=added[1]),
            credential_field="token",
        )

    async def RemoveTeammate(
        self, request: pb.RemoveTeammateRequest, context, identity: Identity
    ) -> pb.RemoveTeammateResponse:
        return await self._answer(
            identity,
            request,
            lambda key: self._board.remove_teammate(request.name, key),
            lambda record: pb.RemoveTeammateResponse(teammate=convert.teammate(record)),
        )

    async def RevokeClaim(self, request: pb.RevokeClaimRequest, context, identity: Identity) -> pb.RevokeClaimResponse:
        return await self._answer(
            identity,
            request,
            lambda key: self._board.revoke_claim(request.task_id, request.reason, key),
            lambda record: pb.RevokeClaimResponse(task=convert.task(record)),
        )

    async def ReviewTask(self, request: pb.ReviewTaskRequest, context, identity: Identity) -> pb.ReviewTaskResponse:
        return await self._answer(
            identity,
            request,
            lambda key: self._board.review_task(request.task_id, request.approve, request.feedback, key),
            lambda record: pb.ReviewTaskResponse(task=convert.task(record)),
        )

    async def AnswerQuestion(
        self, request: pb.AnswerQuestionRequest, context, identity: Identity
    ) -> pb.AnswerQuestionResponse:
        return await self._answer(
            identity,
            request,
            lambda key: self._board.answer_question(request.task_id, request.answer, key),
            lambda record: pb.AnswerQuestionResponse(task=convert.task(record)),
        )

    async def SetTaskCreation(
        self, request: pb.SetTaskCreationRequest, context, identity: Identity
    ) -> pb.SetTaskCreationResponse:
        policy = convert.task_creation(request.policy)
        return await self._answer(
            identity,
            request,
            lambda key: self._board.set_task_creation(request.teammate, policy, key),
            lambda stored: pb.SetTaskCreationResponse(policy=int(stored)),  # type: ignore[arg-type]
        )

    async def DecideProposals(
        self, request: pb.DecideProposalsRequest, context, identity: Identity
    ) -> pb.DecideProposalsResponse:
        return await self._answer(
            identity,
            request,
            lambda key: self._board.decide_proposals(list(request.task_ids), request.approve, request.feedback, key),
            lambda decided: pb.DecideProposalsResponse(**_changed(*decided)),
        )

    async def AddDependencies(
        self, request: pb.AddDependenciesRequest, context, identity: Identity
    ) -> pb.AddDependenciesResponse:
        return await self._answer(
            identity,
            request,
            lambda key: self._board.add_dependencies(request.task_id, list(request.depends_on), key),
            lambda record: pb.AddDependenciesResponse(task=convert.task(record)),
        )

    async def RequestShutdown(
        self, request: pb.RequestShutdownRequest, context, identity: Identity
    ) -> pb.RequestShutdownResponse:
        grace = convert.duration_ms(request, "grace")
        return await self._answer(
            identity,
            request,
            lambda key: self._board.request_shutdown(request.name, request.reason, grace, key),
            lambda asked: pb.RequestShutdownResponse(request_id=asked[0], deadline_time=convert.timestamp(asked[1])),
        )

    async def DecidePlan(self, request: pb.DecidePlanRequest, context, identity: Identity) -> pb.DecidePlanResponse:
        return await self._answer(
            identity,
            request,
            lambda key: self._board.decide_plan(request.plan_id, request.approve, request.feedback, key),
            lambda seq: pb.DecidePlanResponse(seq=seq),
        )

    async def SetConcurrencyLimit(
        self, request: pb.SetConcurrencyLimitRequest, context, identity: Identity
    ) -> pb.SetConcurrencyLimitResponse:
        return await self._answer(
            identity,
            request,
            lambda key: self._board.set_concurrency_limit(request.key, request.limit, key),
            lambda stored: pb.SetConcurrencyLimitResponse(limit=convert.concurrency_limit(stored)),
        )

    async def ListConcurrencyLimits(
        self, request: pb.ListConcurrencyLimitsRequest, context, identity: Identity
    ) -> pb.ListConcurrencyLimitsResponse:
        limits = await self._board.concurrency_limits()
        return pb.ListConcurrencyLimitsResponse(limits=[convert.concurrency_limit(limit) for limit in limits])

    async def SetBudget(self, request: pb.SetBudgetRequest, context, identity: Identity) -> pb.SetBudgetResponse:
        return await self._answer(
            identity,
            request,
            lambda key: self._board.set_budget(request.teammate, request.max_cost_micros, request.max_tokens, key),
            lambda budget: pb.SetBudgetResponse(budget=convert.budget(budget)),
        )

    async def AddViewer(self, request: pb.AddViewerRequest, context, identity: Identity) -> pb.AddViewerResponse:
        return await self._answer(
            identity,
            request,
            lambda key: self._board.add_viewer(request.name, key),
            lambda added: pb.AddViewerResponse(name=added[0].name, token=added[1]),
            credential_field="token",
        )

    async def RemoveViewer(
        self, request: pb.RemoveViewerRequest, context, identity: Identity
    ) -> pb.RemoveViewerResponse:
        return await self._answer(
            identity,
            request,
            lambda key: self._board.remove_viewer(request.name, key),
            lambda _: pb.RemoveViewerResponse(),
        )

    def _answer(self, identity: Identity, request, call, reply, **options):
        """`once.answer` with this board's limit on a request id's length."""
        return once.answer(identity, request, self._board.limits.name_max_chars, call, reply, **options)

    async def ListViewers(self, request: pb.ListViewersRequest, context, identity: Identity) -> pb.ListViewersResponse:
        found = await self._board.list_viewers()
        return pb.ListViewersResponse(
            viewers=[pb.Viewer(name=v.name, created_time=convert.timestamp(v.created_ms)) for v in found]
        )

    async def Watch(self, request: pb.WatchRequest, context, identity: Identity):
        if request.after_seq < 0:
            raise errors.InvalidArgument("after_seq", "must not be negative")
        after = request.after_seq
        # The shape of grpc's health Watch: send what moved, wait, repeat.
        while not self._hub.closing:
            moved = self._hub.board_moved()  # taken before reading, so no change slips between
            feed = await self._board.read_feed(after, FEED_PAGE, FEED_BYTES)
            for event, task, mate in feed.items:
                yield watch_convert.watch_response(event, task, mate)
                after = event.seq
            if not feed.more:
                await moved.wait()


def _cancel_reply(canceled: list[CanceledTask]) -> pb.CancelTasksResponse:
    """The canceled tasks that fit one reply, and how many did not."""
    kept = convert.fitting(convert.canceled_task(task) for task in canceled)
    return pb.CancelTasksResponse(tasks=kept, omitted_count=len(canceled) - len(kept))


def _changed(records: list[TaskRecord], count: int) -> dict:
    """The fields of a reply listing the tasks a call changed (RetryTasks, DecideProposals):
    those that fit the reply, and how many more it changed."""
    kept = convert.fitting(convert.task(record) for record in records)
    return {"tasks": kept, "omitted_count": count - len(kept)}
