"""TeammateService: the Idle and Session streams (their loop is teamstream.py) and the unary calls."""

from __future__ import annotations

import asyncio
import logging

import grpc

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

from .. import validate
from ..board import Board
from ..credentials import Identity
from ..model import ClaimEnd
from ..overload.reopen import ReopenSpacing
from ..wake import WakeHub
from . import artifacts, convert, session
from .teamstream import IdleTimedOut, TeammateStream, stream_options

log = logging.getLogger("corrald.idle")


class TeammateServicer(pb_grpc.TeammateServiceServicer):
    def __init__(self, board: Board, hub: WakeHub, reopen: ReopenSpacing) -> None:
        self._board = board
        self._hub = hub
        self._reopen = reopen
        self._background: set[asyncio.Task] = set()

    async def Idle(self, request: pb.IdleRequest, context: grpc.aio.ServicerContext, identity: Identity):
        loop = TeammateStream(self._board, self._hub, self._reopen, identity.name, stream_options(self._board, request))
        try:
            await loop.open()
            async for _, item in loop.run():
                if isinstance(item, IdleTimedOut):
                    yield pb.IdleResponse(idle_timeout=pb.IdleTimeout(idle_polls=item.idle_polls))
                elif isinstance(item, ClaimEnd):
                    yield pb.IdleResponse(claim_ended=convert.claim_ended(item))
                elif item is not None:
                    yield convert.idle_response(item)
        finally:
            self._left(loop)

    async def Session(self, requests, context: grpc.aio.ServicerContext, identity: Identity):
        """`requests` yields each message parsed (see interceptor); the first must be `open`."""
        options = stream_options(self._board, await session.first_open(requests))
        ops = session.SessionOps(self._board, self._hub, identity.name, requests)
        loop = TeammateStream(self._board, self._hub, self._reopen, identity.name, options, ops)
        try:
            ops.start(await loop.open())
            # An op's answer comes as the response that carries its result; the
            # event that follows it (a handed-off claim) is set into the same message.
            async for answered, item in loop.run():
                if answered is None and item is None:
                    continue
                response = pb.SessionResponse() if answered is None else answered
                if isinstance(item, IdleTimedOut):
                    response.idle_timeout.SetInParent()
                    response.idle_timeout.idle_polls = item.idle_polls
                elif isinstance(item, ClaimEnd):
                    response.claim_ended.CopyFrom(convert.claim_ended(item))
                elif item is not None:
                    convert.fill_event(response, item)
                yield response
        finally:
            ops.close()
            self._left(loop)

    def _left(self, loop: TeammateStream) -> None:
        if loop.stream is None:
            return  # it never opened
        loop.close()
        if loop.ending:
            self._spawn(self._board.set_online(loop.name, False, loop.ending))

    def _spawn(self, coroutine) -> None:
        # Runs after the stream is gone (even if it was cancelled); kept
        # referenced so the task is not garbage-collected mid-flight.
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.debug("stream bookkeeping failed: %s", task.exception())

    async def drain(self) -> None:
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    async def AckMessages(self, request: pb.AckMessagesRequest, context, identity: Identity) -> pb.AckMessagesResponse:
        self._hub.alive(identity.name)
        acked = await self._board.ack(identity.name, request.through_seq)
        return pb.AckMessagesResponse(acked_through_seq=acked)

    async def RenewLease(self, request: pb.RenewLeaseRequest, context, identity: Identity) -> pb.RenewLeaseResponse:
        self._hub.alive(identity.name)
        lease_end, pending = await self._board.renew(
            identity.name,
            request.task_id,
            request.claim_token,
            *convert.renew_progress(request),
            convert.reported_usage(request),
        )
        return pb.RenewLeaseResponse(lease_expire_time=convert.timestamp(lease_end), protocol_pending=pending)

    async def CompleteTask(
        self, request: pb.CompleteTaskRequest, context, identity: Identity
    ) -> pb.CompleteTaskResponse:
        name = identity.name
        self._hub.alive(name)
        reported, verdict = convert.reported_usage(request), convert.verdict(request)
        stream = self._hub.stream_of(name)
        if stream is None:
            done = await self._board.complete(
                name, request.task_id, request.claim_token, request.result, reported=reported, verdict=verdict
            )
            return pb.CompleteTaskResponse(task=convert.task(done.task))
        # With the teammate's stream open, the completion hands off: the same job
        # decides what that stream sends next (never this reply), and it goes in
        # the stream's mailbox.
        view = stream.view(finishing=request.claim_token)  # its handoff may fill the slot it frees
        done = await self._board.complete(
            name,
            request.task_id,
            request.claim_token,
            request.result,
            reported=reported,
            verdict=verdict,
            stream=view,
            waiters=self._hub.parked,
        )
        stream.finished(request.claim_token, check=False)  # the handoff looked already
        assert done.handoff is not None  # a completion with its stream's snapshot hands off
        stream.hand(done.handoff)
        return pb.CompleteTaskResponse(task=convert.task(done.task))

    async def FailTask(self, request: pb.FailTaskRequest, context, identity: Identity) -> pb.FailTaskResponse:
        self._hub.alive(identity.name)
        task = await self._board.fail(
            identity.name,
            request.task_id,
            request.claim_token,
            request.error,
            request.retryable,
            convert.reported_usage(request),
        )
        self._freed(identity.name, request.claim_token)
        return pb.FailTaskResponse(task=convert.task(task))

    async def ReleaseTask(self, request: pb.ReleaseTaskRequest, context, identity: Identity) -> pb.ReleaseTaskResponse:
        self._hub.alive(identity.name)
        task = await self._board.release(identity.name, request.task_id, request.claim_token)
        self._freed(identity.name, request.claim_token)
        return pb.ReleaseTaskResponse(task=convert.task(task))

    async def AskQuestion(self, request: pb.AskQuestionRequest, context, identity: Identity) -> pb.AskQuestionResponse:
        self._hub.alive(identity.name)
        task = await self._board.ask_question(identity.name, request.task_id, request.claim_token, request.question)
        self._freed(identity.name, request.claim_token)
        return pb.AskQuestionResponse(task=convert.task(task))

    async def ProposeTasks(
        self, request: pb.ProposeTasksRequest, context, identity: Identity
    ) -> pb.ProposeTasksResponse:
        self._hub.alive(identity.name)
        proposed = await self._board.propose_tasks(identity.name, *convert.proposal(request))
        if proposed.split_task is not None:
            self._freed(identity.name, request.claim_token)
        return convert.proposed(proposed)

    async def AppendOutput(
        self, request: pb.AppendOutputRequest, context, identity: Identity
    ) -> pb.AppendOutputResponse:
        self._hub.alive(identity.name)
        appended = await self._board.append_output(identity.name, request.task_id, request.claim_token, request.data)
        return pb.AppendOutputResponse(attempt=appended.attempt, size=appended.size)

    async def PutArtifact(self, requests, context, identity: Identity) -> pb.Artifact:
        self._hub.alive(identity.name)
        return await artifacts.put(self._board, identity.name, requests)

    async def FreeSlot(self, request: pb.FreeSlotRequest, context, identity: Identity) -> pb.FreeSlotResponse:
        self._hub.alive(identity.name)
        validate.check_claim_token("claim_token", request.claim_token)
        self._freed(identity.name, request.claim_token)
        return pb.FreeSlotResponse()

    def _freed(self, name: str, token: str) -> None:
        """The teammate freed the slot of `token` (see IdleRequest.hold_slots_until_freed):
        its stream on this daemon, if any, may claim again."""
        stream = self._hub.stream_of(name)
        if stream is not None:
            stream.free_slot(token)

    async def SubmitPlan(self, request: pb.SubmitPlanRequest, context, identity: Identity) -> pb.SubmitPlanResponse:
        self._hub.alive(identity.name)
        return pb.SubmitPlanResponse(plan_id=await self._board.submit_plan(identity.name, request.plan))

    async def RespondShutdown(
        self, request: pb.RespondShutdownRequest, context, identity: Identity
    ) -> pb.RespondShutdownResponse:
        self._hub.alive(identity.name)
        await self._board.respond_shutdown(identity.name, request.request_id, request.approve, request.reason)
        return pb.RespondShutdownResponse()
