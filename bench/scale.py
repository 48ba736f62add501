"""Section 4: does corral hold up as the board and the team grow?

* claim latency p50 with 1k, 100k and 1M tasks on the board. The board is
  grown with corrald's own store functions (`validate.prepare_batch` +
  `store.tasks.create_batch`, 10,000 per transaction) in-process against the
  daemon's database while the daemon is stopped: CreateTasks through the API
  costs about 2.2 s per 10,000 here, over the 2-minute budget for 1M. The
  daemon is restarted on the file for each measurement.
* daemon RSS and unary p99 (GetTask) with 1,000 open Idle streams, held by
  two client processes (default 5 s poll interval, so idle polls run too).
* writer queue depth p99 with 20 busy teammates (from GetStats).
* 1,000 concurrent submissions (CreateTasks of one task, then SendMessage),
  counting every call that does not return OK.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import random
import shutil
import time

import grpc
import grpc.aio

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

from . import e2e
from .daemon import CHANNEL_OPTIONS, Daemon, Lead, bearer, duration, run_async, scratch_dir
from .stats import latency_fields, summarize, summary

BUILD_BATCH = 10_000
OPEN_ATTEMPTS = 20
SUBMIT_ATTEMPTS = 5
UNARY_GAP_S = 0.005


# ---------------------------------------------------------------- board size


def _grow(database, start: int, stop: int) -> float:
    """Adds tasks b{start}..b{stop-1} with the store's own create_batch; returns seconds."""
    from corrald import validate  # noqa: PLC0415 (server internals only for the build)
    from corrald.config import Limits  # noqa: PLC0415
    from corrald.model import TaskSpec
    from corrald.store import tasks  # noqa: PLC0415
    from corrald.store.sqlite import storage  # noqa: PLC0415
    from corrald.txn import Txn

    started = time.perf_counter()
    conn = storage.open_writer(database, synchronous="OFF")
    try:
        for low in range(start, stop, BUILD_BATCH):
            raw = [
                TaskSpec(
                    id=f"b{i}",
                    title=f"bench b{i}",
                    description="",
                    payload=b"x" * 32,
                    depends_on=(),
                    priority=0,
                    max_attempts=0,
                    lease_ms=0,
                    required_role="",
                )
                for i in range(low, min(stop, low + BUILD_BATCH))
            ]
            batch = validate.prepare_batch(raw, Limits(), now_ms=0)
            conn.execute("BEGIN IMMEDIATE")
            tasks.create_batch(Txn(conn, time.time_ns() // 1_000_000), batch)
            conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return time.perf_counter() - started


async def claim_latencies(
    daemon: Daemon, token: str, cycles: int, timeout_s: float | None = None
) -> tuple[list[float], list[float]]:
    """One teammate cycling on Idle + unary: the next claim's arrival from CompleteTask's return (this
    section's figure) and from just before CompleteTask was sent. `timeout_s` bounds each wait for the
    stream (None: no bound).

    The next claim is handed off inside the completion's transaction, so its query runs before CompleteTask
    returns: only the second figure has the claim's own cost in it.
    """
    channel = grpc.aio.insecure_channel(daemon.address, options=CHANNEL_OPTIONS)
    stub, md = pb_grpc.TeammateServiceStub(channel), bearer(token)
    call = stub.Idle(pb.IdleRequest(max_idle_polls=10_000, poll_interval=duration(5)), metadata=md)
    after_return: list[float] = []
    after_send: list[float] = []
    sent = returned = None
    try:
        while len(after_send) < cycles:
            # With a bound, a board out of ready tasks (or a claim that never comes) raises TimeoutError
            # instead of hanging.
            response = await asyncio.wait_for(call.read(), timeout_s)
            if response is grpc.aio.EOF:
                break
            if response.WhichOneof("event") != "claim":
                continue
            arrived = time.monotonic()
            if sent is not None and returned is not None:
                after_return.append(arrived - returned)
                after_send.append(arrived - sent)
            if len(after_send) >= cycles:
                break
            claim = response.claim
            sent = time.monotonic()
            await stub.CompleteTask(
                pb.CompleteTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token), metadata=md, timeout=60
            )
            returned = time.monotonic()
    finally:
        call.cancel()
        await channel.close()
    return after_return, after_send


def board_size(sizes, runs: int, log) -> dict:
    out: dict = {"build": "store functions in-process (daemon stopped), 10,000 tasks per transaction", "sizes": {}}
    root = scratch_dir("scale")
    state = root / "state"
    with Daemon(state_dir=state) as first:  # the daemon lays out the state dir and schema
        token = run_async(_add_one(first, "solo"))
    have = 0
    try:
        for size in sizes.board_sizes:
            build_s = _grow(state / "corral.sqlite3", have, size)
            have = size
            with Daemon(state_dir=state) as daemon:
                results = []
                for _ in range(runs):
                    latencies, _ = run_async(claim_latencies(daemon, token, sizes.claim_samples))
                    results.append({**latency_fields(latencies), "rss_mib": daemon.rss_mib()})
            figure = summarize(results, {"p50_ms": "ms", "p99_ms": "ms", "rss_mib": "MiB"})
            figure["build_s"] = build_s
            out["sizes"][str(size)] = figure
            log(
                f"scale       board {size:>9,} tasks: claim p50 {figure['p50_ms']['median']:6.2f} ms"
                f"  p99 {figure['p99_ms']['median']:6.2f} ms  (built in {build_s:.0f} s)"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


async def _add_one(daemon: Daemon, name: str) -> str:
    lead = Lead(daemon.address, daemon.token)
    try:
        return (await lead.add_teammates([name]))[name]
    finally:
        await lead.close()


# ---------------------------------------------------------------- many streams


def hold_main(address: str, members: list[tuple[str, str]], ready, stop, results) -> None:
    asyncio.run(_hold(address, members, ready, stop, results))


async def _hold(address, members, ready, stop, results) -> None:
    channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
    stub = pb_grpc.TeammateServiceStub(channel)
    ended: list[str] = []
    refused = [0]

    async def hold(token: str) -> None:
        request = pb.IdleRequest(max_idle_polls=10_000)  # default 5 s poll interval: idle polls keep running
        for _ in range(OPEN_ATTEMPTS):
            try:
                async for _ in stub.Idle(request, metadata=bearer(token)):
                    pass
                ended.append("ended")
                return
            except grpc.aio.AioRpcError as error:
                if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    ended.append(error.code().name)
                    return
                refused[0] += 1  # overloaded: back off and reopen, as a client honouring RetryInfo does
                await asyncio.sleep(random.uniform(0.05, 0.5))
        ended.append("RESOURCE_EXHAUSTED")

    tasks = [asyncio.create_task(hold(token)) for _, token in members]
    ready.put(len(tasks))
    await asyncio.get_running_loop().run_in_executor(None, stop.wait, 600)
    early = list(ended)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await channel.close()
    results.put({"ended": early, "refused": refused[0]})


async def _open_streams(lead: Lead, want: int, timeout_s: float = 120) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        open_now = (await lead.stats()).open_streams
        if open_now >= want:
            return open_now
        await asyncio.sleep(0.2)
    return (await lead.stats()).open_streams


async def _unary(lead: Lead, ids: list[str], samples: int) -> list[float]:
    out = []
    for i in range(samples):
        started = time.monotonic()
        await lead.board.GetTask(pb.GetTaskRequest(id=ids[i % len(ids)]), metadata=lead.md, timeout=30)
        out.append(time.monotonic() - started)
        await asyncio.sleep(UNARY_GAP_S)  # spread the samples over several idle-poll rounds
    return out


def many_streams(sizes, runs: int, log) -> dict:
    with Daemon() as daemon:

        async def setup():
            lead = Lead(daemon.address, daemon.token)
            try:
                tokens = await lead.add_teammates([f"s{i}" for i in range(sizes.streams)])
                # Tasks nobody may claim: GetTask targets that leave the streams idle.
                await lead.create(
                    [pb.TaskSpec(id=f"probe{i}", title="probe", required_role="nobody") for i in range(100)]
                )
                return tokens
            finally:
                await lead.close()

        members = list(run_async(setup()).items())
        rss_before = daemon.rss_mib()
        ctx = mp.get_context("spawn")
        ready, results, stop = ctx.Queue(), ctx.Queue(), ctx.Event()
        procs = [
            ctx.Process(target=hold_main, daemon=True, args=(daemon.address, members[i::2], ready, stop, results))
            for i in range(2)
        ]
        for proc in procs:
            proc.start()
        try:
            for _ in procs:
                ready.get(timeout=120)

            async def measure():
                lead = Lead(daemon.address, daemon.token)
                try:
                    opened = await _open_streams(lead, sizes.streams)
                    rss_open = daemon.rss_mib()
                    ids = [f"probe{i}" for i in range(100)]
                    rounds = []
                    for _ in range(runs):
                        cpu, started = daemon.cpu_seconds(), time.monotonic()
                        latencies = await _unary(lead, ids, sizes.unary_samples)
                        busy = (daemon.cpu_seconds() - cpu) / (time.monotonic() - started)
                        rounds.append({**latency_fields(latencies), "daemon_cpu_percent": 100 * busy})
                    return opened, rss_open, rounds, (await lead.stats()).open_streams
                finally:
                    await lead.close()

            opened, rss_open, rounds, still_open = run_async(measure())
            rss_after = daemon.rss_mib()
        finally:
            stop.set()
            held = [results.get(timeout=60) for _ in procs]
            early = [x for h in held for x in h["ended"]]
            for proc in procs:
                proc.join(30)
    out = summarize(rounds, {"p50_ms": "ms", "p99_ms": "ms", "daemon_cpu_percent": "%"})
    out.update(
        {
            "streams_wanted": sizes.streams,
            "streams_open": opened,
            "streams_open_at_end": still_open,
            "streams_ended_early": len(early),
            "ended_codes": sorted(set(early)),
            "open_refused_then_retried": sum(h["refused"] for h in held),
            "rss_mib_before_streams": rss_before,
            "rss_mib_streams_open": rss_open,
            "rss_mib": max(rss_open, rss_after),
        }
    )
    log(
        f"scale       {opened} open Idle streams: RSS {out['rss_mib']:.0f} MiB, GetTask p50 "
        f"{out['p50_ms']['median']:.2f} ms p99 {out['p99_ms']['median']:.2f} ms"
    )
    return out


# ---------------------------------------------------------------- load and bursts


def busy_writer(sizes, runs: int, log) -> dict:
    figure = e2e.measure("independent", sizes.busy_teammates, sizes.busy_tasks, runs, sizes=sizes)
    out = {
        "teammates": sizes.busy_teammates,
        "queue_depth_p99": figure["queue_depth_p99"],
        "throughput": figure["throughput"],
        "mean_batch": figure["mean_batch"],
    }
    log(
        f"scale       {sizes.busy_teammates} busy teammates: writer queue depth p99 "
        f"{out['queue_depth_p99']['median']:.0f}"
    )
    return out


async def _burst(lead: Lead, count: int, run: int, to: str) -> dict:
    async def create(i: int):
        one = pb.TaskSpec(id=f"burst{run}-{i}", title="burst", required_role="nobody")
        return await lead.lead.CreateTasks(pb.CreateTasksRequest(tasks=[one]), metadata=lead.md, timeout=60)

    async def send(i: int):
        return await lead.board.SendMessage(
            pb.SendMessageRequest(to=to, body=f"burst {run} {i}"), metadata=lead.md, timeout=60
        )

    async def submit(call, i: int) -> tuple[str | None, bool]:
        """(code of the first refusal, if any; whether the call finally succeeded)."""
        first = None
        for attempt in range(SUBMIT_ATTEMPTS):
            try:
                await call(i)
                return first, True
            except grpc.aio.AioRpcError as error:
                first = first or error.code().name
                if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    return first, False
                await asyncio.sleep(random.uniform(0.05, 0.25) * (attempt + 1))
        return first, False

    out = {}
    for name, call in (("create_tasks", create), ("send_message", send)):
        started = time.monotonic()
        outcomes = await asyncio.gather(*(submit(call, i) for i in range(count)))
        wall = time.monotonic() - started
        codes = sorted({code for code, _ in outcomes if code})
        out[name] = {
            "failures": sum(1 for code, _ in outcomes if code),
            "codes": codes,
            "wall_s": wall,
            "failures_after_retry": sum(1 for _, ok in outcomes if not ok),
        }
    return out


def submissions(sizes, runs: int, log) -> dict:
    with Daemon() as daemon:

        async def go():
            lead = Lead(daemon.address, daemon.token)
            try:
                await lead.add_teammates(["inbox"])
                bursts = [await _burst(lead, sizes.submissions, run, "inbox") for run in range(runs)]
                stats = await lead.stats()
                return bursts, stats.writer.refused_jobs, stats.writer.queue_depth_p99
            finally:
                await lead.close()

        bursts, refused, depth_p99 = run_async(go())
    out = {"concurrent": sizes.submissions, "refused_jobs": refused, "queue_depth_p99": depth_p99}
    for name in ("create_tasks", "send_message"):
        out[name] = {
            "failures": summary([b[name]["failures"] for b in bursts], "count"),
            "failures_after_retry": summary([b[name]["failures_after_retry"] for b in bursts], "count"),
            "wall_s": summary([b[name]["wall_s"] for b in bursts], "s"),
            "codes": sorted({c for b in bursts for c in b[name]["codes"]}),
        }
    out["failures_total"] = sum(b[name]["failures"] for b in bursts for name in ("create_tasks", "send_message"))
    out["failures_after_retry_total"] = sum(
        b[name]["failures_after_retry"] for b in bursts for name in ("create_tasks", "send_message")
    )
    log(
        f"scale       {sizes.submissions} concurrent submissions x {runs} runs x 2 kinds: "
        f"{out['failures_total']} refused at once (codes "
        f"{sorted(set(out['create_tasks']['codes'] + out['send_message']['codes']))}), "
        f"{out['failures_after_retry_total']} still failing after {SUBMIT_ATTEMPTS} attempts with backoff"
    )
    return out


def run(sizes, runs: int, log) -> dict:
    return {
        "board_size": board_size(sizes, runs, log),
        "streams": many_streams(sizes, runs, log),
        "busy_writer": busy_writer(sizes, runs, log),
        "submissions": submissions(sizes, runs, log),
    }
