"""Section 11: live output: what appends cost the Session cycle.

At `sizes.paired_teammates` teammates cycling on the Session (raw stubs, slots=1,
bench.teamworker's `session` load), each variant on a fresh daemon:

* "plain": N independent tasks, nothing else on the board.
* "sdk": the same N tasks while `sizes.output_appenders` other teammates (role
  "log", in a process of their own) each hold a long task and write
  `sizes.output_append_bytes` of output every `sizes.output_append_every_s` the way
  a handler does: `corral.output(text)` inside `corral.aio.run_teammate`, which
  buffers and appends at most every 200 ms over the teammate's Session. This is the
  issue's "32 teammates each appending 1 KiB every 100 ms", and the target.
* "unary": the same writers, each write its own `AppendOutput` call on raw stubs
  (no buffering, a unary call each): what a client without the SDK's batching costs.

The appenders' tasks are claimed before the N tasks exist and need role "log", which
the cycling teammates lack, so the loads never take each other's work. The figure is
cycles/s of the cycling teammates, sdk/plain per round (variants rotate, so each
takes each place in turn), median over the rounds: the target is ≥ 0.90 (appends cost
≤ 10 % of Session cycles/s). Writes and appends made per second are reported, so a
run where the writers fell behind shows as such.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import sqlite3
import time

import grpc.aio

import corral
import corral.aio
from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc
from tests.support import wait_until_async

from . import dags, teamworker
from .daemon import CHANNEL_OPTIONS, Daemon, Lead, bearer, cpu_seconds, duration, lead_call, session_refusal
from .stats import latency_fields, summary

LOG_ROLE = "log"
LOAD = "session"
VARIANTS = ("plain", "sdk", "unary")
LOG_LEASE_S = 3600  # the appenders' tasks outlive any run: no renewals in the way
HOLD_WITHIN_S = 120.0  # the writers' claims of their long tasks
FIELDS = {
    "throughput": "cycles/s",
    "p50_ms": "ms",
    "p99_ms": "ms",
    "server_cpu_ms": "daemon CPU ms/cycle",
    "writes_per_s": "writes/s",
    "appends_per_s": "appends/s",
    "writers_cpu_share": "of a core",
}


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


async def _sdk_writer(address: str, token: str, text: str, every_s: float, stop, tally: dict) -> None:
    """One teammate of the SDK: its handler writes `text` every `every_s` until told to stop."""
    returned = asyncio.Event()

    async def handler(task):
        tally["holding"] += 1
        next_at = time.monotonic()
        while not stop.is_set():
            corral.aio.output(text)
            tally["writes"] += 1
            next_at += every_s
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))  # the load's pace, as above
        returned.set()
        return b"done"

    # The teammate keeps the SDK's own poll interval (a short one would add a check of the
    # board per poll to what is measured); once its handler has returned, it is stopped.
    runner = asyncio.ensure_future(corral.aio.run_teammate(handler, address=address, token=token))
    ended = asyncio.ensure_future(returned.wait())
    await asyncio.wait({runner, ended}, return_when=asyncio.FIRST_COMPLETED)
    if runner.done():  # ended before its handler did: say why instead of hanging
        ended.cancel()
        runner.result()
        raise RuntimeError("a writer's run_teammate ended before its handler returned")
    runner.cancel()
    with contextlib.suppress(asyncio.CancelledError, corral.CorralError):
        await runner


async def _appenders(kind: str, address: str, tokens: list[str], size: int, every_s: float, holding, stop) -> dict:
    tally = {"holding": 0, "appends": 0, "writes": 0, "errors": 0}

    async def report_holding() -> None:
        await wait_until_async(lambda: tally["holding"] >= len(tokens), HOLD_WITHIN_S, "every writer holding its task")
        tally["writes"] = tally["appends"] = 0  # count from here: every writer holds its task
        holding.set()
        begun = time.monotonic()
        await asyncio.to_thread(stop.wait)
        tally["wall_s"] = time.monotonic() - begun

    if kind == "sdk":
        text = "l" * (size - 1) + "\n"
        await asyncio.gather(report_holding(), *(_sdk_writer(address, t, text, every_s, stop, tally) for t in tokens))
    else:
        channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        stub = pb_grpc.TeammateServiceStub(channel)
        try:
            chunk = b"l" * size
            await asyncio.gather(
                report_holding(), *(_append_forever(stub, t, chunk, every_s, stop, tally) for t in tokens)
            )
        finally:
            await channel.close()
        tally["writes"] = tally["appends"]
    return tally


def _appenders_main(kind, address, tokens, size, every_s, holding, stop, results) -> None:
    try:
        results.put(asyncio.run(_appenders(kind, address, tokens, size, every_s, holding, stop)))
    except BaseException as error:  # the driver reports it instead of waiting for a tally
        results.put({"error": repr(error)})


# ---------------------------------------------------------------- one variant


def _run(variant: str, teammates: int, tasks: int, sizes) -> dict:
    appenders = 0 if variant == "plain" else sizes.output_appenders
    with Daemon() as daemon:

        async def setup(lead: Lead):
            tokens = await lead.add_teammates([f"mate{i}" for i in range(teammates)])
            loggers = await lead.add_teammates([f"log{i}" for i in range(appenders)], roles=(LOG_ROLE,))
            return tokens, loggers, await session_refusal(daemon.address, next(iter(tokens.values())))

        tokens, loggers, refusal = lead_call(daemon, setup)
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
            lead_call(daemon, lambda lead: lead.create(logs))
            args = (variant, daemon.address, list(loggers.values()), sizes.output_append_bytes)
            args += (sizes.output_append_every_s,)
            proc = ctx.Process(target=_appenders_main, daemon=True, args=(*args, holding, stop, results))
            proc.start()
            if not holding.wait(120):
                proc.kill()
                raise RuntimeError("the appenders did not all claim their long tasks within 120 s")
        try:
            lead_call(daemon, lambda lead: lead.create(dags.specs("independent", tasks, prefix="t-")))
            cpu, stored, counted = daemon.cpu_seconds(), _appends_stored(daemon), time.monotonic()
            writers_cpu = cpu_seconds(proc.pid) if proc else 0.0
            tally = teamworker.run_clients(
                LOAD,
                daemon.address,
                list(tokens.items()),
                target=tasks,
                deadline_s=sizes.run_deadline_s,
                processes=sizes.client_processes,
            )
            cpu = daemon.cpu_seconds() - cpu
            stored, counted = _appends_stored(daemon) - stored, time.monotonic() - counted
            writers_cpu = cpu_seconds(proc.pid) - writers_cpu if proc else 0.0
        finally:
            stop.set()
            idle = {"appends": 0, "writes": 0, "errors": 0, "wall_s": 1.0}
            appended = results.get(timeout=60) if proc else idle
            if proc:
                proc.join(30)
        if "error" in appended:
            raise RuntimeError(f"the appenders failed: {appended['error']}")
    cycles = max(tally["completed"], 1)
    return {
        "throughput": tally["throughput"],
        **latency_fields(tally["latencies"]),
        "server_cpu_ms": 1000 * cpu / cycles,
        "writes_per_s": appended["writes"] / appended["wall_s"],
        "appends_per_s": stored / counted,  # while the cycling load ran (its processes' start included)
        "writers_cpu_share": writers_cpu / counted,  # of one core: the writers' own process, on the same cores
        "appenders": appenders,
        "append_errors": appended["errors"],
        "cycles": tally["completed"],
        "wall_s": tally["wall_s"],
        "errors": tally["errors"],
        "timed_out": tally["timed_out"],
    }


def _appends_stored(daemon: Daemon) -> int:
    """Appends the daemon stored (one row of output_chunks each), read from its database."""
    with contextlib.closing(sqlite3.connect(daemon.state_dir / "corral.sqlite3")) as conn:
        return conn.execute("SELECT count(*) FROM output_chunks").fetchone()[0]


def run(sizes, runs: int, log) -> dict:
    count = sizes.paired_teammates
    tasks = sizes.tasks(count)
    rounds = []
    for run_index in range(runs):
        shift = run_index % len(VARIANTS)
        order = VARIANTS[shift:] + VARIANTS[:shift]  # each variant takes each place in turn
        measured = {name: _run(name, count, tasks, sizes) for name in order}
        missing = [m["unavailable"] for m in measured.values() if "unavailable" in m]
        if missing:
            log(f"output      no Session in this daemon: {missing[0]}")
            return {"teammates": count, "tasks": tasks, "unavailable": missing[0], "rounds": []}
        plain = measured["plain"]
        measured["order"] = list(order)
        measured["ratio"] = measured["sdk"]["throughput"] / plain["throughput"]
        measured["unary_ratio"] = measured["unary"]["throughput"] / plain["throughput"]
        rounds.append(measured)
        log(f"output      {count} teammates, {tasks} tasks, round {run_index + 1} ({' then '.join(order)}):")
        for name in VARIANTS:
            m = measured[name]
            log(
                f"output        {name:6} {m['throughput']:6.0f} cycles/s (p50 {m['p50_ms']:.2f}"
                f" p99 {m['p99_ms']:.2f} ms, CPU {m['server_cpu_ms']:.3f} ms/cycle, {m['writes_per_s']:.0f} writes/s,"
                f" {m['appends_per_s']:.0f} appends/s, writers' CPU {100 * m['writers_cpu_share']:.0f} % of a core,"
                f" errors {m['errors']}+{m['append_errors']})"
            )
        log(f"output        sdk/plain: cycles/s {measured['ratio']:.3f}; unary/plain {measured['unary_ratio']:.3f}")
    out: dict = {
        "teammates": count,
        "tasks": tasks,
        "load": LOAD,
        "appenders": sizes.output_appenders,
        "append_bytes": sizes.output_append_bytes,
        "append_every_s": sizes.output_append_every_s,
        "rounds": rounds,
        "ratio": summary([r["ratio"] for r in rounds], "ratio"),
        "unary_ratio": summary([r["unary_ratio"] for r in rounds], "ratio"),
    }
    for name in VARIANTS:
        out[name] = {field: summary([r[name][field] for r in rounds], unit) for field, unit in FIELDS.items()}
        out[name]["errors"] = sum(r[name]["errors"] + r[name]["append_errors"] for r in rounds)
        out[name]["timed_out"] = any(r[name]["timed_out"] for r in rounds)
    return out
