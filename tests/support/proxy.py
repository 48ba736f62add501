"""A gRPC proxy in front of a daemon, for tests of what a teammate does when
the network, not the daemon, loses a Session op's answer.

`SessionProxy` listens on a Unix socket and forwards every corral.v1 call to
the daemon unchanged (bytes in, bytes out; the credential and the error
details pass through). It records the ops of each Session stream, and can be
told to lose the answer to the next op of a kind: the daemon runs and
records the op, the teammate never hears of it, either because the answer
is dropped while the stream goes on (`lose_answer`) or because the stream
breaks with UNAVAILABLE in its place (`lose_answer(..., then_break=True)`).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import grpc

from corral.v1 import corral_pb2 as pb

SESSION_METHOD = "/corral.v1.TeammateService/Session"


@dataclass
class SessionLog:
    """What one Session stream carried: the teammate's ops as (kind, op id),
    and the kinds of the events the daemon sent, each in order."""

    ops: list[tuple[str, str]] = field(default_factory=list)
    events: list[str] = field(default_factory=list)

    def op_ids(self, kind: str) -> list[str]:
        return [op_id for op_kind, op_id in self.ops if op_kind == kind]


@dataclass
class _Loss:
    kind: str
    then_break: bool
    lost: threading.Event = field(default_factory=threading.Event)


class SessionProxy:
    """Forwards to `upstream`; `address` is where teammates connect instead."""

    def __init__(self, upstream: str, socket: Path) -> None:
        self.address = f"unix:{socket}"
        self.calls: list[str] = []
        self.sessions: list[SessionLog] = []
        self._lock = threading.Lock()
        self._losses: list[_Loss] = []
        self._channel = grpc.insecure_channel(upstream)
        self._server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=32))
        self._server.add_generic_rpc_handlers([_Forwarder(self)])
        self._server.add_insecure_port(self.address)

    def __enter__(self) -> SessionProxy:
        self._server.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.stop(grace=None)
        self._channel.close()

    def lose_answer(self, kind: str, *, then_break: bool = False) -> threading.Event:
        """Lose the answer to the next op of `kind` ("release", "fail", ...); the
        returned Event is set once it was lost."""
        loss = _Loss(kind, then_break)
        with self._lock:
            self._losses.append(loss)
        return loss.lost

    def session_ops(self, kind: str) -> list[list[str]]:
        """The op ids of `kind` each Session stream carried, stream by stream."""
        with self._lock:
            return [log.op_ids(kind) for log in self.sessions]

    # ------------------------------------------------------------ forwarding

    def _record_call(self, method: str) -> None:
        with self._lock:
            self.calls.append(method)

    def _new_session(self) -> SessionLog:
        log = SessionLog()
        with self._lock:
            self.sessions.append(log)
        return log

    def _loss_for(self, log: SessionLog, op_id: str) -> _Loss | None:
        with self._lock:
            kind = next((k for k, i in log.ops if i == op_id), None)
            for loss in self._losses:
                if loss.kind == kind:
                    self._losses.remove(loss)
                    return loss
        return None

    def unary(self, method: str) -> Callable[[bytes, grpc.ServicerContext], bytes]:
        def handle(request: bytes, context: grpc.ServicerContext) -> bytes:
            try:
                response: bytes = self._channel.unary_unary(method)(request, metadata=_credential(context))
                return response
            except grpc.RpcError as exc:
                _pass_on(exc, context)

        return handle

    def server_stream(self, method: str) -> Callable[[bytes, grpc.ServicerContext], Iterator[bytes]]:
        def handle(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
            call = self._channel.unary_stream(method)(request, metadata=_credential(context))
            context.add_callback(call.cancel)
            try:
                yield from call
            except grpc.RpcError as exc:
                _pass_on(exc, context)

        return handle

    def session(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        log = self._new_session()

        def forward() -> Iterator[bytes]:
            for raw in requests:
                request = pb.SessionRequest.FromString(raw)
                with self._lock:
                    log.ops.append((request.WhichOneof("op") or "", request.op_id))
                yield raw

        call = self._channel.stream_stream(SESSION_METHOD)(forward(), metadata=_credential(context))
        context.add_callback(call.cancel)
        try:
            # Headers as they come, before any message, as an HTTP/2 proxy passes them.
            context.send_initial_metadata(call.initial_metadata() or ())
            for raw in call:
                response = pb.SessionResponse.FromString(raw)
                event = response.WhichOneof("event")
                if event is not None:
                    with self._lock:
                        log.events.append(event)
                loss = self._loss_for(log, response.op_result.op_id) if response.HasField("op_result") else None
                if loss is None:
                    yield raw
                    continue
                loss.lost.set()
                if loss.then_break:
                    call.cancel()
                    context.abort(grpc.StatusCode.UNAVAILABLE, "the proxy broke the stream")
                if event is not None:
                    response.ClearField("op_result")
                    yield response.SerializeToString()
        except grpc.RpcError as exc:
            if exc.code() is not grpc.StatusCode.CANCELLED:
                _pass_on(exc, context)


class _Forwarder(grpc.GenericRpcHandler):
    def __init__(self, proxy: SessionProxy) -> None:
        self._proxy = proxy
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}
        for service in pb.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                path = f"/{service.full_name}/{method.name}"
                if method.client_streaming:
                    self._handlers[path] = grpc.stream_stream_rpc_method_handler(proxy.session)
                elif method.server_streaming:
                    self._handlers[path] = grpc.unary_stream_rpc_method_handler(proxy.server_stream(path))
                else:
                    self._handlers[path] = grpc.unary_unary_rpc_method_handler(proxy.unary(path))

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        self._proxy._record_call(handler_call_details.method)
        return self._handlers.get(handler_call_details.method)


def _credential(context: grpc.ServicerContext) -> list[tuple[str, str]]:
    return [(key, value) for key, value in context.invocation_metadata() if key == "authorization"]


def _pass_on(exc: grpc.RpcError, context: grpc.ServicerContext) -> NoReturn:
    """End the proxied call as the daemon ended it, error details included."""
    call: Any = exc
    context.set_trailing_metadata(call.trailing_metadata() or ())
    context.abort(call.code(), call.details() or "")
    raise AssertionError("ServicerContext.abort returned")
