"""Helpers for the wire-level contract tests of corrald (fixtures live in conftest.py).

These tests speak to a real `corrald serve` process through the stubs
generated from proto/ only (never through the Python SDK), the way a client
written in any other language would.

- `start_corrald` spawns `corrald serve` and returns a `Daemon` once its ready
  line is read; `Daemon` holds the lead's `Client` and board helpers.
- `Client` is one identity: the three generated stubs, sending its token.
- `Stream` pumps a server stream into a queue so every read has a deadline.
- `assert_status` checks a code, its ErrorInfo reason and BadRequest fields.

Nothing here sleeps to wait for something: the ready line is read by a
thread with a deadline, stream items are read from a queue with a deadline,
and `poll_until` polls with a deadline.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import os
import pathlib
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc

READY_TIMEOUT_S = 20.0  # generous: two cores, other suites may run alongside
STOP_TIMEOUT_S = 5.0  # the contract: SIGTERM -> exit 0 within 5 s
UNARY_TIMEOUT_S = 10.0
STREAM_TIMEOUT_S = 60.0


# ---------------------------------------------------------------- small builders


def duration(seconds: float) -> duration_pb2.Duration:
    nanos = round(seconds * 1_000_000_000)
    return duration_pb2.Duration(seconds=nanos // 1_000_000_000, nanos=nanos % 1_000_000_000)


def ts_seconds(timestamp) -> float:
    return timestamp.seconds + timestamp.nanos / 1e9


def spec(task_id: str, *deps: str, lease: float | None = None, **fields: Any) -> pb.TaskSpec:
    """A TaskSpec; `lease` in seconds, other fields passed through."""
    fields.setdefault("title", f"task {task_id}")
    message = pb.TaskSpec(id=task_id, depends_on=list(deps), **fields)
    if lease is not None:
        message.lease_duration.CopyFrom(duration(lease))
    return message


def bearer(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


def poll_until(check: Callable[[], Any], *, timeout: float = 5.0, interval: float = 0.02, what: str = "condition"):
    """Calls `check` until it returns something truthy; fails at the deadline."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value {last!r}")
        # Not waiting for an event: pacing a poll of state that has no stream.
        threading.Event().wait(interval)


# ---------------------------------------------------------------- rich errors


def status_details(error: grpc.RpcError) -> dict[str, Any]:
    """ErrorInfo / BadRequest / RetryInfo from the google.rpc.Status of a failed call."""
    found: dict[str, Any] = {}
    status = rpc_status.from_call(error)
    if status is None:
        return found
    for detail in status.details:
        for kind, name in ((error_details_pb2.ErrorInfo, "error_info"), (error_details_pb2.BadRequest, "bad_request"),
                           (error_details_pb2.RetryInfo, "retry_info")):
            if detail.Is(kind.DESCRIPTOR):
                value = kind()
                detail.Unpack(value)
                found[name] = value
    return found


def assert_status(error: grpc.RpcError, code: grpc.StatusCode, *, reason: str | None = None,
                  field: str | None = None) -> dict[str, Any]:
    """Checks the code and, when given, the ErrorInfo reason and a BadRequest field violation."""
    assert error.code() == code, f"expected {code.name}, got {error.code().name}: {error.details()}"
    found = status_details(error)
    if reason is not None:
        info = found.get("error_info")
        assert info is not None, f"no google.rpc.ErrorInfo on {code.name}: {error.details()}"
        assert info.domain == "corral", info
        assert info.reason == reason, f"expected reason {reason}, got {info.reason}: {error.details()}"
    if field is not None:
        bad = found.get("bad_request")
        assert bad is not None, f"no google.rpc.BadRequest on INVALID_ARGUMENT: {error.details()}"
        fields = [v.field for v in bad.field_violations]
        assert field in fields, f"expected a field violation on {field!r}, got {fields}: {error.details()}"
    return found


def rpc_error(function: Callable, *args, **kwargs) -> grpc.RpcError:
    """Calls `function`, which must fail with a grpc.RpcError; returns it."""
    try:
        result = function(*args, **kwargs)
    except grpc.RpcError as error:
        return error
    raise AssertionError(f"expected the call to fail, it returned {result!r}")


# ---------------------------------------------------------------- channels with a credential


class _CallDetails(
    collections.namedtuple("_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready",
                                            "compression")),
    grpc.ClientCallDetails,
):
    pass


class _Credential(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds `authorization` metadata (unless the call brings its own) and a default deadline."""

    def __init__(self, metadata: list[tuple[str, str]]) -> None:
        self._metadata = metadata

    def _details(self, details, default_timeout: float) -> _CallDetails:
        metadata = list(details.metadata or ())
        if not any(key == "authorization" for key, _ in metadata):
            metadata.extend(self._metadata)
        timeout = details.timeout if details.timeout is not None else default_timeout
        return _CallDetails(details.method, timeout, metadata, details.credentials, details.wait_for_ready,
                            details.compression)

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details, UNARY_TIMEOUT_S), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details, STREAM_TIMEOUT_S), request)


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

    def idle(self, *, max_idle_polls: int = 0, poll_interval: float | None = None, slots: int = 0,
             timeout: float = STREAM_TIMEOUT_S) -> Stream:
        request = pb.IdleRequest(max_idle_polls=max_idle_polls, slots=slots)
        if poll_interval is not None:
            request.poll_interval.CopyFrom(duration(poll_interval))
        return Stream(self.teammate.Idle(request, timeout=timeout), f"Idle({self.name})")

    def ack(self, through_seq: int) -> int:
        return self.teammate.AckMessages(pb.AckMessagesRequest(through_seq=through_seq)).acked_through_seq

    def complete(self, claim: pb.Claim, result: bytes = b"done") -> pb.Task:
        return self.teammate.CompleteTask(pb.CompleteTaskRequest(
            task_id=claim.task.id, claim_token=claim.claim_token, result=result)).task

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

    def expect_quiet(self, seconds: float) -> None:
        """Nothing arrives (and the stream does not end) for `seconds`."""
        try:
            item = self._get(seconds)
        except queue.Empty:
            return
        if item is None:
            raise AssertionError(f"{self.label}: stream ended with {self.end_status} during a quiet period")
        raise AssertionError(f"{self.label}: expected nothing for {seconds}s, got {short(item)}")

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


# ---------------------------------------------------------------- the daemon process


class Daemon:
    """One running `corrald serve` process and helpers to talk to it."""

    def __init__(self, state_dir: pathlib.Path, proc: subprocess.Popen, ready: dict, log_path: pathlib.Path,
                 started_at: float) -> None:
        self.state_dir = state_dir
        self.proc = proc
        self.ready = ready
        self.log_path = log_path
        self.started_at = started_at  # wall clock just before the process was spawned
        self.address: str = ready["address"]
        self.pid: int = ready["pid"]
        self.lead_token = (state_dir / "lead.token").read_text().strip()
        self.channel = grpc.insecure_channel(self.address)
        self.lead = Client(self.channel, self.lead_token, "lead")
        self._names = itertools.count(1)
        self._streams: list[Stream] = []

    # ------------------------------------------------------------ identities

    def client(self, token: str, name: str = "?") -> Client:
        return Client(self.channel, token, name)

    def add_teammate(self, name: str | None = None, *, roles: Iterable[str] = (),
                     require_plan_approval: bool = False) -> Client:
        """Mints a teammate credential; returns that teammate's Client (`.token`, `.name`)."""
        name = name or f"mate{next(self._names)}"
        response = self.lead.lead.AddTeammate(pb.AddTeammateRequest(
            name=name, roles=list(roles), require_plan_approval=require_plan_approval))
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

    def teammate(self, name: str) -> pb.Teammate:
        for mate in self.lead.board.ListTeammates(pb.ListTeammatesRequest()).teammates:
            if mate.name == name:
                return mate
        raise AssertionError(f"no teammate {name!r} on the board")

    def watch(self, after_seq: int = 0, timeout: float = STREAM_TIMEOUT_S) -> Stream:
        return Stream(self.lead.lead.Watch(pb.WatchRequest(after_seq=after_seq), timeout=timeout), "Watch")

    def wait_open_streams(self, count: int, timeout: float = 5.0) -> None:
        poll_until(lambda: self.stats().open_streams == count, timeout=timeout, what=f"{count} open Idle streams")

    # ------------------------------------------------------------ life

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def close_channel(self) -> None:
        self.channel.close()

    def terminate(self, timeout: float = STOP_TIMEOUT_S) -> tuple[int | None, float]:
        """SIGTERM; returns (exit code or None if still running after `timeout`, seconds taken)."""
        if not self.running:
            return self.proc.returncode, 0.0
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None, time.monotonic() - started
        return code, time.monotonic() - started

    def kill(self) -> None:
        """SIGKILL: the crash path."""
        if self.running:
            self.proc.kill()
            self.proc.wait(10)

    def stop_and_check(self) -> None:
        """Teardown: SIGTERM must exit 0 within 5 s."""
        self.close_channel()
        if not self.running:
            return
        code, took = self.terminate()
        if code is None:
            self.kill()
            pytest.fail(f"corrald pid {self.pid} did not exit within {STOP_TIMEOUT_S}s of SIGTERM\n{self.log()}")
        assert code == 0, f"corrald exited {code} after SIGTERM ({took:.2f}s)\n{self.log()}"


_log_numbers = itertools.count(1)


def start_corrald(state_dir: pathlib.Path, log_dir: pathlib.Path | None = None, *,
                  extra_args: Iterable[str] = (), env: dict[str, str] | None = None) -> Daemon:
    """Spawns `corrald serve --state-dir state_dir`; returns once its ready line is read."""
    log_dir = log_dir or state_dir.parent
    log_path = log_dir / f"corrald-{os.getpid()}-{next(_log_numbers)}.log"
    if env is None:
        environment = dict(os.environ)
        environment.pop("CORRAL_FAILPOINTS", None)  # only a test that means to inject faults sets them
    else:
        environment = dict(env)
    started_at = time.time()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "corrald", "serve", "--state-dir", str(state_dir), *extra_args],
            stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env=environment,
            cwd=str(log_dir),
        )
    lines: queue.Queue = queue.Queue()

    def pump() -> None:  # keeps reading so the pipe never fills
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.put(raw.decode(errors="replace"))
        lines.put(None)

    threading.Thread(target=pump, name=f"corrald stdout {proc.pid}", daemon=True).start()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        remaining = deadline - time.monotonic()
        try:
            line = lines.get(timeout=max(0.0, remaining))
        except queue.Empty:
            proc.kill()
            proc.wait(10)
            raise AssertionError(f"corrald printed no ready line within {READY_TIMEOUT_S}s\n"
                                 f"{log_path.read_text(errors='replace')}") from None
        if line is None:
            proc.wait(10)
            raise AssertionError(f"corrald exited {proc.returncode} before it was ready\n"
                                 f"{log_path.read_text(errors='replace')}")
        try:
            ready = json.loads(line)
        except ValueError:
            continue
        if isinstance(ready, dict) and ready.get("event") == "ready":
            break
    assert ready["pid"] == proc.pid, ready
    return Daemon(state_dir, proc, ready, log_path, started_at)


@contextlib.contextmanager
def module_daemon(tmp_path_factory, label: str) -> Iterator[Daemon]:
    """For module-scoped fixtures: one daemon for tests that do not interfere."""
    root = tmp_path_factory.mktemp(label)
    running = start_corrald(root / "state", root)
    try:
        yield running
    finally:
        running.stop_and_check()
