"""Choosing the teammate transport: CORRAL_TRANSPORT's values, and the fallback
to Idle and unary calls on a daemon older than the Session RPC.

The older daemon is a small gRPC server that offers Idle, CompleteTask and
AckMessages only, as a corrald before Session did: the Session call is
answered UNIMPLEMENTED by gRPC itself. An interceptor records which methods
the client called, the unknown one included.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

import corral
import corral.aio
from corral._errors import error_from_rpc
from corral._retry import is_transient
from corral._transport import TRANSPORT_ENV, Transport, transport_from_env
from corral.v1 import corral_pb2 as pb

pytestmark = pytest.mark.timeout(30)

SERVICE = "corral.v1.TeammateService"
SESSION, IDLE, COMPLETE = (f"/{SERVICE}/{name}" for name in ("Session", "Idle", "CompleteTask"))


class _Recorder(grpc.ServerInterceptor):
    def __init__(self, calls: list[str]) -> None:
        self._calls = calls

    def intercept_service(self, continuation: Any, handler_call_details: grpc.HandlerCallDetails) -> Any:
        # connect's check that the daemon answers at all (UNIMPLEMENTED here) is no transport's call.
        if handler_call_details.method != "/grpc.health.v1.Health/Check":
            self._calls.append(handler_call_details.method)
        return continuation(handler_call_details)


class OlderDaemon:
    """Idle hands out one claim, then idle_timeout; CompleteTask completes it."""

    def __init__(self, socket: Path) -> None:
        self.address = f"unix:{socket}"
        self.calls: list[str] = []
        self._server = grpc.server(
            concurrent.futures.ThreadPoolExecutor(max_workers=4), interceptors=[_Recorder(self.calls)]
        )
        handlers = {
            "Idle": grpc.unary_stream_rpc_method_handler(
                self._idle, pb.IdleRequest.FromString, pb.IdleResponse.SerializeToString
            ),
            "CompleteTask": grpc.unary_unary_rpc_method_handler(
                self._complete, pb.CompleteTaskRequest.FromString, pb.CompleteTaskResponse.SerializeToString
            ),
        }
        self._server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, handlers)])
        self._server.add_insecure_port(self.address)
        self._completed: set[str] = set()

    def _idle(self, request: pb.IdleRequest, context: grpc.ServicerContext) -> Iterator[pb.IdleResponse]:
        if "t1" not in self._completed:
            task = pb.Task(id="t1", state=pb.TASK_STATE_IN_PROGRESS, attempt=1)
            yield pb.IdleResponse(claim=pb.Claim(task=task, claim_token="tok-1", attempt=1, fence=1))
        yield pb.IdleResponse(idle_timeout=pb.IdleTimeout(idle_polls=1))

    def _complete(self, request: pb.CompleteTaskRequest, context: grpc.ServicerContext) -> pb.CompleteTaskResponse:
        self._completed.add(request.task_id)
        task = pb.Task(id=request.task_id, state=pb.TASK_STATE_COMPLETED, attempt=1, result=request.result)
        return pb.CompleteTaskResponse(task=task)

    def __enter__(self) -> OlderDaemon:
        self._server.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.stop(grace=None)


@pytest.fixture
def older(tmp_path: Path) -> Iterator[OlderDaemon]:
    with OlderDaemon(tmp_path / "older.sock") as daemon:
        yield daemon


@pytest.fixture
def transport(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """CORRAL_TRANSPORT as the test's `transport` parameter says ("" = unset)."""
    if request.param:
        monkeypatch.setenv(TRANSPORT_ENV, request.param)
    else:
        monkeypatch.delenv(TRANSPORT_ENV, raising=False)


# ---------------------------------------------------------------- the variable


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, Transport.AUTO), ("", Transport.AUTO), ("session", Transport.SESSION), ("idle", Transport.IDLE)],
)
def test_transport_values(value: str | None, expected: Transport) -> None:
    assert transport_from_env({} if value is None else {TRANSPORT_ENV: value}) is expected


@pytest.mark.parametrize("value", ["sesion", "Session", "auto", " idle", "grpc"])
def test_any_other_value_is_refused_with_the_choices(value: str) -> None:
    with pytest.raises(corral.CorralError) as raised:
        transport_from_env({TRANSPORT_ENV: value})
    message = str(raised.value)
    assert TRANSPORT_ENV in message and repr(value) in message and "'session'" in message and "'idle'" in message


def test_a_bad_value_stops_a_teammate_before_it_connects(monkeypatch: pytest.MonkeyPatch, older: OlderDaemon) -> None:
    monkeypatch.setenv(TRANSPORT_ENV, "udp")
    with pytest.raises(corral.CorralError, match=TRANSPORT_ENV):
        corral.Teammate.connect(older.address, "token")
    with pytest.raises(corral.CorralError, match=TRANSPORT_ENV):
        corral.run_teammate(lambda task: b"", address=older.address, token="token")
    with pytest.raises(corral.CorralError, match=TRANSPORT_ENV):
        asyncio.run(corral.aio.Teammate.connect(older.address, "token"))
    assert older.calls == []


# ---------------------------------------------------------------- an older daemon


@pytest.mark.parametrize("transport", [""], indirect=True)
@pytest.mark.usefixtures("transport")
def test_unset_falls_back_to_idle_and_unary_calls_once(older: OlderDaemon) -> None:
    with corral.Teammate.connect(older.address, "token") as teammate:
        events = teammate.idle()
        claim = next(events)
        assert isinstance(claim, corral.Claim) and (claim.task.id, claim.token) == ("t1", "tok-1")
        assert claim.complete(b"done").result == b"done"
        assert [type(event) for event in events] == [corral.IdleTimeout]
        assert [type(event) for event in teammate.idle()] == [corral.IdleTimeout]
    # One Session attempt per client; after UNIMPLEMENTED, Idle and unary calls only.
    assert older.calls == [SESSION, IDLE, COMPLETE, IDLE]


@pytest.mark.parametrize("transport", [""], indirect=True)
@pytest.mark.usefixtures("transport")
def test_unset_falls_back_on_asyncio_too(older: OlderDaemon) -> None:
    async def scenario() -> list[type]:
        async with await corral.aio.Teammate.connect(older.address, "token") as teammate:
            kinds = []
            async for event in teammate.idle():
                kinds.append(type(event))
                if isinstance(event, corral.aio.Claim):
                    await event.complete(b"done")
            return kinds

    assert asyncio.run(scenario()) == [corral.aio.Claim, corral.IdleTimeout]
    assert older.calls == [SESSION, IDLE, COMPLETE]


@pytest.mark.parametrize("transport", ["session"], indirect=True)
@pytest.mark.usefixtures("transport")
def test_asyncio_sees_unimplemented_every_time(older: OlderDaemon) -> None:
    """A grpc.aio write that races the call's end turns the status into INTERNAL
    (grpc/grpc#36066); unguarded, about half of these attempts read INTERNAL."""
    attempts = 40

    async def codes() -> list[grpc.StatusCode | None]:
        seen = []
        for _ in range(attempts):
            async with await corral.aio.Teammate.connect(older.address, "token") as teammate:
                with pytest.raises(corral.CorralError) as raised:
                    await anext(aiter(teammate.idle()))
                seen.append(raised.value.code)
        return seen

    assert asyncio.run(codes()) == [grpc.StatusCode.UNIMPLEMENTED] * attempts
    assert older.calls == [SESSION] * attempts


@pytest.mark.parametrize("transport", ["session"], indirect=True)
@pytest.mark.usefixtures("transport")
def test_session_only_is_an_error_on_an_older_daemon(older: OlderDaemon) -> None:
    with corral.Teammate.connect(older.address, "token") as teammate:
        with pytest.raises(corral.CorralError) as raised:
            next(teammate.idle())
    assert raised.value.code is grpc.StatusCode.UNIMPLEMENTED
    assert f"{TRANSPORT_ENV}=session" in str(raised.value)
    with pytest.raises(corral.CorralError) as raised:
        corral.run_teammate(lambda task: b"", address=older.address, token="token")
    assert raised.value.code is grpc.StatusCode.UNIMPLEMENTED
    assert older.calls == [SESSION, SESSION], "no Idle stream behind the caller's back"


@pytest.mark.parametrize("transport", ["idle"], indirect=True)
@pytest.mark.usefixtures("transport")
def test_idle_never_tries_the_session(older: OlderDaemon) -> None:
    summary = corral.run_teammate(lambda task: f"did {task.id}", address=older.address, token="token")
    assert summary.exit_reason is corral.ExitReason.IDLE_TIMEOUT and summary.completed == 1
    assert older.calls == [IDLE, COMPLETE]


async def _one_open() -> AsyncIterator[pb.SessionRequest]:
    yield pb.SessionRequest(open=pb.IdleRequest())


def test_a_status_lost_to_a_write_race_reads_as_unavailable(older: OlderDaemon) -> None:
    """Without the SDK's wait for headers, a raw grpc.aio write races the
    daemon's UNIMPLEMENTED; the INTERNAL it then reports is a lost status, which
    the SDK reads as a transient end (reconnect and learn the real one)."""

    async def a_lost_status() -> grpc.RpcError | None:
        async with grpc.aio.insecure_channel(older.address) as channel:
            session = channel.stream_stream(SESSION, pb.SessionRequest.SerializeToString, pb.SessionResponse.FromString)
            for _ in range(200):
                call = session(_one_open())
                try:
                    await call.read()
                except grpc.RpcError as error:
                    if error.code() is grpc.StatusCode.INTERNAL:
                        return error
                    assert error.code() is grpc.StatusCode.UNIMPLEMENTED
        return None

    error = asyncio.run(a_lost_status())
    assert error is not None, "no write lost the race in 200 attempts: the guard has nothing to guard against"
    translated = error_from_rpc(error)
    assert isinstance(translated, corral.Unavailable) and is_transient(translated)
    assert "status was lost" in str(translated)


class HeldHeadersDaemon:
    """A Session whose headers come only with its first message, as from a proxy
    that holds them back: it answers `open` with idle_timeout."""

    def __init__(self, socket: Path) -> None:
        self.address = f"unix:{socket}"
        self._server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
        handlers = {
            "Session": grpc.stream_stream_rpc_method_handler(
                self._session, pb.SessionRequest.FromString, pb.SessionResponse.SerializeToString
            )
        }
        self._server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, handlers)])
        self._server.add_insecure_port(self.address)

    def __enter__(self) -> HeldHeadersDaemon:
        self._server.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.stop(grace=None)

    def _session(
        self, requests: Iterator[pb.SessionRequest], context: grpc.ServicerContext
    ) -> Iterator[pb.SessionResponse]:
        first = next(requests)
        assert first.HasField("open")
        yield pb.SessionResponse(idle_timeout=pb.IdleTimeout(idle_polls=1))


@pytest.mark.parametrize("transport", ["session"], indirect=True)
@pytest.mark.usefixtures("transport")
def test_headers_held_back_delay_the_open_but_do_not_stop_it(tmp_path: Path) -> None:
    async def kinds(address: str) -> list[type]:
        async with await corral.aio.Teammate.connect(address, "token") as teammate:
            return [type(event) async for event in teammate.idle()]

    with HeldHeadersDaemon(tmp_path / "held.sock") as daemon:
        assert asyncio.run(kinds(daemon.address)) == [corral.IdleTimeout]
