"""Start and stop a real `corrald serve` for one measurement; talk to it over its Unix socket."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import grpc
import grpc.aio
from google.protobuf import duration_pb2

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

READY_TIMEOUT_S = 30.0
CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
)


_LOOP: asyncio.AbstractEventLoop | None = None


def run_async(coroutine):
    """Runs a coroutine on the driver's one event loop.

    grpc.aio keeps process-wide completion-queue state; a fresh loop per
    `asyncio.run` leaves late callbacks aimed at a closed loop, so the driver
    uses one loop for all of its gRPC work.
    """
    global _LOOP
    if _LOOP is None or _LOOP.is_closed():
        _LOOP = asyncio.new_event_loop()
    return _LOOP.run_until_complete(coroutine)


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def duration(seconds: float) -> duration_pb2.Duration:
    whole = int(seconds)
    return duration_pb2.Duration(seconds=whole, nanos=int(round((seconds - whole) * 1e9)))


def rss_mib(pid: int) -> float:
    """VmRSS of a process, in MiB (0.0 if it is gone)."""
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (0.0 if it is gone)."""
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scratch_dir(prefix: str) -> pathlib.Path:
    """A private temporary directory on the same disk as a real state dir (not tmpfs)."""
    return pathlib.Path(tempfile.mkdtemp(prefix=f"corral-bench-{prefix}-"))


class Daemon:
    """One `corrald serve` child on a fresh state directory."""

    def __init__(self, *, synchronous: str = "FULL", state_dir: pathlib.Path | None = None) -> None:
        # `root` holds the log (and the state dir, unless one is given); it is removed on stop.
        self.root = scratch_dir("d")
        self.state_dir = state_dir or self.root / "state"
        self.synchronous = synchronous
        self.process: subprocess.Popen | None = None
        self.address = ""
        self.pid = 0
        self.token = ""

    def start(self) -> Daemon:
        log = open(self.root / "corrald.log", "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "corrald", "serve", "--state-dir", str(self.state_dir),
             "--synchronous", self.synchronous, "--log-level", "warning"],
            stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
        )
        log.close()
        ready = self._read_ready()
        self.address, self.pid = ready["address"], ready["pid"]
        self.token = (self.state_dir / "lead.token").read_text().strip()
        return self

    def _read_ready(self) -> dict:
        assert self.process is not None and self.process.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(self.process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if selector.select(timeout=0.5):
                line = self.process.stdout.readline()
                if not line:
                    break
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    if event.get("event") == "ready":
                        return event
            if self.process.poll() is not None:
                break
        log = (self.root / "corrald.log").read_text(errors="replace")[-2000:]
        self.stop()
        raise RuntimeError(f"corrald did not become ready: {log}")

    def rss_mib(self) -> float:
        return rss_mib(self.pid)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Daemon:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class Lead:
    """The Lead's raw stubs on one grpc.aio channel (use inside a running loop)."""

    def __init__(self, address: str, token: str) -> None:
        self.channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        self.md = bearer(token)
        self.lead = pb_grpc.LeadServiceStub(self.channel)
        self.board = pb_grpc.BoardServiceStub(self.channel)

    async def add_teammates(self, names: list[str], roles: tuple[str, ...] = (),
                            concurrency: int = 64) -> dict[str, str]:
        tokens: dict[str, str] = {}
        for start in range(0, len(names), concurrency):
            chunk = names[start:start + concurrency]
            replies = await asyncio.gather(*(self.lead.AddTeammate(pb.AddTeammateRequest(name=n, roles=roles),
                                                            metadata=self.md, timeout=60) for n in chunk))
            tokens.update({name: reply.token for name, reply in zip(chunk, replies)})
        return tokens

    async def create(self, specs: list[pb.TaskSpec], batch: int = 10_000) -> float:
        """Creates the tasks in batches; returns the seconds it took."""
        started = time.perf_counter()
        for start in range(0, len(specs), batch):
            await self.lead.CreateTasks(pb.CreateTasksRequest(tasks=specs[start:start + batch]),
                                        metadata=self.md, timeout=600)
        return time.perf_counter() - started

    async def stats(self) -> pb.GetStatsResponse:
        return await self.board.GetStats(pb.GetStatsRequest(), metadata=self.md, timeout=60)

    async def close(self) -> None:
        await self.channel.close()

