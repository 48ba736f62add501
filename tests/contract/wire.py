"""Helpers for the wire-level contract tests of corrald (fixtures live in conftest.py).

These tests speak to a real `corrald serve` process through the stubs
generated from proto/ only (never through the Python SDK), the way a client
written in any other language would.

- `start_corrald` starts `corrald serve` (tests.support's `Daemon`, through the
  SDK's launcher) and returns a `Daemon` holding the lead's `Client` and board
  helpers once its ready line is read.
- `Client` is one identity: the three generated stubs, sending its token.
- `Stream` pumps a server stream into a queue so every read has a deadline.
- `assert_status` checks a code, its ErrorInfo reason and BadRequest fields.

Nothing here sleeps to wait for something: the launcher reads the ready line
with a deadline, stream items are read from a queue with a deadline, and
`tests.support.wait_until` polls with a deadline.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import pathlib
import queue
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import grpc
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from prometheus_client.parser import text_string_to_metric_families

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc
from tests import support
from tests.support import wait_until

UNARY_TIMEOUT_S = 10.0
STREAM_TIMEOUT_S = 60.0


# ---------------------------------------------------------------- small builders


def duration(seconds: float) -> duration_pb2.Duration:
    nanos = round(seconds * 1_000_000_000)
    return duration_pb2.Duration(seconds=nanos // 1_000_000_000, nanos=nanos % 1_000_000_000)


def ts_seconds(timestamp) -> float:
    return timestamp.seconds + timestamp.nanos / 1e9


def spec(
    task_id: str, *deps: str, lease: float | None = None, retry_backoff: float | None = 0.0, **fields: Any
) -> pb.TaskSpec:
    """A TaskSpec; `lease` and `retry_backoff` in seconds, other fields passed through.

    A retry here follows at once (`retry_backoff` 0, sent: unset would be the
    daemon's 1 s), so the tests of claims and leases need not wait for it;
    None leaves it unset.
    """
    fields.setdefault("title", f"task {task_id}")
    message = pb.TaskSpec(id=task_id, depends_on=list(deps), **fields)
    if lease is not None:
        message.lease_duration.CopyFrom(duration(lease))
    if retry_backoff is not None:
        message.retry_backoff.CopyFrom(duration(retry_backoff))
    return message


def bearer(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


# ---------------------------------------------------------------- rich errors


def status_details(error: grpc.RpcError) -> dict[str, Any]:
    """ErrorInfo / BadRequest / RetryInfo from the google.rpc.Status of a failed call."""
    status = rpc_status.from_call(error)
    return {} if status is None else _unpacked(status.details)


def _unpacked(details) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for detail in details:
        for kind, name in (
            (error_details_pb2.ErrorInfo, "error_info"),
            (error_details_pb2.BadRequest, "bad_request"),
            (error_details_pb2.RetryInfo, "retry_info"),
        ):
            if detail.Is(kind.DESCRIPTOR):
                value = kind()
                detail.Unpack(value)
                found[name] = value
    return found


def assert_status(
    error: grpc.RpcError, code: grpc.StatusCode, *, reason: str | None = None, field: str | None = None
) -> dict[str, Any]:
    """Checks the code and, when given, the ErrorInfo reason and a BadRequest field violation."""
    assert error.code() == code, f"expected {code.name}, got {error.code().name}: {error.details()}"
    found = status_details(error)
    _assert_details(found, code, error.details(), reason, field)
    return found


def assert_op_status(status, code: grpc.StatusCode, *, reason: str | None = None, field: str | None = None) -> None:
    """`assert_status` for a Session op's result (its google.rpc.Status)."""
    assert status.code == code.value[0], f"expected {code.name}, got {status}"
    _assert_details(_unpacked(status.details), code, status.message, reason, field)


def _assert_details(found: dict[str, Any], code: grpc.StatusCode, text, reason: str | None, field: str | None) -> None:
    if reason is not None:
        info = found.get("error_info")
        assert info is not None, f"no google.rpc.ErrorInfo on {code.name}: {text}"
        assert info.domain == "corral", info
        assert info.reason == reason, f"expected reason {reason}, got {info.reason}: {text}"
    if field is not None:
        bad = found.get("bad_request")
        assert bad is not None, f"no google.rpc.BadRequest on INVALID_ARGUMENT: {text}"
        fields = [v.field for v in bad.field_violations]
        assert field in fields, f"expected a field violation on {field!r}, got {fields}: {text}"


def rpc_error(function: Callable, *args, **kwargs) -> grpc.RpcError:
    """Calls `function`, which must fail with a grpc.RpcError; returns it."""
    try:
        result = function(*args, **kwargs)
    except grpc.RpcError as error:
        return error
    raise AssertionError(f"expected the call to fail, it returned {result!r}")


# ---------------------------------------------------------------- channels with a credential


class _CallDetails(
    collections.namedtuple(
        "_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,
):
    pass


class _Credential(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds `authorization` metadata (unless the call brings its own) and a default deadline."""

    def __init__(self, metadata: list[tuple[str, str]]) -> None:
        self._metadata = metadata

    def _details(self, details, default_timeout: float) -> _CallDetails:
        metadata = list(details.metadata or ())
        if not any(key == "authorization" for key, _ in metadata):
            metadata.extend(self._metadata)
        timeout = details.timeout if details.timeout is not None else default_timeout
        return _CallDetails(
            details.method, timeout, metadata, details.credentials, details.wait_for_ready, details.compression
        )

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details, UNARY_TIMEOUT_S), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details, STREAM_TIMEOUT_S), request)

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details, STREAM_TIMEOUT_S), request_iterator)

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details, STREAM_TIMEOUT_S), request_iterator)


class Client:
    """One identity's view: the three generated stubs, sending its bearer token."""

    def __init__(self, channel: grpc.Channel, token: str, name: str) -> None:
        self.token = token
        self.name = name
        self.metadata = bearer(token)
        self.channel = grpc.intercept_channel(channel, _Credential(self.metadata))
        self.lead = corral_pb2_grpc.LeadServiceStub(self.channel)
        self.teammate = corral_pb2_grpc.TeammateServiceStub(self.channel)
        self.board = corral_pb2_grpc.BoardServiceStub(self.channel)

    # Teammate conveniences (raw stubs stay available for every other call).

    def idle(
        self,
        *,
        max_idle_polls: int = 0,
        poll_interval: float | None = None,
        slots: int = 0,
        timeout: float = STREAM_TIMEOUT_S,
    ) -> Stream:
        request = pb.IdleRequest(max_idle_polls=max_idle_polls, slots=slots)
        if poll_interval is not None:
            request.poll_interval.CopyFrom(duration(poll_interval))
        return Stream(self.teammate.Idle(request, timeout=timeout), f"Idle({self.name})")

    def session(
        self,
        *,
        max_idle_polls: int = 0,
        poll_interval: float | None = None,
        slots: int = 0,
        timeout: float = STREAM_TIMEOUT_S,
        first: pb.SessionRequest | None = None,
    ) -> SessionStream:
        """A Session stream opened with `open` (or with `first` instead, to test what is refused)."""
        if first is None:
            first = pb.SessionRequest(open=pb.IdleRequest(max_idle_polls=max_idle_polls, slots=slots))
            if poll_interval is not None:
                first.open.poll_interval.CopyFrom(duration(poll_interval))
        return SessionStream(self.teammate, first, timeout, f"Session({self.name})")

    def ack(self, through_seq: int) -> int:
        return self.teammate.AckMessages(pb.AckMessagesRequest(through_seq=through_seq)).acked_through_seq

    def complete(self, claim: pb.Claim, result: bytes = b"done") -> pb.Task:
        return self.teammate.CompleteTask(
            pb.CompleteTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token, result=result)
        ).task

    def renew(self, claim: pb.Claim) -> pb.RenewLeaseResponse:
        return self.teammate.RenewLease(pb.RenewLeaseRequest(task_id=claim.task.id, claim_token=claim.claim_token))


# ---------------------------------------------------------------- streams read with a deadline


_END = object()


def short(item: Any, limit: int = 600) -> str:
    """A message for an assertion text, cut so a 1 MiB payload cannot flood the report."""
    text = str(item).replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


class Stream:
    """A server stream pumped by a thread into a queue, so every read has a deadline."""

    def __init__(self, call, label: str) -> None:
        self.call = call
        self.label = label
        self.received: list[Any] = []
        self.end_status: tuple[grpc.StatusCode, str] | None = None
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._pump, name=f"pump {label}", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            for item in self.call:
                self._queue.put(item)
            self._queue.put((_END, grpc.StatusCode.OK, ""))
        except grpc.RpcError as error:
            self._queue.put((_END, error.code(), error.details()))
        except Exception as error:  # noqa: BLE001 (surface anything to the reader)
            self._queue.put((_END, None, repr(error)))

    def _get(self, timeout: float):
        if self.end_status is not None:
            return None
        item = self._queue.get(timeout=timeout)
        if isinstance(item, tuple) and item and item[0] is _END:
            self.end_status = (item[1], item[2])
            return None
        self.received.append(item)
        return item

    def next(self, timeout: float = 5.0):
        """The next response; fails if none arrives in time or the stream ended."""
        try:
            item = self._get(timeout)
        except queue.Empty:
            raise AssertionError(f"{self.label}: nothing arrived within {timeout}s") from None
        if item is None:
            raise AssertionError(f"{self.label}: stream ended with {self.end_status} instead of sending")
        return item

    def try_next(self, timeout: float = 0.0):
        """The next response, or None if nothing arrived in time; fails if the stream ended."""
        try:
            item = self._get(timeout)
        except queue.Empty:
            return None
        if item is None:
            raise AssertionError(f"{self.label}: stream ended with {self.end_status}")
        return item

    def next_event(self, kind: str, timeout: float = 5.0):
        """The next response, which must be of oneof `kind`; returns that field."""
        item = self.next(timeout)
        which = item.WhichOneof("event")
        assert which == kind, f"{self.label}: expected {kind}, got {which}: {short(item)}"
        return getattr(item, kind)

    def next_matching(self, predicate: Callable[[Any], bool], timeout: float = 5.0, what: str = "item"):
        """Skips responses until one satisfies `predicate` (all stay in `received`)."""
        deadline = time.monotonic() + timeout
        while True:
            item = self.next(max(0.0, deadline - time.monotonic()))
            if predicate(item):
                return item
            if time.monotonic() >= deadline:
                raise AssertionError(f"{self.label}: no {what} within {timeout}s")

    def expect_quiet(
        self, seconds: float, *, then: Callable[[], Any], arrives: str | None = None, within: float = 5.0
    ) -> Any:
        """Nothing arrives (and the stream does not end) for `seconds`, then the marker `then`
        closes the window: silence alone cannot tell "never" from "just after the window".

        - With `arrives`, `then` is an action after which an item of oneof kind `arrives` must
          be this stream's next (within `within` s); that field is returned. Anything sent in
          the window's stead arrives before it and fails here.
        - Without, `then` is a read, whose result is returned: of the board (which must show
          the state the window protected; nothing may have arrived on this stream by the time
          it returns), or of this stream's next item (which must then be the only one it read).
        """
        try:
            item = self._get(seconds)
        except queue.Empty:
            pass
        else:
            if item is None:
                raise AssertionError(f"{self.label}: stream ended with {self.end_status} during a quiet period")
            raise AssertionError(f"{self.label}: expected nothing for {seconds}s, got {short(item)}")
        window_end = len(self.received)
        result = then()
        read = self.received[window_end:]
        if arrives is not None:
            assert not read, f"{self.label}: the marker's action read the stream: {[short(i) for i in read]}"
            return self.next_event(arrives, within)
        assert len(read) <= 1, f"{self.label}: items before the marker: {[short(i) for i in read[:-1]]}"
        if not read:
            late = self.try_next(0)
            assert late is None, f"{self.label}: {short(late)} arrived after the quiet window, before its marker"
        return result

    def wait_end(self, timeout: float = 5.0) -> tuple[grpc.StatusCode, str]:
        """Reads to the end of the stream; returns (code, details). Items read go to `received`."""
        deadline = time.monotonic() + timeout
        while self.end_status is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{self.label}: did not end within {timeout}s")
            try:
                self._get(remaining)
            except queue.Empty:
                raise AssertionError(f"{self.label}: did not end within {timeout}s") from None
        return self.end_status

    def cancel(self) -> None:
        self.call.cancel()
        with contextlib.suppress(AssertionError):
            self.wait_end(5.0)


class SessionStream(Stream):
    """A Session: requests go in through `send` (a queue feeding the call), responses come
    out as from any `Stream`. `op(...)` sends one op and returns its response."""

    def __init__(self, stub, first: pb.SessionRequest, timeout: float, label: str) -> None:
        self._requests: queue.Queue = queue.Queue()
        self._requests.put(first)
        self._op_ids = itertools.count(1)
        super().__init__(stub.Session(iter(self._requests.get, _END), timeout=timeout), label)

    def send(self, request: pb.SessionRequest) -> None:
        self._requests.put(request)

    def close_requests(self) -> None:
        """Half-closes: the daemon sees the end of the request stream."""
        self._requests.put(_END)

    def op(self, op_id: str | None = None, timeout: float = 5.0, **op: Any) -> pb.SessionResponse:
        """Sends `SessionRequest(op_id, **op)` and returns the response carrying its result
        (events before it stay in `received`, and in `events_before`)."""
        op_id = op_id if op_id is not None else f"op-{next(self._op_ids)}"
        self.send(pb.SessionRequest(op_id=op_id, **op))
        self.events_before: list[pb.SessionResponse] = []
        while True:
            response = self.next(timeout)
            if response.HasField("op_result"):
                assert response.op_result.op_id == op_id, f"{self.label}: result for {response.op_result.op_id!r}"
                return response
            self.events_before.append(response)

    def complete(self, claim: pb.Claim, result: bytes = b"done", op_id: str | None = None) -> pb.SessionResponse:
        request = pb.CompleteTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token, result=result)
        return self.op(op_id, complete=request)

    def cancel(self) -> None:
        self.close_requests()
        super().cancel()


# ---------------------------------------------------------------- the daemon process

# A daemon restarted on the same socket gets subchannels of its own: gRPC
# otherwise shares them process-wide per address, and a channel to the new
# daemon would inherit the old one's failed connection and its reconnect
# backoff, and fail its first call with the old "No such file" error.
_CHANNEL_OPTIONS = (("grpc.use_local_subchannel_pool", 1),)


class Daemon(support.Daemon):
    """One `corrald serve` (started by tests.support, through the SDK's launcher) and helpers to talk to it."""

    def __init__(self, state_dir: pathlib.Path, **options: Any) -> None:
        super().__init__(state_dir, **options)
        self.lead_token = ""
        self._names = itertools.count(1)

    def start(self, failpoints: str | None = None, timeout: float = support.READY_TIMEOUT_S) -> Daemon:
        super().start(failpoints, timeout)
        self.lead_token = self.read_lead_token()
        self.channel = grpc.insecure_channel(self.address, options=_CHANNEL_OPTIONS)
        self.lead = Client(self.channel, self.lead_token, "lead")
        return self

    # ------------------------------------------------------------ identities

    def client(self, token: str, name: str = "?") -> Client:
        return Client(self.channel, token, name)

    def add_teammate(
        self, name: str | None = None, *, roles: Iterable[str] = (), require_plan_approval: bool = False
    ) -> Client:
        """Mints a teammate credential; returns that teammate's Client (`.token`, `.name`)."""
        name = name or f"mate{next(self._names)}"
        response = self.lead.lead.AddTeammate(
            pb.AddTeammateRequest(name=name, roles=list(roles), require_plan_approval=require_plan_approval)
        )
        assert response.token, "AddTeammate returned no token"
        return self.client(response.token, name)

    # ------------------------------------------------------------ board

    def create_tasks(self, *specs: pb.TaskSpec, request_id: str = "") -> list[pb.Task]:
        return list(self.lead.lead.CreateTasks(pb.CreateTasksRequest(tasks=list(specs), request_id=request_id)).tasks)

    def get_task(self, task_id: str) -> pb.Task:
        return self.lead.board.GetTask(pb.GetTaskRequest(id=task_id)).task

    def all_tasks(self) -> list[pb.Task]:
        tasks: list[pb.Task] = []
        token = ""
        while True:
            page = self.lead.board.ListTasks(pb.ListTasksRequest(page_size=1000, page_token=token))
            tasks.extend(page.tasks)
            token = page.next_page_token
            if not token:
                return tasks

    def stats(self) -> pb.GetStatsResponse:
        return self.lead.board.GetStats(pb.GetStatsRequest())

    def metrics(self) -> dict[str, float]:
        """Each sample of the metrics endpoint (started with `--metrics HOST:0`), by name."""
        with urllib.request.urlopen(f"http://{self.ready['metrics']}/metrics", timeout=10) as response:
            text = response.read().decode("utf-8")
        return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}

    def teammate(self, name: str) -> pb.Teammate:
        for mate in self.lead.board.ListTeammates(pb.ListTeammatesRequest()).teammates:
            if mate.name == name:
                return mate
        raise AssertionError(f"no teammate {name!r} on the board")

    def watch(self, after_seq: int = 0, timeout: float = STREAM_TIMEOUT_S) -> Stream:
        return Stream(self.lead.lead.Watch(pb.WatchRequest(after_seq=after_seq), timeout=timeout), "Watch")

    def wait_open_streams(self, count: int, timeout: float = 5.0) -> None:
        wait_until(lambda: self.stats().open_streams == count, timeout, f"{count} open Idle streams")

    # ------------------------------------------------------------ life

    def close_channel(self) -> None:
        self.channel.close()

    def stop_and_check(self) -> None:
        """Teardown: SIGTERM must exit 0 within 5 s."""
        if self._process is not None:
            self.close_channel()
        super().stop_and_check()


def start_corrald(
    state_dir: pathlib.Path,
    log_dir: pathlib.Path | None = None,
    *,
    extra_args: Iterable[str] = (),
    failpoints: str | None = None,
) -> Daemon:
    """Starts `corrald serve --state-dir state_dir`; returns once its ready line is read."""
    return Daemon(state_dir, log_dir=log_dir or state_dir.parent, extra_args=list(extra_args)).start(failpoints)


@contextlib.contextmanager
def module_daemon(tmp_path_factory, label: str) -> Iterator[Daemon]:
    """For module-scoped fixtures: one daemon for tests that do not interfere."""
    root = tmp_path_factory.mktemp(label)
    running = start_corrald(root / "state", root)
    try:
        yield running
    finally:
        running.stop_and_check()
