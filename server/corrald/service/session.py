"""The ops of a Session stream: read one at a time, each answered once, in order.

The stream's loop is `teamstream.TeammateStream`, the same as Idle's; this
module is what a Session adds: a reader that takes the next op only once the
previous one is answered (so a session holds at most one op, and gRPC flow
control holds back the rest), and the op table: each op becomes one board
call, whose outcome is recorded by its op id in the op's own transaction
(`Board`'s claim calls given an `OpKey`, `store/ops.py`).

An op that is wrong in itself (no op id, an unknown field or kind, a body
that reuses an op id) gets an INVALID_ARGUMENT op result and the stream goes
on. A message that breaks the stream's rules (a second `open`) ends it.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable

from corral.v1 import corral_pb2 as pb

from .. import errors, validate
from ..board import Board
from ..model import TaskRecord
from ..requestids import OpKey
from ..stream import Delivery, StreamState
from ..wake import WakeHub
from . import convert, status

OP_ID_MAX_CHARS = 64

# What the interceptor hands the Session for each message: the request (None when
# its bytes did not parse) and what is wrong with it, if anything.
Parsed = tuple[pb.SessionRequest | None, errors.InvalidArgument | None]


class _ClientClosed:
    """The client half-closed: no op will come."""


class SessionOps:
    """The `teamstream.Ops` of one Session."""

    def __init__(self, board: Board, hub: WakeHub, name: str, requests: AsyncIterator[Parsed]) -> None:
        self._board = board
        self._hub = hub
        self._name = name
        self._requests = requests
        self._reading: asyncio.Task | None = None
        self._may_read = asyncio.Event()  # the previous op is answered
        self._arrived: Parsed | BaseException | _ClientClosed | None = None
        self._table: dict[str, Callable] = {
            "ack": self._ack,
            "renew": self._renew,
            "complete": self._complete,
            "fail": self._fail,
            "release": self._release,
            "free_slot": self._free_slot,
            "ask": self._ask,
            "propose": self._propose,
            "output": self._output,
        }

    # ------------------------------------------------------------ reading

    def start(self, stream: StreamState) -> None:
        self._may_read.set()
        self._reading = asyncio.ensure_future(self._read(stream))

    async def _read(self, stream: StreamState) -> None:
        """Reads one op at a time, each once the previous one is answered, and wakes the loop."""
        while True:
            await self._may_read.wait()
            self._may_read.clear()
            try:
                self._arrived = await anext(self._requests)
            except StopAsyncIteration:
                self._arrived = _ClientClosed()
            except Exception as error:  # a revoked credential, or the call's own end
                self._arrived = error
            stream.event.set()
            if not isinstance(self._arrived, tuple):
                return

    @property
    def arrived(self) -> bool:
        return self._arrived is not None

    def answered(self) -> None:
        self._may_read.set()

    def close(self) -> None:
        if self._reading is not None:
            self._reading.cancel()

    # ------------------------------------------------------------ answering

    async def answer(self, stream: StreamState) -> tuple[pb.SessionResponse | None, Delivery | None]:
        arrived, self._arrived = self._arrived, None
        if isinstance(arrived, _ClientClosed):
            stream.end("left")
            return None, None
        if isinstance(arrived, BaseException):
            raise arrived
        assert arrived is not None
        request, problem = arrived
        op_id = request.op_id if request is not None else ""
        try:
            if problem is not None:
                raise problem
            assert request is not None
            kind = request.WhichOneof("op")
            if kind == "open":
                raise errors.InvalidArgument("open", "a Session is opened once, by its first message")
            _check_op_id(op_id)
            if kind is None:
                raise errors.InvalidArgument("op", "names no op this server knows")
            self._hub.alive(self._name)
            body = getattr(request, kind)
            # The body as sent, a propose's trace contexts included: an op sent again is the
            # message its client kept, byte for byte. Work tried again is a new op, and a
            # proposal's answer to it ignores the trace context (validate.spec_digest).
            digest = hashlib.sha256(kind.encode() + body.SerializeToString(deterministic=True)).digest()
            return await self._table[kind](OpKey(op_id, digest), body, stream)
        except errors.CorralError as error:
            if isinstance(error, errors.InvalidArgument) and error.field == "open":
                raise  # ends the stream
            return _result(op_id, error), None

    async def _ack(self, op: OpKey, body: pb.AckMessagesRequest, stream: StreamState):
        await self._board.ack(self._name, body.through_seq, op=op)
        return _result(op.op_id), None

    async def _renew(self, op: OpKey, body: pb.RenewLeaseRequest, stream: StreamState):
        renewed = await self._board.renew(
            self._name,
            body.task_id,
            body.claim_token,
            *convert.renew_progress(body),
            convert.reported_usage(body),
            op=op,
        )
        response = _result(op.op_id)
        response.op_result.lease_expire_time.FromMilliseconds(renewed.lease_end_ms)
        response.op_result.protocol_pending = renewed.protocol_pending
        return response, None

    async def _complete(self, op: OpKey, body: pb.CompleteTaskRequest, stream: StreamState):
        view = stream.view(finishing=body.claim_token)  # its handoff may fill the slot it frees
        done = await self._board.complete(
            self._name,
            body.task_id,
            body.claim_token,
            body.result,
            reported=convert.reported_usage(body),
            verdict=convert.verdict(body),
            stream=view,
            waiters=self._hub.parked,
            op=op,
        )
        stream.finished(body.claim_token, check=False)  # the handoff looked already
        response = _result(op.op_id)
        convert.fill_task(response.op_result.task, done.task)
        response.op_result.result = done.task.result
        return response, done.handoff

    async def _fail(self, op: OpKey, body: pb.FailTaskRequest, stream: StreamState):
        task = await self._board.fail(
            self._name,
            body.task_id,
            body.claim_token,
            body.error,
            body.retryable,
            convert.reported_usage(body),
            op=op,
        )
        stream.finished(body.claim_token)
        return _with_task(op.op_id, task), None

    async def _release(self, op: OpKey, body: pb.ReleaseTaskRequest, stream: StreamState):
        task = await self._board.release(self._name, body.task_id, body.claim_token, op=op)
        stream.finished(body.claim_token)
        return _with_task(op.op_id, task), None

    async def _ask(self, op: OpKey, body: pb.AskQuestionRequest, stream: StreamState):
        task = await self._board.ask_question(self._name, body.task_id, body.claim_token, body.question, op=op)
        stream.finished(body.claim_token)
        return _with_task(op.op_id, task), None

    async def _propose(self, op: OpKey, body: pb.ProposeTasksRequest, stream: StreamState):
        proposed = await self._board.propose_tasks(self._name, *convert.proposal(body), op=op)
        response = _result(op.op_id)
        answer = convert.proposed(proposed)
        response.op_result.proposed_tasks.extend(answer.tasks)
        if proposed.split_task is not None:
            stream.finished(body.claim_token)
            response.op_result.task.CopyFrom(answer.claimed_task)
        return response, None

    async def _output(self, op: OpKey, body: pb.AppendOutputRequest, stream: StreamState):
        appended = await self._board.append_output(self._name, body.task_id, body.claim_token, body.data, op=op)
        response = _result(op.op_id)
        response.op_result.output.attempt = appended.attempt
        response.op_result.output.size = appended.size
        return response, None

    async def _free_slot(self, op: OpKey, body: pb.FreeSlotRequest, stream: StreamState):
        # Not recorded: it writes nothing, and freeing a slot again changes nothing.
        validate.check_claim_token("claim_token", body.claim_token)
        stream.free_slot(body.claim_token)
        return _result(op.op_id), None


def _check_op_id(op_id: str) -> None:
    if not op_id:
        raise errors.InvalidArgument("op_id", "required on every op after open")
    if len(op_id) > OP_ID_MAX_CHARS:
        raise errors.InvalidArgument("op_id", f"longer than {OP_ID_MAX_CHARS} characters")


def _result(op_id: str, error: errors.CorralError | None = None) -> pb.SessionResponse:
    """The response that answers an op: its result is set in place, and the event that
    follows the op (a handed-off claim) goes into the same message (convert.fill_event)."""
    # The op id goes back as sent, even one refused as too long: results come in the
    # order of the ops, and the id is how the client matches them.
    response = pb.SessionResponse()
    result = response.op_result
    result.op_id = op_id
    result.status.SetInParent()  # present even when OK, whose fields are all zero
    result.status.CopyFrom(status.OK if error is None else status.rpc_status_of(error))
    return response


def _with_task(op_id: str, task: TaskRecord) -> pb.SessionResponse:
    response = _result(op_id)
    convert.fill_task(response.op_result.task, task)
    return response


async def first_open(requests: AsyncIterator[Parsed]) -> pb.IdleRequest:
    """The Session's first message, which must be `open`; anything else ends the stream."""
    try:
        request, problem = await anext(requests)
    except StopAsyncIteration:
        raise errors.InvalidArgument("open", "the stream ended before its first message") from None
    if problem is not None:
        raise problem
    assert request is not None
    if request.WhichOneof("op") != "open":
        raise errors.InvalidArgument("open", "the first message of a Session must be open")
    return request.open
