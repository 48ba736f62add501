"""The teammate client: its stream (Session or Idle), claims, plans and shutdown answers."""

from __future__ import annotations

import contextlib
import datetime
import functools
from collections.abc import AsyncGenerator, Callable, Iterable
from types import TracebackType
from typing import Any, Self

import grpc.aio

from corral import _convert
from corral._artifacts import TRANSFER_TIMEOUT_S, ArtifactSource, upload_requests
from corral._channel import DEFAULT_CONNECT_TIMEOUT, async_reach, open_aio_channel, resolve_credentials
from corral._claimbook import ClaimBook
from corral._retry import async_write_retrying
from corral._transport import SessionUnsupported, transport_from_env
from corral._types import (
    Artifact,
    BudgetExhausted,
    ClaimEnded,
    ClaimInfo,
    IdleTimeout,
    Message,
    PlanDecision,
    ProposalsDecided,
    ShutdownRequest,
    Task,
    TaskSpec,
    Usage,
    Verdict,
)
from corral.aio._board import WRITE_RETRY_S, BoardClient
from corral.aio._claim import Claim
from corral.aio._session import Session
from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

__all__ = ["IdleEvent", "Teammate"]

IdleEvent = (
    Message | ShutdownRequest | PlanDecision | ProposalsDecided | Claim | ClaimEnded | IdleTimeout | BudgetExhausted
)
"""Anything `Teammate.idle` yields."""


class Teammate(BoardClient):
    """A teammate's connection to the daemon.

    `await Teammate.connect()` reads CORRAL_ADDRESS and CORRAL_TOKEN from the
    environment; iterate `idle()` to receive work and control messages
    (`async for event in teammate.idle(): ...`).

    Where the daemon offers it, `idle()` opens the Session stream, and the
    claim calls and acknowledgements made while it is open travel on it;
    otherwise (an older daemon answers UNIMPLEMENTED) the Idle stream and a
    unary call each. CORRAL_TRANSPORT=session or =idle insists on one.
    `rpc_timeout` (default 30 s) bounds each unary call and each wait for a
    Session op's answer: a late answer gets the stream replaced and the op
    sent again under the same op id, which the daemon never runs twice.
    """

    def __init__(
        self,
        channel: grpc.aio.Channel,
        address: str,
        token: str,
        *,
        rpc_timeout: float | None = None,
    ) -> None:
        super().__init__(channel, address, token, rpc_timeout=rpc_timeout)
        self._teammate = pb_grpc.TeammateServiceStub(channel)
        self._session = Session(
            self._teammate,
            self._metadata,
            transport=transport_from_env(),
            op_timeout=self._rpc_timeout,
        )
        self._claims: ClaimBook[Claim] = ClaimBook()
        # The claims yielded whose slots this client has not freed (completed, failed,
        # released or free_slot): on a stream opened with hold_slots_until_freed, those
        # no longer held are named in busy_claim_tokens when a stream (re)opens.
        self._working: dict[str, None] = {}
        self._session.busy_claim_tokens = lambda: list(self._working)
        self._claim_calls = _ClaimCalls(self._unary, self._teammate, self._session, self._claims, self._working)
        self._acked_through = 0

    @classmethod
    async def connect(
        cls,
        address: str | None = None,
        token: str | None = None,
        *,
        root_certificates: bytes | None = None,
        rpc_timeout: float | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> Teammate:
        """Connect with the given credentials, else CORRAL_ADDRESS / CORRAL_TOKEN.

        Raises CorralError when neither is available, or when CORRAL_TRANSPORT
        names no transport. Waits for the connection: the first failure logs a
        warning naming the address (`cannot reach corrald at ADDRESS: retrying
        for 60 s`), and Unavailable naming it is raised once `connect_timeout`
        seconds have passed (0: do not wait; the first call finds out). A wrong
        token is found out by the first call.
        """
        address, token = resolve_credentials(address, token)
        channel = open_aio_channel(address, root_certificates=root_certificates)
        try:
            teammate = cls(channel, address, token, rpc_timeout=rpc_timeout)
        except BaseException:
            await channel.close()
            raise
        try:
            await async_reach(channel, address, token, connect_timeout)
        except BaseException:
            await teammate.close()
            raise
        return teammate

    async def close(self) -> None:
        """Stop every keepalive and close the channel. Held claims stay leased
        until they expire (release them first to hand them back at once)."""
        for claim in self._claims.held():
            await claim.stop_keepalive()
            await claim._close_output()
        await self._session.close()
        await super().close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------ idle

    async def idle(
        self,
        *,
        max_idle_polls: int | None = None,
        poll_interval: datetime.timedelta | float | None = None,
        slots: int | None = None,
        hold_slots_until_freed: bool = False,
    ) -> AsyncGenerator[IdleEvent, None]:
        """Open the teammate's stream and yield what the daemon sends, in order.

        Yields `Claim` handles (each claim once, even when a new stream
        re-sends it), `Message`, `ShutdownRequest`, `PlanDecision`,
        `ProposalsDecided` (the Lead decided tasks this teammate proposed),
        `BudgetExhausted` once when this teammate's spending reaches its budget
        (no new claim follows until the Lead raises it; held claims stay) and,
        last, `IdleTimeout` before the daemon ends the stream. `ClaimEnded` says a
        held claim died under this teammate (lease expired, task canceled,
        revoked, attempt timed out): stop that work; its `Claim` is lost by
        then (`claim.ended`, and its keepalive stops).

        Inbox items are acknowledged when you resume the iterator after one
        (i.e. once your loop body handled it), so an item whose handling
        raised, or that was the last before you stopped iterating, is sent
        again on the next stream. The daemon sends no claim while a
        shutdown request, plan decision or proposals' decision is unacknowledged. Close the
        iterator (`contextlib.aclosing`) to end the stream promptly when you
        stop early.

        On the Session stream, the claim calls and acknowledgements this
        client makes while the iterator is open travel on it; with it closed
        they are unary calls.

        With `hold_slots_until_freed`, a slot whose claim ended under this client
        (ClaimEnded, or a call that found it dead) stays taken until you call
        `claim.free_slot()` once its work stopped (completing, failing, releasing
        or asking about a claim frees its slot too): no claim arrives while every
        worker is still busy. `run_teammate` does this for you.

        Options left as None take the daemon's defaults (12 polls of 5 s, one slot).
        Stream failures raise CorralError subclasses (Unavailable when the
        daemon went away); a newer stream of the same teammate ends this
        one with an ABORTED CorralError.
        """
        request = _convert.idle_request(
            max_idle_polls=max_idle_polls,
            poll_interval=poll_interval,
            slots=slots,
            hold_slots_until_freed=hold_slots_until_freed,
            busy_claim_tokens=list(self._working),
        )
        idle_stream = functools.partial(self._stream, self._teammate.Idle)
        async with contextlib.aclosing(_responses(self._session, idle_stream, request)) as responses:
            async for response in responses:
                item = _convert.idle_item_from_pb(response)
                if isinstance(item, ClaimInfo):
                    claim = self._claims.admit(item, self._make_claim)
                    if claim is not None:
                        self._working[claim.token] = None
                        yield claim
                elif isinstance(item, ClaimEnded):
                    ended = self._claims.get(item.claim_token)
                    if ended is not None:
                        ended._end(item)
                        yield item
                    elif self._claims.recently_held(item.claim_token):
                        # A renewal proved it dead before the notice came: the claim knows
                        # already, and the notice still says why.
                        yield item
                elif isinstance(item, (Message, ShutdownRequest, PlanDecision, ProposalsDecided)):
                    yield item
                    await self.ack(item.seq)
                elif item is not None:
                    yield item

    async def ack(self, through_seq: int) -> int:
        """Acknowledge inbox items up to and including `through_seq`.

        `idle()` does this for you; call it yourself only to acknowledge an
        item before resuming the iterator. Returns the acknowledged sequence.
        """
        if through_seq <= self._acked_through:
            return self._acked_through
        request = pb.AckMessagesRequest(through_seq=through_seq)
        acked = through_seq
        if await self._session.call(pb.SessionRequest(ack=request), resend=False) is None:
            response = await self._unary(self._teammate.AckMessages, request)
            acked = response.acked_through_seq or through_seq
        self._acked_through = max(self._acked_through, acked)
        return self._acked_through

    def held_claims(self) -> list[Claim]:
        """The claims this client holds and has not finished."""
        return self._claims.held()

    def _make_claim(self, info: ClaimInfo) -> Claim:
        return Claim(info, self._claim_calls)

    # ------------------------------------------------------------ plans, proposals and shutdown

    async def propose_tasks(self, specs: Iterable[TaskSpec]) -> list[str]:
        """Propose tasks this teammate found to be needed, discovered from no claim
        (to name the task they come from, or to split it, use `Claim.propose_tasks`);
        returns their ids. As the Lead's policy for this teammate says
        (`Lead.set_task_creation`), they are PROPOSED and wait for the Lead's decision
        (a `ProposalsDecided` on the stream says it), or PENDING at once.

        1 to 100 specs, checked as `Lead.create_tasks` checks a batch: they may depend
        on tasks on the board and on each other, and their ids must be new
        (AlreadyExists; sending the very same proposal again answers as before).
        Raises PermissionDenied when the Lead denies this teammate task creation,
        FailedPrecondition when 1,000 of its proposals already wait, InvalidArgument
        for a spec `create_tasks` would refuse.
        """
        tasks, _ = await self._claim_calls.propose(_convert.propose_tasks_request(specs))
        return [task.id for task in tasks]

    async def submit_plan(self, plan: str) -> str:
        """Submit a plan for the Lead to decide; returns its plan id.

        When this teammate must plan first, claims arrive only after the
        newest plan's approval (a `PlanDecision` on the stream).
        """
        request = pb.SubmitPlanRequest(plan=plan)
        response: pb.SubmitPlanResponse = await self._unary(self._teammate.SubmitPlan, request)
        return response.plan_id

    async def respond_shutdown(self, request_id: str, *, approve: bool, reason: str = "") -> None:
        """Answer a ShutdownRequest. Approving releases every claim this
        teammate holds and ends its stream; rejecting lets it claim again."""
        request = pb.RespondShutdownRequest(request_id=request_id, approve=approve, reason=reason)
        await self._unary(self._teammate.RespondShutdown, request)
        if approve:
            for claim in self._claims.held():
                await claim.stop_keepalive()
                self._claims.forget(claim.token)


async def _responses(
    session: Session,
    idle_stream: Callable[[pb.IdleRequest], AsyncGenerator[Any, None]],
    request: pb.IdleRequest,
) -> AsyncGenerator[Any, None]:
    """The event-carrying responses of a Session stream, or of Idle where the daemon has no Session."""
    if session.usable:
        try:
            async with contextlib.aclosing(session.events(request)) as events:
                async for response in events:
                    yield response
            return
        except SessionUnsupported:
            pass  # an older daemon: Idle from now on
    async with contextlib.aclosing(idle_stream(request)) as responses:
        async for response in responses:
            yield response


class _ClaimCalls:
    """The claim calls a Teammate hands to each of its claims (a `ClaimCalls`):
    ops on the Session stream while one is open, else unary calls."""

    def __init__(
        self,
        unary: Callable[..., Any],
        stub: pb_grpc.TeammateServiceStub,
        session: Session,
        claims: ClaimBook[Claim],
        working: dict[str, None],
    ) -> None:
        self._unary = unary
        self._stub = stub
        self._session = session
        self._claims = claims
        self._working = working

    async def renew(
        self,
        task_id: str,
        token: str,
        *,
        timeout: float,
        progress: str = "",
        fraction: float | None = None,
        usage: Usage | None = None,
    ) -> tuple[datetime.datetime, bool]:
        request = pb.RenewLeaseRequest(
            task_id=task_id,
            claim_token=token,
            progress=progress,
            progress_fraction=fraction,
            usage=_convert.usage_to_pb(usage),
        )
        answer = await self._session.call(pb.SessionRequest(renew=request), timeout=timeout)
        if answer is None:
            answer = await self._unary(self._stub.RenewLease, request, timeout=timeout)
        expire_time = _convert.time_from_pb(answer, "lease_expire_time")
        assert expire_time is not None, "a renew answered without lease_expire_time"
        return expire_time, answer.protocol_pending

    async def complete(
        self, task_id: str, token: str, result: bytes, usage: Usage | None = None, verdict: Verdict | None = None
    ) -> Task:
        request = pb.CompleteTaskRequest(
            task_id=task_id,
            claim_token=token,
            result=result,
            usage=_convert.usage_to_pb(usage),
            verdict=_convert.verdict_to_pb(verdict) if verdict is not None else None,
        )
        answer = await self._session.call(pb.SessionRequest(complete=request))
        if answer is None:
            answer = await self._unary(self._stub.CompleteTask, request)
        self._working.pop(token, None)
        return _convert.task_from_pb(answer.task)

    async def fail(self, task_id: str, token: str, error: str, retryable: bool, usage: Usage | None = None) -> Task:
        request = pb.FailTaskRequest(
            task_id=task_id, claim_token=token, error=error, retryable=retryable, usage=_convert.usage_to_pb(usage)
        )
        answer = await self._session.call(pb.SessionRequest(fail=request))
        if answer is None:
            answer = await self._unary(self._stub.FailTask, request)
        self._working.pop(token, None)
        return _convert.task_from_pb(answer.task)

    async def release(self, task_id: str, token: str) -> Task:
        request = pb.ReleaseTaskRequest(task_id=task_id, claim_token=token)
        answer = await self._session.call(pb.SessionRequest(release=request))
        if answer is None:
            answer = await self._unary(self._stub.ReleaseTask, request)
        self._working.pop(token, None)
        return _convert.task_from_pb(answer.task)

    async def ask(self, task_id: str, token: str, question: str) -> Task:
        request = pb.AskQuestionRequest(task_id=task_id, claim_token=token, question=question)
        answer = await self._session.call(pb.SessionRequest(ask=request))
        if answer is None:
            answer = await self._unary(self._stub.AskQuestion, request)
        self._working.pop(token, None)  # the daemon freed its slot with the question
        return _convert.task_from_pb(answer.task)

    async def propose(self, request: pb.ProposeTasksRequest) -> tuple[list[Task], Task | None]:
        """ProposeTasks: the tasks, and with block_claimed_task the split task."""
        answer = await self._session.call(pb.SessionRequest(propose=request))
        if answer is not None:
            tasks, split = answer.proposed_tasks, answer.task if answer.HasField("task") else None
        else:
            response = await self._unary(self._stub.ProposeTasks, request)
            tasks, split = response.tasks, response.claimed_task if response.HasField("claimed_task") else None
        if request.block_claimed_task:
            self._working.pop(request.claim_token, None)  # the daemon freed its slot with the split
        return _convert.tasks_from_pb(tasks), _convert.task_from_pb(split) if split is not None else None

    async def append_output(self, task_id: str, token: str, data: bytes) -> tuple[int, int]:
        request = pb.AppendOutputRequest(task_id=task_id, claim_token=token, data=data)
        answer = await self._session.call(pb.SessionRequest(output=request))
        appended = answer.output if answer is not None else await self._unary(self._stub.AppendOutput, request)
        return appended.attempt, appended.size

    async def put_artifact(
        self, task_id: str, token: str, name: str, media_type: str, source: ArtifactSource
    ) -> Artifact:
        # Its own call whatever the transport (a Session op carries no stream of bytes),
        # sent again while its outcome is in doubt: the same bytes attach as before.
        answer: pb.Artifact = await async_write_retrying(WRITE_RETRY_S)(
            self._put_artifact, task_id, token, name, media_type, source
        )
        return _convert.artifact_from_pb(answer)

    async def _put_artifact(
        self, task_id: str, token: str, name: str, media_type: str, source: ArtifactSource
    ) -> pb.Artifact:
        requests = upload_requests(task_id, token, name, media_type, source)
        answer: pb.Artifact = await self._unary(self._stub.PutArtifact, requests, timeout=TRANSFER_TIMEOUT_S)
        return answer

    def forget(self, token: str) -> None:
        self._claims.forget(token)

    async def free_slot(self, token: str) -> None:
        self._working.pop(token, None)
        request = pb.FreeSlotRequest(claim_token=token)
        if await self._session.call(pb.SessionRequest(free_slot=request), resend=False) is None:
            await self._unary(self._stub.FreeSlot, request)
