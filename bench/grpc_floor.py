"""The floors for a Python gRPC service: echo servers with corral's two call patterns.

No proto and no codegen: generic handlers over raw bytes, with no auth, no
SQLite and no writer thread. Same transport (Unix socket), same client
processes and concurrency as the corral measurement.

* unary floor (Idle + unary): `Idle` is a server stream that sends one
  message, then waits until the same client's unary `Complete` arrives, then
  sends the next; that is corral's Idle cycle (claim on the stream,
  CompleteTask unary).
* bidirectional floor (Session): one `Session` stream per teammate. The
  server sends a ~200 B claim; the client answers with a ~160 B complete op on
  the same stream; the server replies with the op result and the next claim
  in one message. That is the Session cycle with a handed-off claim.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os

import grpc
import grpc.aio

from . import teamworker
from .daemon import cpu_seconds, rss_mib, scratch_dir
from .stats import latency_fields, summarize
from .teamworker import CLAIM_BYTES, REPLY_BYTES

FIELDS = {
    "throughput": "cycles/s",
    "p50_ms": "ms",
    "p99_ms": "ms",
    "errors": "count",
    "server_cpu_ms": "server CPU ms/cycle",
}


def _identity(value: bytes) -> bytes:
    return value


class _Echo:
    def __init__(self) -> None:
        self.turns: dict[bytes, asyncio.Event] = {}

    async def idle(self, request: bytes, context):
        turn = asyncio.Event()
        turn.set()
        self.turns[request] = turn
        try:
            while True:
                await turn.wait()
                turn.clear()
                yield CLAIM_BYTES
        finally:
            if self.turns.get(request) is turn:
                del self.turns[request]

    async def complete(self, request: bytes, context) -> bytes:
        key = request.split(b"|", 1)[0]
        turn = self.turns.get(key)
        if turn is not None:
            turn.set()
        return REPLY_BYTES

    async def session(self, requests, context) -> None:
        if await context.read() is grpc.aio.EOF:  # the open
            return
        await context.write(CLAIM_BYTES)
        while await context.read() is not grpc.aio.EOF:  # a complete op
            await context.write(REPLY_BYTES + CLAIM_BYTES)  # its op result and the next claim, one message


async def _serve(socket_path: str, ready: mp.Queue, stop) -> None:
    echo = _Echo()
    handler = grpc.method_handlers_generic_handler(
        "bench.Echo",
        {
            "Idle": grpc.unary_stream_rpc_method_handler(echo.idle, _identity, _identity),
            "Complete": grpc.unary_unary_rpc_method_handler(echo.complete, _identity, _identity),
            "Session": grpc.stream_stream_rpc_method_handler(echo.session, _identity, _identity),
        },
    )
    server = grpc.aio.server(options=(("grpc.max_concurrent_streams", 4096),))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix:{socket_path}")
    await server.start()
    ready.put(os.getpid())
    await asyncio.get_running_loop().run_in_executor(None, stop.wait)
    await server.stop(1)


def serve_main(socket_path: str, ready: mp.Queue, stop) -> None:
    asyncio.run(_serve(socket_path, ready, stop))


class EchoServer:
    def __init__(self) -> None:
        ctx = mp.get_context("spawn")
        self.root = scratch_dir("echo")
        self.address = f"unix:{self.root / 'echo.sock'}"
        self._ready, self._stop = ctx.Queue(), ctx.Event()
        self._proc = ctx.Process(
            target=serve_main, args=(str(self.root / "echo.sock"), self._ready, self._stop), daemon=True
        )

    def __enter__(self) -> EchoServer:
        self._proc.start()
        self.pid = self._ready.get(timeout=60)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._proc.join(15)
        if self._proc.is_alive():
            self._proc.kill()
        import shutil  # noqa: PLC0415

        shutil.rmtree(self.root, ignore_errors=True)


LOADS = {"teammates": "echo", "bidi": "echo_bidi"}  # result key -> teamworker load


def measure(server: EchoServer, kind: str, count: int, cycles: int, runs: int, sizes) -> dict:
    """One floor at `count` teammates: the median over `runs` runs on a running echo server."""
    members = [(f"m{i}", f"token-{i}") for i in range(count)]
    results = []
    for _ in range(runs):
        cpu = cpu_seconds(server.pid)
        tally = teamworker.run_clients(
            kind,
            server.address,
            members,
            target=cycles,
            deadline_s=sizes.run_deadline_s,
            processes=sizes.client_processes,
        )
        results.append(
            {
                "throughput": tally["throughput"],
                **latency_fields(tally["latencies"]),
                "errors": tally["errors"],
                "server_cpu_ms": 1000 * (cpu_seconds(server.pid) - cpu) / max(tally["completed"], 1),
            }
        )
    return summarize(results, FIELDS)


def run(sizes, runs: int, log) -> dict:
    """Both floors' cycles/s and cycle latency at each teammate count ("teammates": unary, "bidi": Session)."""
    out: dict = {key: {} for key in LOADS}
    with EchoServer() as server:
        for count in sizes.teammates:
            for key, kind in LOADS.items():
                out[key][str(count)] = measure(server, kind, count, sizes.cycles, runs, sizes)
            out["server_rss_mib"] = rss_mib(server.pid)
            log(
                f"grpc floor  {count:>4} teammates: unary {out['teammates'][str(count)]['throughput']['median']:8.0f},"
                f" bidi {out['bidi'][str(count)]['throughput']['median']:8.0f} cycles/s"
            )
    return out
