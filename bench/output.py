"""Section 11: live output: what appends cost the Session cycle.

At `sizes.paired_teammates` teammates cycling on the Session (raw stubs, slots=1,
bench.teamworker's `session` load), each variant on a fresh daemon:

* "plain": N independent tasks, nothing else on the board.
* "appending": the same N tasks while `sizes.output_appenders` other teammates
  (role "log", in a process of their own) each hold a long task and append
  `sizes.output_append_bytes` to its output every `sizes.output_append_every_s`
  with `AppendOutput`: 32 teammates writing 1 KiB every 100 ms, as an agent's log
  would. Their tasks are claimed before the N tasks exist and need role "log",
  which the cycling teammates lack, so the two loads never take each other's work.

The figure is cycles/s of the cycling teammates, appending/plain per round
(variants alternate, plain first in even rounds), median over the rounds: the
target is ≥ 0.90 (appends cost ≤ 10 % of Session cycles/s). The appends made per
second are reported too, so a run where the appenders fell behind shows as such.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time

import grpc.aio

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

from . import dags, teamworker
from .daemon import CHANNEL_OPTIONS, Daemon, Lead, bearer, duration, run_async, session_refusal
from .stats import latency_fields, summary

LOG_ROLE = "log"
LOAD = "session"
VARIANTS = ("plain", "appending")
LOG_LEASE_S = 3600  # the appenders' tasks outlive any run: no renewals in the way
FIELDS = {
    "throughput": "cycles/s",
    "p50_ms": "ms",
    "p99_ms": "ms",
    "server_cpu_ms": "daemon CPU ms/cycle",
    "appends_per_s": "appends/s",
}


def _lead_call(daemon: Daemon, work):
    async def go():
        lead = Lead(daemon.address, daemon.token)
        try:
            return await work(lead)
        finally:
            await lead.close()

    return run_async(go())


# ---------------------------------------------------------------- the appenders' process


async def _append_forever(stub, token: str, chunk: bytes, every_s: float, stop, tally: dict) -> None:
    md = bearer(token)
    request = pb.IdleRequest(slots=1, max_idle_polls=10_000, poll_interval=duration(5))
    stream = stub.Idle(request, metadata=md)
    async for response in stream:
        if response.WhichOneof("event") == "claim":
            claim = response.claim
            break
    tally["holding"] += 1
    append = pb.AppendOutputRequest(task_id=claim.task.id, claim_token=claim.claim_token, data=chunk)
    next_at = time.monotonic()
    while not stop.is_set():
        try:
            await stub.AppendOutput(append, metadata=md, timeout=60)
            tally["appends"] += 1
        except grpc.aio.AioRpcError:
            tally["errors"] += 1
        next_at += every_s
        # Pacing is the load's definition (an agent's log line every `every_s`), not a wait for a state.
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    stream.cancel()


async def _appenders(address: str, tokens: list[str], chunk: bytes, every_s: float, holding, stop) -> dict:
    channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
    stub = pb_grpc.TeammateServiceStub(channel)
    tally = {"holding": 0, "appends": 0, "errors": 0}

    async def report_holding() -> None:
        while tally["holding"] < len(tokens):
            await asyncio.sleep(0.01)
        holding.set()

    try:
        started = time.monotonic()
        await asyncio.gather(report_holding(), *(_append_forever(stub, t, chunk, every_s, stop, tally) for t in tokens))
        tally["wall_s"] = time.monotonic() - started
        return tally
    finally:
        await channel.close()


def _appenders_main(address, tokens, chunk_bytes, every_s, holding, stop, results) -> None:
    try:
        results.put(asyncio.run(_appenders(address, tokens, b"l" * chunk_bytes, every_s, holding, stop)))
    except BaseException as error:  # the driver reports it instead of waiting for a tally
        results.put({"error": repr(error)})


# ---------------------------------------------------------------- one variant


def _run(variant: str, teammates: int, tasks: int, sizes) -> dict:
    appenders = sizes.output_appenders if variant == "appending" else 0
    with Daemon() as daemon:

        async def setup(lead: Lead):
            tokens = await lead.add_teammates([f"mate{i}" for i in range(teammates)])
            loggers = await lead.add_teammates([f"log{i}" for i in range(appenders)], roles=(LOG_ROLE,))
            return tokens, loggers, await session_refusal(daemon.address, next(iter(tokens.values())))

        tokens, loggers, refusal = _lead_call(daemon, setup)
        if refusal:
            return {"unavailable": refusal}
        ctx = mp.get_context("spawn")
        holding, stop, results = ctx.Event(), ctx.Event(), ctx.Queue()
        proc = None
        if appenders:
            logs = [
                pb.TaskSpec(
                    id=f"log-{i}", title="a long task", required_role=LOG_ROLE, lease_duration=duration(LOG_LEASE_S)
                )
                for i in range(appenders)
            ]
            _lead_call(daemon, lambda lead: lead.create(logs))
            args = (daemon.address, list(loggers.values()), sizes.output_append_bytes, sizes.output_append_every_s)
            proc = ctx.Process(target=_appenders_main, daemon=True, args=(*args, holding, stop, results))
            proc.start()
            if not holding.wait(120):
                proc.kill()
                raise RuntimeError("the appenders did not all claim their long tasks within 120 s")
        try:
            _lead_call(daemon, lambda lead: lead.create(dags.specs("independent", tasks, prefix="t-")))
            cpu = daemon.cpu_seconds()
            tally = teamworker.run_clients(
                LOAD,
                daemon.address,
                list(tokens.items()),
                target=tasks,
                deadline_s=sizes.run_deadline_s,
                processes=sizes.client_processes,
            )
            cpu = daemon.cpu_seconds() - cpu
        finally:
            stop.set()
            appended = results.get(timeout=60) if proc else {"appends": 0, "errors": 0, "wall_s": 1.0}
            if proc:
                proc.join(30)
        if "error" in appended:
            raise RuntimeError(f"the appenders failed: {appended['error']}")
    cycles = max(tally["completed"], 1)
    return {
        "throughput": tally["throughput"],
        **latency_fields(tally["latencies"]),
        "server_cpu_ms": 1000 * cpu / cycles,
        "appends_per_s": appended["appends"] / appended["wall_s"],
        "appenders": appenders,
        "append_errors": appended["errors"],
        "cycles": tally["completed"],
        "wall_s": tally["wall_s"],
        "errors": tally["errors"],
        "timed_out": tally["timed_out"],
    }


def run(sizes, runs: int, log) -> dict:
    count = sizes.paired_teammates
    tasks = sizes.tasks(count)
    rounds = []
    for run_index in range(runs):
        order = VARIANTS if run_index % 2 == 0 else VARIANTS[::-1]
        measured = {name: _run(name, count, tasks, sizes) for name in order}
        missing = [m["unavailable"] for m in measured.values() if "unavailable" in m]
        if missing:
            log(f"output      no Session in this daemon: {missing[0]}")
            return {"teammates": count, "tasks": tasks, "unavailable": missing[0], "rounds": []}
        plain, appending = measured["plain"], measured["appending"]
        measured["order"] = list(order)
        measured["ratio"] = appending["throughput"] / plain["throughput"]
        rounds.append(measured)
        log(f"output      {count} teammates, {tasks} tasks, round {run_index + 1} ({' then '.join(order)}):")
        for name in VARIANTS:
            m = measured[name]
            log(
                f"output        {name:9} {m['throughput']:6.0f} cycles/s (p50 {m['p50_ms']:.2f}"
                f" p99 {m['p99_ms']:.2f} ms, CPU {m['server_cpu_ms']:.3f} ms/cycle,"
                f" {m['appends_per_s']:.0f} appends/s, errors {m['errors']}+{m['append_errors']})"
            )
        log(f"output        appending/plain: cycles/s {measured['ratio']:.3f}")
    out: dict = {
        "teammates": count,
        "tasks": tasks,
        "load": LOAD,
        "appenders": sizes.output_appenders,
        "append_bytes": sizes.output_append_bytes,
        "append_every_s": sizes.output_append_every_s,
        "rounds": rounds,
        "ratio": summary([r["ratio"] for r in rounds], "ratio"),
    }
    for name in VARIANTS:
        out[name] = {field: summary([r[name][field] for r in rounds], unit) for field, unit in FIELDS.items()}
        out[name]["errors"] = sum(r[name]["errors"] + r[name]["append_errors"] for r in rounds)
        out[name]["timed_out"] = any(r[name]["timed_out"] for r in rounds)
    return out
