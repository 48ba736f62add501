"""Baseline: Huey's SQLite storage (huey.storage.SqliteStorage), enqueue + dequeue pairs.

Each of N processes opens its own storage (WAL, busy timeout 5 s,
`fsync=True` = synchronous FULL, like corrald's default) and runs pairs: enqueue
one message, dequeue one (which may be another process's). A pair is Huey's
nearest equivalent of a claim + complete: the dequeue is the exclusive take.
Huey has no dependencies, leases, tokens or push delivery; its consumer polls.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import sqlite3
import time

from .daemon import scratch_dir
from .stats import latency_fields, summarize

FIELDS = {
    "throughput": "pairs/s",
    "p50_ms": "ms",
    "p99_ms": "ms",
    "empty_dequeues": "count",
    "busy_timeouts": "count",
    "worst_stall_ms": "ms",
}


def worker(path: str, pairs: int, ready, go, deadline_s: float, results) -> None:
    from huey.storage import SqliteStorage  # noqa: PLC0415 (optional: only the bench needs huey)

    storage = SqliteStorage(name="bench", filename=path, fsync=True, journal_mode="wal", timeout=5)
    storage.enqueue(b"warm")
    storage.dequeue()
    payload = b"x" * 200
    latencies, empty, busy, worst = [], 0, 0, 0.0
    ready.put(os.getpid())
    go.wait(120)
    deadline = time.monotonic() + deadline_s
    last = 0.0
    for _ in range(pairs):
        if time.monotonic() > deadline:
            break
        started = time.monotonic()
        try:
            storage.enqueue(payload)
            if storage.dequeue() is None:
                empty += 1
        except sqlite3.OperationalError:  # "database is locked": the 5 s busy timeout ran out
            busy += 1
            worst = max(worst, time.monotonic() - started)
            continue
        last = time.monotonic()
        latencies.append(last - started)
        worst = max(worst, last - started)
    storage.close()
    results.put({"latencies": latencies, "empty": empty, "busy": busy, "worst": worst, "last_done": last})


def measure(processes: int, pairs: int, deadline_s: float) -> dict:
    root = scratch_dir("huey")
    try:
        path = str(root / "huey.sqlite3")
        ctx = mp.get_context("spawn")
        ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
        share = max(1, pairs // processes)
        procs = [
            ctx.Process(target=worker, daemon=True, args=(path, share, ready, go, deadline_s, results))
            for _ in range(processes)
        ]
        for proc in procs:
            proc.start()
        for _ in procs:
            ready.get(timeout=120)
        started = time.monotonic()
        go.set()
        outs = [results.get(timeout=deadline_s + 60) for _ in procs]
        for proc in procs:
            proc.join(30)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    latencies = [x for o in outs for x in o["latencies"]]
    wall = max(max(o["last_done"] for o in outs) - started, 1e-9)
    return {
        "throughput": len(latencies) / wall,
        **latency_fields(latencies),
        "empty_dequeues": sum(o["empty"] for o in outs),
        "busy_timeouts": sum(o["busy"] for o in outs),
        "worst_stall_ms": 1000 * max(o["worst"] for o in outs),
    }


def run(sizes, runs: int, log) -> dict:
    out: dict = {"FULL": {}}
    for processes in sizes.huey_processes:
        results = [measure(processes, sizes.huey_pairs, sizes.run_deadline_s) for _ in range(runs)]
        figure = summarize(results, FIELDS)
        out["FULL"][str(processes)] = figure
        log(
            f"huey        FULL   {processes:>3} procs: {figure['throughput']['median']:8.0f} pairs/s"
            f"  p99 {figure['p99_ms']['median']:7.2f} ms  worst stall {figure['worst_stall_ms']['median']:7.1f} ms"
            f"  busy timeouts {figure['busy_timeouts']['median']:.0f}"
        )
    return out
