"""Shared machinery for the reliability suite: sizes, daemons, channels, errors, figures.

Everything talks to corrald through the generated stubs only, over Unix
sockets or 127.0.0.1; of the SDK only its launcher is used, to start the
daemon (through tests.support's `Daemon`).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import random
import select
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

import grpc
import grpc.aio
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc
from tests import support
from tests.support.boards import board_schema, on_postgres, read_board, sqlite_integrity

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
SOAK = os.environ.get("CORRAL_SOAK", "") not in ("", "0")


def pick(reduced, full, postgres=None):
    """The reduced size for `make test`, the full size with CORRAL_SOAK=1; on a PostgreSQL
    board (`--store postgres`), whose round trips cost more, `postgres` when given instead of
    the reduced size."""
    if SOAK:
        return full
    return postgres if postgres is not None and on_postgres() else reduced


# Each client gets its own subchannels (a fresh client to a restarted daemon must
# not inherit the old connection's backoff) and reconnects quickly.
CHANNEL_OPTIONS = (
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 300),
    ("grpc.enable_retries", 0),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
)

# Codes after which the outcome of a write is unknown: retry with the same token.
IN_DOUBT = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
    }
)  # INTERNAL only from a connection torn mid-call


def md(token: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


def dur(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def ts_ms(stamp) -> int:
    return stamp.seconds * 1000 + stamp.nanos // 1_000_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------- error details


def status_details(error: grpc.RpcError) -> tuple[str, error_details_pb2.RetryInfo | None]:
    """(ErrorInfo reason or "", RetryInfo or None) of a failed call."""
    try:
        trailers = error.trailing_metadata() or ()
    except Exception:  # noqa: BLE001
        trailers = ()
    reason, retry = "", None
    for key, value in trailers:
        if key != "grpc-status-details-bin":
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                reason = info.reason
            elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                retry = error_details_pb2.RetryInfo()
                detail.Unpack(retry)
    return reason, retry


def code_of(error: BaseException) -> grpc.StatusCode | None:
    return error.code() if isinstance(error, grpc.RpcError) else None


# ---------------------------------------------------------------- figures


class Figures:
    """Prints each test's figures and appends them as JSON lines to a file."""

    def __init__(self, path: pathlib.Path, test: str) -> None:
        self.path = path
        self.test = test

    def __call__(self, **values) -> None:
        values = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in values.items()}
        print(f"\n[figures] {self.test}: " + ", ".join(f"{k}={v}" for k, v in values.items()), flush=True)
        with self.path.open("a") as handle:
            handle.write(json.dumps({"test": self.test, "soak": SOAK, **values}, default=str) + "\n")


# ---------------------------------------------------------------- the daemon


class Daemon(support.Daemon):
    """One `corrald serve` child process on a state directory; restartable (see tests.support.Daemon).

    It runs in a session of its own, like the teammate processes the tests SIGKILL and SIGSTOP.
    """

    def __init__(
        self,
        state_dir: pathlib.Path,
        *,
        listen: str | None = None,
        log_level: str = "info",
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(
            state_dir, listen=listen, log_level=log_level, extra_args=extra_args, env=env, new_session=True
        )

    # ------------------------------------------------------------ files

    @property
    def database(self) -> pathlib.Path:
        return self.state_dir / "corral.sqlite3"

    @property
    def wal(self) -> pathlib.Path:
        return self.state_dir / "corral.sqlite3-wal"

    def lead_token(self) -> str:
        return self.read_lead_token()

    def board(self) -> contextlib.AbstractContextManager[Any]:
        """The daemon's board, read-only, on either store (tests/support/boards.py)."""
        return read_board(self.state_dir)

    def rss_kib(self) -> int:
        with open(f"/proc/{self.pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    # ------------------------------------------------------------ clients

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(self.address, options=CHANNEL_OPTIONS)

    def aio_channel(self) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(self.address, options=CHANNEL_OPTIONS)


# ---------------------------------------------------------------- child processes


def child_process(module: str, *args: str, **popen: Any) -> subprocess.Popen:
    """`python -m tests.reliability.MODULE ARGS` (rel_team, rel_flood), run from the repository
    root so that the package imports."""
    return subprocess.Popen([sys.executable, "-m", f"{__package__}.{module}", *args], cwd=REPO, **popen)


def read_line(proc: subprocess.Popen, timeout: float) -> bytes:
    """One line of the child's stdout, waiting at most `timeout` (b"" on exit/timeout)."""
    deadline = time.monotonic() + timeout
    buffer = b""
    fd = proc.stdout.fileno()
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 1)
        if not chunk:
            break
        buffer += chunk
        if chunk == b"\n":
            return buffer
    return b""


# ---------------------------------------------------------------- lead helpers (sync)


class Lead:
    """Sync stubs with the lead credential; in-doubt calls are retried by callers."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.token = daemon.lead_token()
        self.md = md(self.token)
        self.reconnect()

    def reconnect(self) -> None:
        self.channel = self.daemon.channel()
        self.lead = pb_grpc.LeadServiceStub(self.channel)
        self.board = pb_grpc.BoardServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def add_teammate(self, name: str, roles: Iterable[str] = (), require_plan: bool = False) -> str:
        reply = self.lead.AddTeammate(
            pb.AddTeammateRequest(name=name, roles=list(roles), require_plan_approval=require_plan),
            metadata=self.md,
            timeout=20,
        )
        return reply.token

    def create(self, specs: Sequence[pb.TaskSpec], request_id: str = "", timeout: float = 30) -> list[pb.Task]:
        reply = self.lead.CreateTasks(
            pb.CreateTasksRequest(tasks=specs, request_id=request_id), metadata=self.md, timeout=timeout
        )
        return list(reply.tasks)

    def create_retrying(self, specs: Sequence[pb.TaskSpec], request_id: str, deadline_s: float = 60) -> list[pb.Task]:
        """CreateTasks with a request_id, retried while the outcome is in doubt."""
        deadline = time.monotonic() + deadline_s
        while True:
            try:
                return self.create(specs, request_id, timeout=10)
            except grpc.RpcError as error:
                if error.code() not in IN_DOUBT | {grpc.StatusCode.RESOURCE_EXHAUSTED} or time.monotonic() > deadline:
                    raise
                wait_briefly(0.05)

    def get_task(self, task_id: str) -> pb.Task:
        return self.board.GetTask(pb.GetTaskRequest(id=task_id), metadata=self.md, timeout=20).task

    def exists(self, task_id: str) -> bool:
        """Whether the board has the task (any answer but NOT_FOUND fails the test)."""
        try:
            self.get_task(task_id)
            return True
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.NOT_FOUND
            return False

    def stats(self) -> pb.GetStatsResponse:
        return self.board.GetStats(pb.GetStatsRequest(), metadata=self.md, timeout=20)

    def all_tasks(self) -> list[pb.Task]:
        tasks, token = [], ""
        while True:
            reply = self.board.ListTasks(
                pb.ListTasksRequest(page_size=1000, page_token=token), metadata=self.md, timeout=20
            )
            tasks.extend(reply.tasks)
            token = reply.next_page_token
            if not token:
                return tasks


def wait_briefly(seconds: float) -> None:
    """A retry back-off (never used to wait for a condition)."""
    threading.Event().wait(seconds)


def first_claim(
    stub: pb_grpc.TeammateServiceStub, token: str, *, poll_ms: int = 200, max_idle_polls: int = 100, timeout: float = 10
) -> pb.Claim:
    """Opens an Idle stream as `token` and returns the first claim it delivers (the stream is then closed)."""
    call = stub.Idle(
        pb.IdleRequest(poll_interval=dur(poll_ms), max_idle_polls=max_idle_polls), metadata=md(token), timeout=timeout
    )
    try:
        for response in call:
            if response.HasField("claim"):
                return response.claim
    finally:
        call.cancel()
    raise AssertionError("no claim")


def wait_for_tasks_terminal(lead: Lead, ids: set[str], timeout: float, seen: dict | None = None) -> dict[str, int]:
    """Follows the Watch feed until every task in `ids` is terminal; returns id -> state.
    `seen`, when given, collects every event read (seq -> serialized event)."""
    states: dict[str, int] = {}
    terminal = {pb.TASK_STATE_COMPLETED, pb.TASK_STATE_FAILED, pb.TASK_STATE_CANCELED}
    deadline = time.monotonic() + timeout
    stream = lead.lead.Watch(pb.WatchRequest(after_seq=0), metadata=lead.md, timeout=timeout)
    try:
        for event in stream:
            if seen is not None:
                seen[event.seq] = event.SerializeToString(deterministic=True)
            if event.HasField("task_changed"):
                states[event.task_changed.id] = event.task_changed.state
                if all(states.get(i) in terminal for i in ids):
                    return states
            if time.monotonic() > deadline:
                break
    except grpc.RpcError as error:
        if error.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
            raise
    finally:
        stream.cancel()
    missing = sorted(i for i in ids if states.get(i) not in terminal)
    raise AssertionError(f"{len(missing)} tasks not terminal after {timeout}s: {missing[:10]}")


# ---------------------------------------------------------------- the board, read-only


@contextlib.contextmanager
def open_db_ro(path: pathlib.Path):
    """A SQLite file of the test's own, read-only (a daemon's board: `Daemon.board()`)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def integrity(daemon: Daemon) -> str | None:
    """SQLite's integrity check of the daemon's file ("ok"); None on PostgreSQL."""
    return sqlite_integrity(daemon.state_dir)


def schema_of(daemon: Daemon) -> list[tuple]:
    """The board's tables and indexes as stored (tests/support/boards.py)."""
    return board_schema(daemon.state_dir)


def wal_size(daemon: Daemon) -> int:
    try:
        return daemon.wal.stat().st_size
    except FileNotFoundError:
        return 0


# ---------------------------------------------------------------- graphs


def random_dag(
    rng: random.Random, prefix: str, count: int, *, max_deps: int = 3, outside: Sequence[str] = ()
) -> list[tuple[str, list[str]]]:
    """Tasks `prefix-i` in topological order; each depends on up to `max_deps` earlier ones
    (or on ids in `outside`, tasks already on the board)."""
    tasks: list[tuple[str, list[str]]] = []
    for i in range(count):
        pool = [t for t, _ in tasks[max(0, i - 20) :]] + list(outside)
        deps = rng.sample(pool, min(len(pool), rng.randint(0, max_deps))) if pool and rng.random() < 0.7 else []
        tasks.append((f"{prefix}-{i}", deps))
    return tasks


def specs_for(graph: Sequence[tuple[str, Sequence[str]]], **fields) -> list[pb.TaskSpec]:
    return [
        pb.TaskSpec(id=task_id, title=f"title {task_id}", depends_on=list(deps), **fields) for task_id, deps in graph
    ]


def replay_watch(lead: Lead, through_seq: int, timeout: float = 30) -> dict[int, bytes]:
    """The Watch feed from the start through `through_seq` (seq -> serialized event)."""
    events: dict[int, bytes] = {}
    stream = lead.lead.Watch(pb.WatchRequest(after_seq=0), metadata=lead.md, timeout=timeout)
    try:
        for event in stream:
            events[event.seq] = event.SerializeToString(deterministic=True)
            if event.seq >= through_seq:
                break
    finally:
        stream.cancel()
    return events
