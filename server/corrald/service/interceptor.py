"""One interceptor for what every call shares: identity, role, strictness, errors.

The bearer credential becomes an `Identity`, which the servicer method gets as
its third argument; nothing about the caller is taken from request fields.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import message as pb_message
from google.protobuf import unknown_fields

from .. import cpu, errors
from ..board import Board
from ..credentials import Identity, token_hash
from ..overload.heap import HeapTrim
from ..overload.lanes import CallLanes, LaneKind
from ..writer import job_owner
from . import status
from .sending import StreamSender

log = logging.getLogger("corrald.rpc")
activity_log = logging.getLogger("corrald.activity")  # refusals, beside the board's activity

LEAD_ONLY = "/corral.v1.LeadService/"
TEAMMATE_ONLY = "/corral.v1.TeammateService/"
EITHER = "/corral.v1.BoardService/"
OPEN = "/grpc.health.v1.Health/"  # load balancers probe without credentials
# Unary calls that only read; every other unary call of ours submits a writer job.
READS = frozenset(EITHER + name for name in ("GetTask", "ListTasks", "ListTeammates", "GetStats", "GetIdentity"))
# What a viewer (a read-only credential) may call: the board's reads, nothing else
# (GetIdentity among them: any credential may ask who it is), and a task's output and artifacts.
VIEWER_CALLS = READS | {EITHER + "TailOutput", EITHER + "GetArtifact"}


def unknown_field_path(message: pb_message.Message, prefix: str = "") -> str | None:
    """The path of the first field the schema does not know, if any."""
    if len(unknown_fields.UnknownFieldSet(message)):
        return prefix or "(request)"
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            continue
        children = value if field.is_repeated else [value]
        for index, child in enumerate(children):
            path = f"{prefix}{field.name}" + (f"[{index}]" if field.is_repeated else "")
            found = unknown_field_path(child, path + ".")
            if found:
                return found.rstrip(".")
    return None


def _bearer(metadata) -> str | None:
    for key, value in metadata or ():
        if key == "authorization":
            scheme, _, token = value.partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return None


class CorralInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, board: Board, lanes: CallLanes, *, draining: Callable[[], bool]) -> None:
        self._board = board
        self._lanes = lanes
        self._draining = draining

    def _authenticate(self, method: str, metadata) -> Identity:
        """The caller's identity from its bearer credential, checked against the method's
        role; raises a domain error when the call may not proceed."""
        if self._draining():
            raise errors.Unavailable("corrald is shutting down")
        token = _bearer(metadata)
        identity = self._board.credentials.authenticate(token) if token else None
        if identity is None:
            raise errors.Unauthenticated("missing, invalid or revoked credential")
        if identity.is_viewer and method not in VIEWER_CALLS:
            raise errors.PermissionDenied("a viewer may only read the board")
        if method.startswith(LEAD_ONLY) and not identity.is_lead:
            raise errors.PermissionDenied("only the lead may call this")
        if method.startswith(TEAMMATE_ONLY) and identity.is_lead:
            raise errors.PermissionDenied("only a teammate may call this")
        return identity

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        if method.startswith(OPEN):
            return _parsing_here(handler, caller="")
        ours = method.startswith((LEAD_ONLY, TEAMMATE_ONLY, EITHER))
        try:
            identity = self._authenticate(method, handler_call_details.invocation_metadata)
        except errors.CorralError as error:
            REFUSALS.refused("", error)
            return _refusing(handler, error)
        if not ours:
            return _parsing_here(handler, identity.name)  # server reflection: the credential check is all it needs
        place = _LanePlace(self._lanes, identity, _lane(method, handler))
        send_timeout_s = self._board.limits.stream_send_timeout_ms / 1000
        if handler.stream_stream:
            # Checked again on every message: the hash once, the lookup each time.
            digest = token_hash(_bearer(handler_call_details.invocation_metadata) or "")
            still_valid = lambda: self._board.credentials.identity_of(digest) == identity  # noqa: E731
            return _wrap_session(handler, identity, place, send_timeout_s, still_valid)
        return _wrap(handler, identity, place, send_timeout_s)


def _lane(method: str, handler: grpc.RpcMethodHandler) -> LaneKind:
    # An upload is a stream too: its length says nothing about its cost.
    if handler.unary_stream or handler.stream_stream or handler.stream_unary:
        return "stream"
    return "read" if method in READS else "write"


class _LanePlace:
    """One call's place in its identity's lane (see overload/lanes.py)."""

    __slots__ = ("lanes", "identity", "kind", "is_lead")

    def __init__(self, lanes: CallLanes, identity: Identity, kind: LaneKind) -> None:
        self.lanes, self.identity, self.kind, self.is_lead = lanes, identity.name, kind, identity.is_lead

    def try_enter(self) -> bool:
        return self.lanes.try_enter(self.identity, self.kind, is_lead=self.is_lead)

    async def wait_to_enter(self, time_remaining: float | None) -> None:
        await self.lanes.wait_for_place(self.identity, self.kind, time_remaining)

    def leave(self) -> None:
        self.lanes.leave(self.identity, self.kind)


def _check_strict(request) -> None:
    if isinstance(request, pb_message.Message):
        path = unknown_field_path(request)
        if path:
            raise errors.InvalidArgument(path, "carries a field this server does not know")


def _end_with(context: grpc.aio.ServicerContext, error: BaseException) -> None:
    """Sets the status `error` maps to; the call ends with it once its handler returns,
    which it does next (a unary reply is dropped when the status is not OK).

    Not `context.abort`: the AbortError it raises stays on the call's state with
    a traceback through the handler's frames, which hold the call's context (so
    the call's state again) and its request. Each refused call was then a
    reference cycle, request and all, freed only by a full collection (rare in
    the daemon, see server/DESIGN.md). A status set here raises nothing, and
    the error (with its traceback) is let go when the handler's `except` ends.
    """
    if not isinstance(error, errors.CorralError):
        log.exception("unexpected error", exc_info=error)
    ended = status.to_status(error)
    context.set_code(ended.code)
    context.set_details(ended.details)
    context.set_trailing_metadata(ended.trailing_metadata)


async def _end_slow_stream(context: grpc.aio.ServicerContext, identity: Identity, error: errors.SlowConsumer) -> None:
    log.info("ended a stream of %s: %s", identity.name, error)
    try:
        # Aborted here, not ended by `_end_with`: the status must go out now, behind the
        # write the client has not taken, and the handler learns from the abort whether it did.
        await context.abort_with_status(status.to_status(error))
    except grpc.aio.AbortError:
        raise
    except Exception:  # noqa: BLE001 (gRPC's own batch error: the client left without reading the status)
        log.debug("%s left before it read why its stream ended", identity.name)


class _Undecodable:
    """Stands for request bytes that do not parse, so the answer is INVALID_ARGUMENT."""

    def __init__(self, why: str) -> None:
        self.why = why


def _lenient(deserializer):
    def parse(data: bytes):
        try:
            return deserializer(data)
        except Exception as error:  # noqa: BLE001 (any parse failure is the caller's)
            return _Undecodable(str(error) or type(error).__name__)

    return parse


def _decoded(parse, data: bytes):
    """The request `parse` (a `_lenient` deserializer) makes of `data`; INVALID_ARGUMENT when it is not one."""
    request = parse(data)
    if isinstance(request, _Undecodable):
        raise errors.InvalidArgument("(request)", f"not a valid message: {request.why}")
    return request


async def _waited_for_place(place: _LanePlace, context: grpc.aio.ServicerContext) -> bool:
    """The slow half of entering a lane (after `try_enter` said no): wait in line;
    False when the call was refused instead (its status is set: return at once)."""
    try:
        await place.wait_to_enter(context.time_remaining())
    except Exception as error:
        REFUSALS.refused(place.identity, error)
        _end_with(context, error)
        return False
    return True


class RefusalLog:
    """Logs refused calls at info, at most one line per caller and reason a second.

    A flood is refused thousands of times a second; one line per refusal would
    drown the log (and slow the daemon further), so later refusals within the
    second are counted and the next line says how many there were.
    """

    def __init__(self, interval_s: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._last: dict[tuple[str, str], tuple[float, int]] = {}  # (caller, reason) -> (logged at, unlogged)

    def refused(self, caller: str, error: BaseException) -> None:
        reason = getattr(error, "reason", "") or type(error).__name__
        key, now = (caller, reason), self._clock()
        logged_at, unlogged = self._last.get(key, (float("-inf"), 0))
        if now - logged_at < self._interval_s:
            self._last[key] = (logged_at, unlogged + 1)
            return
        if len(self._last) > 4096:  # callers come and go: keep the table bounded
            self._last.clear()
        self._last[key] = (now, 0)
        more = f" (and {unlogged} more since the last line)" if unlogged else ""
        activity_log.info(
            "refused a call from %s: %s%s",
            caller or "an unauthenticated caller",
            error,
            more,
            extra={"activity": {"event": "refused", "caller": caller, "reason": reason, "more": unlogged}},
        )


REFUSALS = RefusalLog()
# What big requests leave in the heap goes back to the system once they are answered.
HEAP = HeapTrim()


def _wrap(
    handler: grpc.RpcMethodHandler, identity: Identity, place: _LanePlace, send_timeout_s: float
) -> grpc.RpcMethodHandler:
    """Our methods get the caller's identity and wait for their lane; the request
    bytes are parsed only once the call's turn comes (a waiting call costs no CPU).
    A stream's messages go out one at a time, each within `send_timeout_s`."""
    parse = _lenient(handler.request_deserializer)

    def checked(data: bytes):
        request = _decoded(parse, data)
        _check_strict(request)
        return request

    async def request_of(data: bytes):
        # Each call runs in its own task, so this marks only this call's writer jobs.
        job_owner.set(identity.name)
        # A request of megabytes takes milliseconds to parse: off the loop.
        return await cpu.run(lambda: checked(data), inline=len(data) <= cpu.INLINE_BYTES)

    if handler.unary_unary:
        behavior = handler.unary_unary

        async def unary_unary(data, context):
            if not place.try_enter() and not await _waited_for_place(place, context):
                HEAP.after_request(len(data))
                return None
            try:
                return await behavior(await request_of(data), context, identity)
            except Exception as error:
                if isinstance(error, grpc.aio.AbortError):
                    raise
                _end_with(context, error)
                return None
            finally:
                place.leave()
                HEAP.after_request(len(data))

        return grpc.unary_unary_rpc_method_handler(unary_unary, None, handler.response_serializer)
    if handler.unary_stream:
        behavior = handler.unary_stream

        async def unary_stream(data, context):
            async def responses():
                return behavior(await request_of(data), context, identity)

            await _serve_stream(place, context, identity, send_timeout_s, responses)

        return grpc.unary_stream_rpc_method_handler(unary_stream, None, handler.response_serializer)
    if handler.stream_unary:  # an upload (PutArtifact)
        behavior = handler.stream_unary

        async def each_request(request_iterator):
            # Each message is parsed as the method asks for it, so one is held at a time.
            async for data in request_iterator:
                size = len(data)
                request = await cpu.run(lambda data=data: checked(data), inline=size <= cpu.INLINE_BYTES)
                del data
                yield request
                HEAP.after_request(size)  # the method asked for the next: this one is done with

        async def stream_unary(request_iterator, context):
            job_owner.set(identity.name)  # each call runs in its own task: this marks only its jobs
            if not place.try_enter() and not await _waited_for_place(place, context):
                return None
            try:
                return await behavior(each_request(request_iterator), context, identity)
            except Exception as error:
                if isinstance(error, grpc.aio.AbortError):
                    raise
                _end_with(context, error)
                return None
            finally:
                place.leave()

        return grpc.stream_unary_rpc_method_handler(stream_unary, None, handler.response_serializer)
    raise TypeError(f"{handler!r} is bidirectional: a Session is wrapped by _wrap_session")


def _wrap_session(
    handler: grpc.RpcMethodHandler,
    identity: Identity,
    place: _LanePlace,
    send_timeout_s: float,
    still_valid: Callable[[], bool],
) -> grpc.RpcMethodHandler:
    """A bidirectional stream of ours: each message is parsed as it is read and handed
    on with what is wrong with it (the Session answers that in an op result and goes
    on); the credential is checked again on every message."""
    parse = _lenient(handler.request_deserializer)
    behavior = handler.stream_stream

    async def parsed(request_iterator):
        async for data in request_iterator:
            if not still_valid():
                raise errors.Unauthenticated("missing, invalid or revoked credential")
            if len(data) <= cpu.INLINE_BYTES:
                request = parse(data)
            else:
                request = await cpu.run(lambda data=data: parse(data), inline=False)
            size = len(data)
            del data  # the parsed request is all that is kept of it from here
            if isinstance(request, _Undecodable):
                yield None, errors.InvalidArgument("(request)", f"not a valid message: {request.why}")
            else:
                try:
                    _check_strict(request)
                except errors.InvalidArgument as error:
                    yield request, error
                else:
                    yield request, None
            HEAP.after_request(size)  # its op is answered: the Session reads the next one only then

    async def stream_stream(request_iterator, context):
        job_owner.set(identity.name)  # each call runs in its own task: this marks only its jobs

        async def responses():
            return behavior(parsed(request_iterator), context, identity)

        await _serve_stream(place, context, identity, send_timeout_s, responses)

    return grpc.stream_stream_rpc_method_handler(stream_stream, None, handler.response_serializer)


async def _serve_stream(
    place: _LanePlace,
    context: grpc.aio.ServicerContext,
    identity: Identity,
    send_timeout_s: float,
    responses_of: Callable[[], Any],
) -> None:
    """Runs a server stream in its lane: `responses_of()` is awaited inside the lane and
    its responses are sent one at a time, each within `send_timeout_s`.

    The headers go first, on their own: the Session's asyncio client writes only
    after them (a write racing the call's end would lose its status; see
    corral._primitives.async_may_write), and a stream whose first message is
    never taken can still be ended (until a write completes, grpc.aio sends the
    headers again with the status, which gRPC core refuses while the write
    carrying them is pending).
    """
    await context.send_initial_metadata(())
    if not place.try_enter() and not await _waited_for_place(place, context):
        return
    in_lane = True
    try:
        sender = StreamSender(context, send_timeout_s)
        async with contextlib.aclosing(await responses_of()) as responses:
            async for response in responses:
                await sender.send(response)
    except errors.SlowConsumer as error:
        # The handler is done; only the status is left to send, and it
        # waits behind the message the client has not taken.
        place.leave()
        in_lane = False
        await _end_slow_stream(context, identity, error)
    except Exception as error:
        if isinstance(error, grpc.aio.AbortError):
            raise
        _end_with(context, error)
    finally:
        if in_lane:
            place.leave()


def _parsing_here(handler: grpc.RpcMethodHandler, caller: str) -> grpc.RpcMethodHandler:
    """A handler of a service not ours (health, reflection) whose request bytes are parsed
    here, so that bytes that do not parse answer INVALID_ARGUMENT with one log line, where
    gRPC would answer UNKNOWN and log a traceback."""
    parse = _lenient(handler.request_deserializer)

    def parsed(data, context):
        """The request, or None when it does not parse (the call's status is set: end it)."""
        HEAP.after_request(len(data))
        try:
            return _decoded(parse, data)
        except errors.InvalidArgument as error:
            REFUSALS.refused(caller, error)
            _end_with(context, error)
            return None

    async def each_parsed(request_iterator, context):
        # Bytes that do not parse end the requests: the behavior then ends, and the call with our status.
        async for data in request_iterator:
            request = parsed(data, context)
            if request is None:
                return
            yield request

    async def respond(responses, context) -> None:
        # A streaming behavior either yields its responses or writes them itself.
        if inspect.isasyncgen(responses):
            async for response in responses:
                await context.write(response)
        else:
            await responses

    async def unary_unary(data, context):
        request = parsed(data, context)
        return None if request is None else await handler.unary_unary(request, context)

    async def unary_stream(data, context):
        request = parsed(data, context)
        if request is not None:
            await respond(handler.unary_stream(request, context), context)

    async def stream_unary(request_iterator, context):
        return await handler.stream_unary(each_parsed(request_iterator, context), context)

    async def stream_stream(request_iterator, context):
        await respond(handler.stream_stream(each_parsed(request_iterator, context), context), context)

    behaviors = {
        "unary_unary": unary_unary,
        "unary_stream": unary_stream,
        "stream_unary": stream_unary,
        "stream_stream": stream_stream,
    }
    return _same_shape(handler, behaviors, None)


def _refusing(handler: grpc.RpcMethodHandler, error: BaseException) -> grpc.RpcMethodHandler:
    """A handler that ends the call with `error`, its request never parsed."""

    async def refuse(request_or_iterator, context):
        _end_with(context, error)
        if isinstance(request_or_iterator, bytes):
            HEAP.after_request(len(request_or_iterator))

    async def refuse_stream(request_or_iterator, context):
        _end_with(context, error)
        if isinstance(request_or_iterator, bytes):
            HEAP.after_request(len(request_or_iterator))
        return
        yield  # pragma: no cover  (makes this an async generator)

    behaviors = {
        "unary_unary": refuse,
        "unary_stream": refuse_stream,
        "stream_unary": refuse,
        "stream_stream": refuse_stream,
    }
    return _same_shape(handler, behaviors, None)


_FACTORIES = (
    ("unary_unary", grpc.unary_unary_rpc_method_handler),
    ("unary_stream", grpc.unary_stream_rpc_method_handler),
    ("stream_unary", grpc.stream_unary_rpc_method_handler),
    ("stream_stream", grpc.stream_stream_rpc_method_handler),
)


def _same_shape(handler: grpc.RpcMethodHandler, behaviors: dict, deserializer) -> grpc.RpcMethodHandler:
    """A handler of the same call shape as `handler` (one of the four) that runs `behaviors[shape]`."""
    for shape, factory in _FACTORIES:
        if getattr(handler, shape):
            return factory(behaviors[shape], deserializer, handler.response_serializer)
    return handler
