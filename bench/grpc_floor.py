"""The floor for a Python gRPC service: an echo server with corral's call pattern.

No proto and no codegen: generic handlers over raw bytes. `Idle` is a
server stream that sends one message, then waits until the same client's
unary `Complete` arrives, then sends the next; that is corral's cycle
(claim on the stream, CompleteTask unary) with no auth, no SQLite and no
writer thread. Same transport (Unix socket), same client processes and
concurrency as the corral measurement.
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

CLAIM_BYTES = b"c" * 200  # about the size of a corral Claim message
REPLY_BYTES = b"r" * 160  # about the size of a CompleteTaskResponse


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


async def _serve(socket_path: str, ready: mp.Queue, stop) -> None:
    echo = _Echo()
    handler = grpc.method_handlers_generic_handler(
        "bench.Echo",
        {
            "Idle": grpc.unary_stream_rpc_method_handler(echo.idle, _identity, _identity),
            "Complete": grpc.unary_unary_rpc_method_handler(echo.complete, _identity, _identity),
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


def run(sizes, runs: int, log) -> dict:
    """Echo-floor cycles/s and cycle latency at each teammate count."""
    out: dict = {"teammates": {}}
    with EchoServer() as server:
        for count in sizes.teammates:
            members = [(f"m{i}", f"token-{i}") for i in range(count)]
            results = []
            for _ in range(runs):
                cpu = cpu_seconds(server.pid)
                tally = teamworker.run_clients(
                    "echo",
                    server.address,
                    members,
                    target=sizes.cycles,
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
            out["teammates"][str(count)] = summarize(
                results,
                {
                    "throughput": "cycles/s",
                    "p50_ms": "ms",
                    "p99_ms": "ms",
                    "errors": "count",
                    "server_cpu_ms": "server CPU ms/cycle",
                },
            )
            out["server_rss_mib"] = rss_mib(server.pid)
            rate = out["teammates"][str(count)]["throughput"]["median"]
            log(f"grpc floor  {count:>4} teammates: {rate:8.0f} cycles/s")
    return out
