"""Start and stop a real `corrald serve` for one measurement (tests.support.Daemon); talk to it over its Unix socket."""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import tempfile
import time
from collections.abc import Mapping

import grpc
import grpc.aio
from google.protobuf import duration_pb2

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc
from tests import support

READY_TIMEOUT_S = 30.0
STOP_GRACE_S = 15.0  # a daemon at the end of a heavy run may take a while to checkpoint
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


class Daemon(support.Daemon):
    """One `corrald serve` child on a fresh state directory (tests.support's, through the SDK's launcher)."""

    def __init__(
        self,
        *,
        synchronous: str = "FULL",
        state_dir: pathlib.Path | None = None,
        pythonpath: str | None = None,
        extra_args: tuple[str, ...] = (),
        lead_token: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """`pythonpath`: run the corrald found there (an older commit's, bench.baseline) instead of ours.
        `lead_token`: the board's Lead token when another daemon wrote it (a second daemon on a shared
        PostgreSQL board writes no lead.token of its own). `env`: variables for the daemon process
        alone, laid over this process's environment (the bench's own stays as it is)."""
        # `root` holds the log (and the state dir, unless one is given); it is removed on stop.
        self.root = scratch_dir("d")
        overlay = {**({"PYTHONPATH": pythonpath} if pythonpath else {}), **(env or {})}
        super().__init__(
            state_dir or self.root / "state",
            log_dir=self.root,
            log_level="warning",
            extra_args=["--synchronous", synchronous, *extra_args],
            env=overlay or None,
        )
        self.token = ""
        self._lead_token = lead_token
        self._killed = False

    def start(self) -> Daemon:
        try:
            super().start(timeout=READY_TIMEOUT_S)
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise
        self.token = self._lead_token or self.read_lead_token()
        return self

    def rss_mib(self) -> float:
        return rss_mib(self.pid)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def kill(self) -> int:
        """SIGKILL (the crash path) and reap; `stop` then only removes what it left."""
        self._killed = True
        return super().kill()

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        # A daemon killed on purpose is not stopped again: that would log its -9 as a failure.
        if not self._killed or self.alive():
            super().stop(grace)
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

    async def add_teammates(
        self, names: list[str], roles: tuple[str, ...] = (), concurrency: int = 64
    ) -> dict[str, str]:
        tokens: dict[str, str] = {}
        for start in range(0, len(names), concurrency):
            chunk = names[start : start + concurrency]
            replies = await asyncio.gather(
                *(
                    self.lead.AddTeammate(pb.AddTeammateRequest(name=n, roles=roles), metadata=self.md, timeout=60)
                    for n in chunk
                )
            )
            tokens.update({name: reply.token for name, reply in zip(chunk, replies, strict=True)})
        return tokens

    async def create(self, specs: list[pb.TaskSpec], batch: int = 10_000) -> float:
        """Creates the tasks in batches; returns the seconds it took."""
        started = time.perf_counter()
        for start in range(0, len(specs), batch):
            await self.lead.CreateTasks(
                pb.CreateTasksRequest(tasks=specs[start : start + batch]), metadata=self.md, timeout=600
            )
        return time.perf_counter() - started

    async def stats(self) -> pb.GetStatsResponse:
        return await self.board.GetStats(pb.GetStatsRequest(), metadata=self.md, timeout=60)

    async def close(self) -> None:
        await self.channel.close()


async def session_refusal(address: str, token: str) -> str | None:
    """None when the daemon serves TeammateService.Session, else how it refused.

    The probe is a harmless `ack` op (through seq 0): a daemon with Session
    answers it with an op result; one that predates it fails the call
    (UNIMPLEMENTED, or whatever its interceptor makes of a client stream).
    """
    channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
    call = pb_grpc.TeammateServiceStub(channel).Session(metadata=bearer(token))
    op_id = f"probe-{os.getpid()}-{time.monotonic_ns()}"
    try:
        await call.write(pb.SessionRequest(open=pb.IdleRequest(max_idle_polls=1)))
        await call.write(pb.SessionRequest(op_id=op_id, ack=pb.AckMessagesRequest()))
        while True:
            response = await asyncio.wait_for(call.read(), 30)
            if response is grpc.aio.EOF:
                return "the daemon ended the Session stream without an op result"
            if response.op_result.op_id == op_id:
                return None
    except grpc.aio.AioRpcError as error:
        detail = " ".join((error.details() or "").replace("|", "/").split())[:80]
        return f"the daemon refuses Session ({error.code().name}: {detail})"
    finally:
        call.cancel()
        await channel.close()


def lead_call(daemon: Daemon, work):
    """`await work(lead)` on a Lead of its own (a grpc.aio channel lives on one loop)."""

    async def go():
        lead = Lead(daemon.address, daemon.token)
        try:
            return await work(lead)
        finally:
            await lead.close()

    return run_async(go())
