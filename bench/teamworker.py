"""Client processes: asyncio teammates on grpc.aio raw stubs, one channel per process.

The same loop drives corral (`Idle` stream + `CompleteTask`) and the echo floor
(one streamed message + one unary call): a *cycle* is "message delivered on the
stream" → "the unary call returned". Processes are started with the `spawn`
context (gRPC does not survive fork), wait at a barrier, then run until a
shared completion counter reaches the target or the deadline passes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing as mp
import os
import random
import time

import grpc
import grpc.aio

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

from .daemon import CHANNEL_OPTIONS, bearer, duration

ECHO_IDLE = "/bench.Echo/Idle"
ECHO_COMPLETE = "/bench.Echo/Complete"
ATTEMPTS = 20


def _identity(value: bytes) -> bytes:
    return value


@dataclasses.dataclass
class ClientJob:
    kind: str  # "corral" or "echo"
    address: str
    members: list[tuple[str, str]]  # (teammate name, token)
    target: int  # completions across all processes that end the run
    deadline_s: float  # hard bound on the run, from the go signal


@dataclasses.dataclass
class _Tally:
    latencies: list[float] = dataclasses.field(default_factory=list)
    completed: int = 0
    errors: int = 0
    refused: int = 0  # RESOURCE_EXHAUSTED answers, retried
    first_claim: float = 0.0
    last_done: float = 0.0


def client_main(job: ClientJob, ready: mp.Queue, go, counter, results: mp.Queue) -> None:
    try:
        results.put(asyncio.run(_main(job, ready, go, counter)))
    except BaseException as error:  # noqa: BLE001 (the driver must hear about it)
        ready.put(("error", repr(error)))
        results.put({"pid": os.getpid(), "error": repr(error)})


async def _main(job: ClientJob, ready: mp.Queue, go, counter) -> dict:
    channel = grpc.aio.insecure_channel(job.address, options=CHANNEL_OPTIONS)
    await asyncio.wait_for(channel.channel_ready(), 30)
    ready.put(("ready", os.getpid()))
    loop = asyncio.get_running_loop()
    if not await loop.run_in_executor(None, go.wait, 120):
        raise TimeoutError("no go signal")
    tally = _Tally()
    make = _corral_teammate if job.kind == "corral" else _echo_teammate
    tasks = [asyncio.create_task(make(channel, name, token, tally, counter)) for name, token in job.members]
    deadline = time.monotonic() + job.deadline_s
    while counter.value < job.target and time.monotonic() < deadline:
        if all(task.done() for task in tasks):
            break
        await asyncio.sleep(0.005)
    for task in tasks:
        task.cancel()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    failures = [repr(o) for o in outcomes if isinstance(o, BaseException) and not isinstance(o, asyncio.CancelledError)]
    await channel.close()
    return {
        "pid": os.getpid(),
        "latencies": tally.latencies,
        "completed": tally.completed,
        "errors": tally.errors + len(failures),
        "error_samples": failures[:3],
        "refused": tally.refused,
        "first_claim": tally.first_claim,
        "last_done": tally.last_done,
    }


def _count(tally: _Tally, counter, started: float) -> None:
    done = time.monotonic()
    tally.latencies.append(done - started)
    tally.completed += 1
    tally.last_done = max(tally.last_done, done)
    with counter.get_lock():
        counter.value += 1


async def _corral_teammate(channel, name: str, token: str, tally: _Tally, counter) -> None:
    stub = pb_grpc.TeammateServiceStub(channel)
    md = bearer(token)
    request = pb.IdleRequest(slots=1, max_idle_polls=10_000, poll_interval=duration(5))
    for _ in range(ATTEMPTS):  # reopen only when the daemon said "overloaded, retry"
        try:
            async for response in stub.Idle(request, metadata=md):
                if response.WhichOneof("event") != "claim":
                    continue
                started = time.monotonic()
                tally.first_claim = tally.first_claim or started
                claim = response.claim
                complete = pb.CompleteTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token)
                if await _retrying(stub.CompleteTask, complete, md, tally):
                    _count(tally, counter, started)
            return
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            tally.refused += 1
            await asyncio.sleep(random.uniform(0.05, 0.25))


async def _retrying(method, request, md, tally: _Tally) -> bool:
    """A unary call, retried while the daemon answers RESOURCE_EXHAUSTED (as RetryInfo asks)."""
    for _ in range(ATTEMPTS):
        try:
            await method(request, metadata=md, timeout=60)
            return True
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                tally.errors += 1
                return False
            tally.refused += 1
            await asyncio.sleep(random.uniform(0.05, 0.25))
    tally.errors += 1
    return False


async def _echo_teammate(channel, name: str, token: str, tally: _Tally, counter) -> None:
    idle = channel.unary_stream(ECHO_IDLE, request_serializer=_identity, response_deserializer=_identity)
    complete = channel.unary_unary(ECHO_COMPLETE, request_serializer=_identity, response_deserializer=_identity)
    md = bearer(token)
    key = name.encode()
    async for message in idle(key, metadata=md):
        started = time.monotonic()
        tally.first_claim = tally.first_claim or started
        await complete(key + b"|" + message[:64], metadata=md, timeout=60)
        _count(tally, counter, started)


def run_clients(
    kind: str, address: str, members: list[tuple[str, str]], *, target: int, deadline_s: float, processes: int = 2
) -> dict:
    """Runs `members` as teammates spread over `processes` client processes; returns the merged tally."""
    ctx = mp.get_context("spawn")
    ready, results = ctx.Queue(), ctx.Queue()
    go, counter = ctx.Event(), ctx.Value("q", 0)
    groups = [members[i::processes] for i in range(processes)]
    groups = [g for g in groups if g]
    procs = [
        ctx.Process(
            target=client_main,
            daemon=True,
            args=(ClientJob(kind, address, group, target, deadline_s), ready, go, counter, results),
        )
        for group in groups
    ]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:
            status, detail = ready.get(timeout=120)
            if status != "ready":
                raise RuntimeError(f"client process failed to start: {detail}")
        started = time.monotonic()
        go.set()
        outs = [results.get(timeout=deadline_s + 120) for _ in procs]
    finally:
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    broken = [o["error"] for o in outs if "error" in o]
    if broken:
        raise RuntimeError(f"client process failed: {broken[0]}")
    latencies = [x for o in outs for x in o["latencies"]]
    completed = sum(o["completed"] for o in outs)
    last = max((o["last_done"] for o in outs), default=started)
    wall = max(last - started, 1e-9)
    return {
        "completed": completed,
        "wall_s": wall,
        "throughput": completed / wall,
        "latencies": latencies,
        "errors": sum(o["errors"] for o in outs),
        "refused": sum(o["refused"] for o in outs),
        "error_samples": [e for o in outs for e in o["error_samples"]][:3],
        "timed_out": completed < target,
    }
