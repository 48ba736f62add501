# Generated from client/corral/aio/_session.py by scripts/unasync.py: do not edit.
# Change the asyncio source and run `make unasync`.
"""The Session stream: what Idle delivers and the claim ops, on one bidirectional stream.

A Teammate client has one `Session`. `events()` opens a stream (its first
message `open`, carrying the Idle options) and yields the responses that
carry an event, in order. A reader in the background (an asyncio task; a
thread in `corral`) takes every response as it arrives, so an op's result is
seen while the caller is still busy with the last event. `call()` sends an
op on the open stream and waits for its result.

Ops and broken streams:

- With no stream open, `call()` returns None and the caller makes the unary
  call instead; so do ops whose stream ended cleanly, was closed on purpose
  or failed for good (ABORTED, UNAUTHENTICATED, ...).
- An op without a result within its timeout gets the stream dropped and a new
  one opened, and every unanswered op is sent again with its op id (the
  daemon answers a repeat with the outcome it recorded, without running it
  again). A second timeout of the same op raises DEADLINE_EXCEEDED.
- When the stream breaks transiently (UNAVAILABLE, say), its unanswered ops
  wait up to RESEND_WINDOW seconds for the next stream (`run_teammate` opens
  one at once) and are sent again on it; after that they go by unary call.
  Acks never wait: they go by unary call at once.
- After a reconnect of its own, the daemon sends the held claims and the
  unacknowledged inbox again: the Teammate's claim book skips known claims,
  and `events()` skips inbox items it already yielded.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass

import grpc

from corral._errors import CorralError, error_from_rpc, error_from_status
from corral._opbook import OpBook, PendingOp
from corral._primitives import (
    Background,
    Future,
    Lock,
    Queue,
    may_write,
    next_message,
    wait_future,
)
from corral._retry import is_transient
from corral._transport import SessionUnsupported, Transport, session_required_error
from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

__all__ = ["RESEND_WINDOW", "Session"]

# How long ops of a transiently broken stream wait for the next stream before
# going by unary call: run_teammate reconnects at once, and within seconds of
# a restarted daemon coming back; a longer outage is left to the unary call
# and the caller's retries (an op then sent again may be refused if it ran).
RESEND_WINDOW = 10.0

# How long a new stream's first write waits for the daemon's headers (they
# come at once; see may_write).
_HEADERS_WAIT = 1.0

_INBOX_EVENTS = frozenset({"message", "shutdown_request", "plan_decision", "proposals_decided"})


class _Again(enum.Enum):
    """A waiter's outcome meaning: the op's state changed, look again."""

    LOOK = enum.auto()


# What an op's waiter is resolved with: its result, the CorralError of a
# failed op, None for "make the unary call instead", or _Again.LOOK.
_Outcome = pb.SessionOpResult | CorralError | _Again | None


@dataclass(frozen=True)
class _End:
    """The last item a consumer receives: how its stream ended (None: cleanly)."""

    error: CorralError | None


class _Stream:
    """One Session call and the queue that feeds it its requests."""

    def __init__(
        self,
        stub: pb_grpc.TeammateServiceStub,
        metadata: Sequence[tuple[str, str]],
        open_request: pb.IdleRequest,
    ) -> None:
        self._outbox: Queue[pb.SessionRequest | None] = Queue()
        self._outbox.put_nowait(pb.SessionRequest(open=open_request))
        # `_requests` looks at `self.call` only on asyncio, where it runs after
        # this assignment; gRPC's thread may start it sooner in the sync SDK.
        self.call = stub.Session(self._requests(), metadata=metadata)
        self.answered = False
        """Whether any response came: UNIMPLEMENTED means "no Session RPC" only before one."""
        self.reader: Background | None = None

    def send(self, request: pb.SessionRequest) -> None:
        self._outbox.put_nowait(request)

    def end_writing(self) -> None:
        """Let the request iterator finish, so nothing waits on the queue any more."""
        self._outbox.put_nowait(None)

    def drop(self) -> None:
        self.call.cancel()
        self.end_writing()

    def _requests(self) -> Iterator[pb.SessionRequest]:
        if not may_write(lambda: self.call, _HEADERS_WAIT):
            return
        while True:
            request = self._outbox.get()
            if request is None:
                return
            yield request


_Op = PendingOp[Future[_Outcome], _Stream]


class Session:
    """The Session stream of one Teammate client, across its reconnects."""

    def __init__(
        self,
        stub: pb_grpc.TeammateServiceStub,
        metadata: Sequence[tuple[str, str]],
        *,
        transport: Transport,
        op_timeout: float,
    ) -> None:
        self._stub = stub
        self._metadata = metadata
        self._transport = transport
        self._op_timeout = op_timeout
        self._lock = Lock()
        self._ops: OpBook[Future[_Outcome], _Stream] = OpBook()
        self._stream: _Stream | None = None
        self._consumer: Queue[pb.SessionResponse | _End] | None = None
        self._open_request = pb.IdleRequest()
        self._unsupported = False
        # For an opening with hold_slots_until_freed: the claims whose work still runs,
        # read at each (re)connect (a stream that broke leaves them running).
        self.busy_claim_tokens: Callable[[], list[str]] | None = None

    @property
    def usable(self) -> bool:
        """Whether `idle()` should open a Session stream rather than Idle."""
        return self._transport is not Transport.IDLE and not self._unsupported

    # ------------------------------------------------------------ events

    def events(self, request: pb.IdleRequest) -> Generator[pb.SessionResponse, None, None]:
        """Open a stream with `request` and yield each response carrying an event.

        Raises the CorralError the stream ended with, SessionUnsupported when
        the daemon has no Session RPC (on CORRAL_TRANSPORT unset), and an
        ABORTED CorralError when a newer `events()` of this client took over.
        """
        consumer: Queue[pb.SessionResponse | _End] = Queue()
        with self._lock:
            if self._consumer is not None:
                superseded = CorralError(
                    "a newer idle() of this client took over its Session stream", code=grpc.StatusCode.ABORTED
                )
                self._consumer.put_nowait(_End(superseded))
            if self._stream is not None:
                self._stream.drop()  # its unanswered ops go on the new stream
            self._consumer, self._open_request = consumer, request
            self._connect_locked()
        newest_seq = 0
        try:
            while True:
                item = consumer.get()
                if isinstance(item, _End):
                    if item.error is not None:
                        raise item.error
                    return
                kind = item.WhichOneof("event")
                if kind in _INBOX_EVENTS:
                    seq: int = getattr(item, kind).seq
                    if seq <= newest_seq:
                        continue  # sent again on a stream that replaced a dropped one
                    newest_seq = seq
                yield item
        finally:
            with self._lock:
                self._leave_locked(consumer)

    def _leave_locked(self, consumer: Queue[pb.SessionResponse | _End]) -> None:
        if consumer is not self._consumer:
            return  # taken over by a newer events(), or closed
        self._consumer = None
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.drop()
            self._orphan_locked(keep=False)  # stopped on purpose: no stream follows

    # ------------------------------------------------------------ ops

    def call(
        self,
        request: pb.SessionRequest,
        *,
        timeout: float | None = None,
        resend: bool = True,
    ) -> pb.SessionOpResult | None:
        """Send the op `request` (its op id is set here) and return its result.

        Raises the CorralError a failed op maps to (the unary call's), or one
        with DEADLINE_EXCEEDED when two streams in a row left it unanswered.
        Returns None when no stream carries the op: make the unary call.
        Each wait for the result lasts the client's op timeout, or `timeout`
        if shorter (a renew's, which must not outlast the lease);
        `resend=False` sends it by unary call, not on the next stream, when
        its stream breaks.
        """
        timeout = min(timeout or self._op_timeout, self._op_timeout)
        with self._lock:
            stream = self._stream
            if stream is None:
                return None
            op: _Op = self._ops.add(request, Future(), resend=resend)
            self._send_locked(stream, op)
        try:
            return self._result(op, timeout)
        finally:
            with self._lock:
                self._ops.pop(op.op_id)

    def _result(self, op: _Op, timeout: float) -> pb.SessionOpResult | None:
        while True:
            with self._lock:
                waiter = op.waiter
                left = op.since + self._window(op, timeout) - time.monotonic()
            try:
                outcome = wait_future(waiter, max(left, 0.0))
            except TimeoutError:
                outcome = self._late(op, waiter, timeout)
            if isinstance(outcome, _Again):
                continue
            if isinstance(outcome, CorralError):
                raise outcome
            return outcome

    @staticmethod
    def _window(op: _Op, timeout: float) -> float:
        return timeout if op.stream is not None else min(timeout, RESEND_WINDOW)

    def _late(self, op: _Op, waiter: Future[_Outcome], timeout: float) -> _Outcome:
        """The op's wait ran out: decide what comes next."""
        with self._lock:
            if waiter is not op.waiter or waiter.done():
                return _Again.LOOK  # answered or orphaned just now
            if time.monotonic() < op.since + self._window(op, timeout):
                return _Again.LOOK  # sent again meanwhile
            if op.stream is None:
                return None  # no stream came for it in time: the unary call
            if op.timeouts:
                return CorralError(
                    f"no answer to Session op {op.op_id} within {timeout:g}s on two streams in a row",
                    code=grpc.StatusCode.DEADLINE_EXCEEDED,
                )
            op.timeouts += 1
            # The stream may be wedged: drop it, open another, send every unanswered op again.
            op.stream.drop()
            self._connect_locked()
            return _Again.LOOK

    # ------------------------------------------------------------ streams

    def _connect_locked(self) -> None:
        stream = _Stream(self._stub, self._metadata, self._opening())
        self._stream = stream
        for op in self._ops.unanswered():
            self._send_locked(stream, op)
        stream.reader = Background(self._read, stream, name="corral-session")

    def _opening(self) -> pb.IdleRequest:
        request = self._open_request
        if not request.hold_slots_until_freed or self.busy_claim_tokens is None:
            return request
        opening = pb.IdleRequest()
        opening.CopyFrom(request)
        opening.busy_claim_tokens[:] = self.busy_claim_tokens()[: max(request.slots, 1)]
        return opening

    @staticmethod
    def _send_locked(stream: _Stream, op: _Op) -> None:
        op.stream, op.since = stream, time.monotonic()
        stream.send(op.request)

    def _read(self, stream: _Stream) -> None:
        # A read ended by anything but the stream's end or an RpcError (our own cancel, say).
        ended: CorralError | None = CorralError("the Session stream was cancelled", code=grpc.StatusCode.CANCELLED)
        try:
            while True:
                response = next_message(stream.call)
                if response is None:
                    ended = None
                    return
                self._on_response(stream, response)
        except grpc.RpcError as exc:
            ended = error_from_rpc(exc)
        finally:
            self._on_end(stream, ended)

    def _on_response(self, stream: _Stream, response: pb.SessionResponse) -> None:
        with self._lock:
            stream.answered = True
            # An op's result comes before the event of the same response (a
            # completion, then the claim handed off with it).
            if response.HasField("op_result"):
                self._answer_locked(response.op_result)
            if response.WhichOneof("event") is not None and stream is self._stream and self._consumer is not None:
                self._consumer.put_nowait(response)

    def _answer_locked(self, result: pb.SessionOpResult) -> None:
        op = self._ops.pop(result.op_id)
        if op is None:
            return  # given up on, or answered already (a repeat's second answer)
        _settle(op.waiter, error_from_status(result.status) if result.status.code else result)

    def _on_end(self, stream: _Stream, error: CorralError | None) -> None:
        with self._lock:
            stream.end_writing()
            if stream is not self._stream:
                return  # dropped on purpose
            self._stream = None
            if error is not None and error.code is grpc.StatusCode.UNIMPLEMENTED and not stream.answered:
                if self._transport is Transport.AUTO:
                    self._unsupported = True
                    error = SessionUnsupported()
                else:
                    error = session_required_error()
            self._orphan_locked(keep=error is not None and is_transient(error))
            if self._consumer is not None:
                self._consumer.put_nowait(_End(error))

    def _orphan_locked(self, *, keep: bool) -> None:
        """The ops' stream is gone: keep them for the next one, or hand them to the unary call."""
        now = time.monotonic()
        for op in self._ops.unanswered():
            if keep and op.resend:
                if op.stream is not None:
                    op.stream, op.since = None, now
                    _settle(op.waiter, _Again.LOOK)
                    op.waiter = Future()
            else:
                self._ops.pop(op.op_id)
                _settle(op.waiter, None)

    # ------------------------------------------------------------ closing

    def close(self) -> None:
        """End the stream; ops still waiting raise a CANCELLED CorralError."""
        with self._lock:
            stream, self._stream = self._stream, None
            if stream is not None:
                stream.drop()
            for op in self._ops.unanswered():
                self._ops.pop(op.op_id)
                _settle(op.waiter, _closed())
            if self._consumer is not None:
                self._consumer.put_nowait(_End(_closed()))
                self._consumer = None
        if stream is not None and stream.reader is not None:
            stream.reader.join()


def _settle(waiter: Future[_Outcome], outcome: _Outcome) -> None:
    if not waiter.done():
        waiter.set_result(outcome)


def _closed() -> CorralError:
    return CorralError("the teammate client was closed", code=grpc.StatusCode.CANCELLED)
