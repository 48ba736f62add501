"""TeammateService, including the Idle stream of design §5."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

from .. import errors, failpoints, validate
from ..board import Board, Identity
from ..model import ClaimGrant
from ..overload.reopen import ReopenSpacing
from ..stream import StreamState
from ..wake import WakeHub
from ..writer import CommitFailed
from . import convert

log = logging.getLogger("corrald.idle")


class TeammateServicer(pb_grpc.TeammateServiceServicer):
    def __init__(self, board: Board, hub: WakeHub, reopen: ReopenSpacing) -> None:
        self._board = board
        self._hub = hub
        self._reopen = reopen
        self._background: set[asyncio.Task] = set()

    def _idle_options(self, request: pb.IdleRequest) -> tuple[int, float, int]:
        limits = self._board.limits
        polls = validate.defaulted(
            "max_idle_polls", request.max_idle_polls, limits.max_idle_polls_default, 1, limits.max_idle_polls_max
        )
        interval_ms = validate.defaulted(
            "poll_interval",
            convert.duration_ms(request, "poll_interval"),
            limits.poll_interval_default_ms,
            limits.poll_interval_min_ms,
            limits.poll_interval_max_ms,
            "ms",
        )
        slots = validate.defaulted("slots", request.slots, limits.slots_default, 1, limits.slots_max)
        return polls, interval_ms / 1000, slots

    async def Idle(self, request: pb.IdleRequest, context: grpc.aio.ServicerContext, identity: Identity):
        max_polls, interval, slots = self._idle_options(request)
        name = identity.name
        await self._reopen.turn(name)
        stream = self._hub.register(name, await self._board.teammate_roles(name), slots)
        ending = "left"
        try:
            try:
                await self._board.set_online(name, True)
            except CommitFailed:  # logged by the writer; what is stored is still delivered
                stream.online_pending = True
            idle_polls = 0
            waiting = False  # as last recorded: idle, or waiting for work still to come
            # Checks go to the writer, where many streams' checks share one
            # transaction; only a wake-up for an inbox item (a message or a
            # control message, never a chance to claim) is answered by a read
            # first, so control is not queued behind the board's writes.
            look_first = False
            while stream.ended is None:
                stream.event.clear()
                stream.claim_likely = False
                items = await self._board.next_for(name, stream, look_first=look_first)
                look_first = False
                if items:
                    for item in items:
                        yield convert.idle_response(item)
                        if isinstance(item, ClaimGrant):
                            failpoints.hit("after_claim_sent")
                    stream.mark_sent(items)
                    idle_polls = 0
                    if any(isinstance(item, ClaimGrant) for item in items):
                        waiting = False  # the claim made it busy; the next quiet poll looks again
                    if not stream.settled(items):
                        continue
                if await self._wait(stream, interval):
                    look_first = not stream.claim_likely
                    continue  # woken: wake-ups never use up the idle budget
                # An idle poll counts only while the teammate holds no claim and no
                # unfinished task remains that it could take: until then it is
                # waiting for work (a dependency still running), not idle.
                if stream.sent_tokens:
                    continue
                still_to_come = bool(await self._board.work_waited_for(name, stream.roles))
                if still_to_come != waiting:  # written only when it changes
                    with contextlib.suppress(CommitFailed):  # logged by the writer; written at a later poll
                        await self._board.set_waiting(name, still_to_come)
                        waiting = still_to_come
                if still_to_come:
                    idle_polls = 0
                    continue
                idle_polls += 1
                if idle_polls >= max_polls:
                    ending = "idle_timeout"
                    yield pb.IdleResponse(idle_timeout=pb.IdleTimeout(idle_polls=idle_polls))
                    return
            if self._hub.closing:
                raise errors.Unavailable("corrald is shutting down; reconnect to the next one")
            if stream.superseded:
                ending = ""
                raise errors.Aborted("superseded by a newer Idle stream from the same teammate")
            if stream.ended.startswith("removed") or stream.ended.startswith("shutdown grace"):
                ending = ""
                raise errors.Unauthenticated(f"teammate {name!r} was removed")
        finally:
            self._hub.unregister(stream)
            if ending:
                self._spawn(self._board.set_online(name, False, ending))

    async def _wait(self, stream: StreamState, interval: float) -> bool:
        """True when woken (or told to end), False when the poll interval passed."""
        stream.waiting = True
        try:
            await asyncio.wait_for(stream.event.wait(), interval)
            return True
        except TimeoutError:
            return False
        finally:
            stream.waiting = False

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
        lease_end, pending = await self._board.renew(identity.name, request.task_id, request.claim_token)
        return pb.RenewLeaseResponse(lease_expire_time=convert.timestamp(lease_end), protocol_pending=pending)

    async def CompleteTask(
        self, request: pb.CompleteTaskRequest, context, identity: Identity
    ) -> pb.CompleteTaskResponse:
        self._hub.alive(identity.name)
        task = await self._board.complete(identity.name, request.task_id, request.claim_token, request.result)
        return pb.CompleteTaskResponse(task=convert.task(task))

    async def FailTask(self, request: pb.FailTaskRequest, context, identity: Identity) -> pb.FailTaskResponse:
        self._hub.alive(identity.name)
        task = await self._board.fail(
            identity.name, request.task_id, request.claim_token, request.error, request.retryable
        )
        return pb.FailTaskResponse(task=convert.task(task))

    async def ReleaseTask(self, request: pb.ReleaseTaskRequest, context, identity: Identity) -> pb.ReleaseTaskResponse:
        self._hub.alive(identity.name)
        task = await self._board.release(identity.name, request.task_id, request.claim_token)
        return pb.ReleaseTaskResponse(task=convert.task(task))

    async def SubmitPlan(self, request: pb.SubmitPlanRequest, context, identity: Identity) -> pb.SubmitPlanResponse:
        self._hub.alive(identity.name)
        return pb.SubmitPlanResponse(plan_id=await self._board.submit_plan(identity.name, request.plan))

    async def RespondShutdown(
        self, request: pb.RespondShutdownRequest, context, identity: Identity
    ) -> pb.RespondShutdownResponse:
        self._hub.alive(identity.name)
        await self._board.respond_shutdown(identity.name, request.request_id, request.approve, request.reason)
        return pb.RespondShutdownResponse()
