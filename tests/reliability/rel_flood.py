"""A load generator in a child process (so it does not share the test's event loop).

    python -m tests.reliability.rel_flood CONFIG.json

CONFIG: {"address", "duration_s", "channels", "flows": [{"token", "kind", "concurrency", ...}]}
kinds: "message" (SendMessage to `to` (default "lead"), `body_bytes`), "create" (CreateTasks of `batch` tasks,
lead token), "streams" (open Idle streams over and over with the same identity).
Prints "started" when its calls are running, then one JSON summary line when done:
codes seen, refusals with and without RetryInfo, calls per second (over the time it flooded),
and the calls answered OK per kind of flow.

With "controlled": true instead of "duration_s", the child prints "ready" once connected, and the
flood is switched by lines on stdin: "on" starts every flow (answered "on" once its calls are
running), "off" cancels every call in flight (answered "off" once they are all gone), "end" ends it
(answered with the summary line). So one child floods in the flooded phases of a run and is silent
in between. "ramp_s" spreads the start of the calls over that long (default: 50 every 10 ms).
"""

from __future__ import annotations

import asyncio
import collections
import json
import pathlib
import sys
import time
import uuid

import grpc
import grpc.aio

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

from .rel_harness import CHANNEL_OPTIONS, dur, md, status_details


async def main(config: dict) -> dict:
    channels = [
        grpc.aio.insecure_channel(config["address"], options=CHANNEL_OPTIONS) for _ in range(config.get("channels", 4))
    ]
    codes: collections.Counter = collections.Counter()
    answered: collections.Counter = collections.Counter()  # OK per kind of flow
    details: collections.Counter = collections.Counter()
    samples: list[str] = []  # the first few unexpected errors, with when they happened
    stop = asyncio.Event()
    begun = time.monotonic()
    prefix = uuid.uuid4().hex[:8]

    async def message(i: int, flow: dict) -> None:
        stub = pb_grpc.BoardServiceStub(channels[i % len(channels)])
        body = "x" * flow.get("body_bytes", 256)
        while not stop.is_set():
            await call(
                stub.SendMessage(
                    pb.SendMessageRequest(to=flow.get("to", "lead"), body=body), metadata=md(flow["token"]), timeout=10
                ),
                "message",
            )

    async def create(i: int, flow: dict) -> None:
        stub = pb_grpc.LeadServiceStub(channels[i % len(channels)])
        n = 0
        while not stop.is_set():
            n += 1
            specs = [
                pb.TaskSpec(id=f"f{prefix}-{i}-{n}-{k}", title="flood", payload=b"p" * 64)
                for k in range(flow.get("batch", 5))
            ]
            await call(
                stub.CreateTasks(pb.CreateTasksRequest(tasks=specs), metadata=md(flow["token"]), timeout=10), "create"
            )

    async def streams(i: int, flow: dict) -> None:
        stub = pb_grpc.TeammateServiceStub(channels[i % len(channels)])
        while not stop.is_set():
            stream = stub.Idle(
                pb.IdleRequest(poll_interval=dur(50), max_idle_polls=1), metadata=md(flow["token"]), timeout=5
            )
            try:
                async for _ in stream:
                    pass
                codes["OK"] += 1
                answered["streams"] += 1
            except grpc.aio.AioRpcError as error:
                codes[error.code().name] += 1

    async def call(awaitable, kind: str) -> None:
        try:
            await awaitable
            codes["OK"] += 1
            answered[kind] += 1
        except grpc.aio.AioRpcError as error:
            codes[error.code().name] += 1
            if error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                reason, retry = status_details(error)
                details[f"{reason}+RetryInfo" if retry is not None else f"{reason}-no-RetryInfo"] += 1
                await asyncio.sleep(0.005)
            else:
                if len(samples) < 5:
                    samples.append(f"{time.monotonic() - begun:.2f}s {error.code().name}: {error.details()}")
                if error.code() == grpc.StatusCode.UNAVAILABLE:
                    await asyncio.sleep(0.05)

    kinds = {"message": message, "create": create, "streams": streams}

    async def start() -> list[asyncio.Future]:
        # Ramp up in waves: a burst of ~1,000 calls opened at the same instant on a fresh connection
        # makes gRPC itself answer some with CANCELLED (seen with a plain grpc.aio server too).
        tasks = []
        calls = sum(flow["concurrency"] for flow in config["flows"])
        pause = max(0.01, config.get("ramp_s", 0.0) / max(1, calls // 50))
        for flow in config["flows"]:
            for i in range(flow["concurrency"]):
                tasks.append(asyncio.ensure_future(kinds[flow["kind"]](i, flow)))
                if len(tasks) % 50 == 0:
                    await asyncio.sleep(pause)
        return tasks

    async def cancel(tasks: list[asyncio.Future]) -> None:
        stop.set()  # no flow starts another call, even one that took its cancellation as an RPC error
        for task in tasks:
            task.cancel()  # cancels the call it awaits, waiting or running at the daemon
        await asyncio.wait(tasks)
        stop.clear()

    flooding_s, started = 0.0, time.monotonic()
    if config.get("controlled"):
        for channel in channels:
            await channel.channel_ready()
        print("ready", flush=True)
        loop = asyncio.get_running_loop()
        tasks: list[asyncio.Future] = []
        while (command := (await loop.run_in_executor(None, sys.stdin.readline)).strip()) not in ("end", ""):
            if command == "on" and not tasks:
                tasks = await start()
                started = time.monotonic()
                print("on", flush=True)
            elif command == "off" and tasks:
                await cancel(tasks)
                tasks = []
                flooding_s += time.monotonic() - started
                print("off", flush=True)
        if tasks:
            await cancel(tasks)
            flooding_s += time.monotonic() - started
    else:
        tasks = await start()
        print("started", flush=True)
        started = time.monotonic()
        await asyncio.sleep(config["duration_s"])  # the flood lasts a fixed time
        stop.set()
        await asyncio.wait(tasks, timeout=15)
        for task in tasks:
            task.cancel()
        flooding_s = time.monotonic() - started
    for channel in channels:
        await channel.close()
    return {
        "codes": dict(codes),
        "answered": dict(answered),
        "refusals": dict(details),
        "samples": samples,
        "seconds": flooding_s,
        "calls_per_s": sum(codes.values()) / flooding_s if flooding_s else 0.0,
    }


if __name__ == "__main__":
    summary = asyncio.run(main(json.loads(pathlib.Path(sys.argv[1]).read_text())))
    print(json.dumps(summary), flush=True)
