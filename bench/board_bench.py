"""Board benchmarks, in-process (no gRPC): what the single writer buys.

1. Claim + complete cycles per second through the Writer with group commit
   (many threads submitting at once) against one transaction per operation
   (a plain WAL connection doing BEGIN IMMEDIATE … COMMIT per claim and per
   complete). Same store functions, same pragmas, synchronous=FULL on both.
   Target: group commit ≥ 5× the per-operation rate.
2. Claim latency p50 on a board of 1,000 tasks against 100,000 tasks (bulk
   created through `tasks.create_tasks` in batches of 10,000). Claiming is an
   indexed lookup, so the target is a ratio ≤ 1.5×.

    .venv/bin/python -m bench.board_bench            # full sizes, 3 repetitions
    .venv/bin/python -m bench.board_bench --quick    # tiny sizes, a few seconds
    .venv/bin/python -m bench.board_bench --reps 5 --out /tmp/board.json

Prints a table and writes JSON (default bench/results/board.json).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable

from corrald.clock import SystemClock
from corrald.config import Limits, WriterConfig
from corrald.store import tasks, team
from corrald.model import TaskSpec, Txn
from corrald.store.schema import open_writer
from corrald.validate import normalize_batch
from corrald.writer import Writer

HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "board.json"
GROUP_COMMIT_TARGET = 5.0
LATENCY_TARGET = 1.5
CREATE_BATCH = 10_000

FULL = {"reps": 3, "threads": 32, "writer_cycles": 4000, "baseline_cycles": 600,
        "sizes": (1_000, 100_000), "samples": 500, "warmup": 50}
QUICK = {"reps": 2, "threads": 8, "writer_cycles": 200, "baseline_cycles": 40,
         "sizes": (200, 2_000), "samples": 40, "warmup": 5}


# ---------------------------------------------------------------- helpers


def _specs(count: int) -> list[TaskSpec]:
    raw = [TaskSpec(id=f"task-{i:07d}", title=f"bench {i}", description="", payload=b"x" * 32, depends_on=(),
                    priority=0, max_attempts=0, lease_ms=0, required_role="") for i in range(count)]
    return [spec for start in range(0, count, CREATE_BATCH)
            for spec in normalize_batch(raw[start:start + CREATE_BATCH], Limits())]


def _bulk_create(call: Callable, count: int) -> None:
    specs = _specs(count)
    for start in range(0, count, CREATE_BATCH):
        chunk = specs[start:start + CREATE_BATCH]
        call(lambda tx, chunk=chunk: tasks.create_tasks(tx, chunk))


def _add_teammates(call: Callable, names: list[str]) -> None:
    def job(tx: Txn) -> None:
        for name in names:
            team.add_teammate(tx, name, (), False, os.urandom(32))
    call(job)


def _summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _writer(path: pathlib.Path) -> Writer:
    writer = Writer(lambda: open_writer(path, synchronous="FULL"), SystemClock(), WriterConfig(synchronous="FULL"))
    writer.start()
    return writer


def fsync_p50_ms(workdir: pathlib.Path, samples: int = 100) -> float:
    """What one durable commit costs on this disk: the lever group commit pulls.

    Group commit saves fsyncs; where fsync is nearly free (a VM disk with a
    write-back cache) both sides are CPU-bound and the ratio shrinks.
    """
    path = workdir / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        timings = []
        for _ in range(samples):
            os.write(fd, b"x" * 4096)
            began = time.perf_counter()
            os.fsync(fd)
            timings.append((time.perf_counter() - began) * 1000)
        return statistics.median(timings)
    finally:
        os.close(fd)
        path.unlink()


# ---------------------------------------------------------------- 1. group commit vs one transaction per op


def writer_cycles_per_s(workdir: pathlib.Path, cycles: int, threads: int) -> tuple[float, float]:
    """(cycles/s, mean batch size): `threads` teammates claim+complete through one Writer."""
    path = workdir / f"writer-{time.monotonic_ns()}.sqlite3"
    writer = _writer(path)
    try:
        _bulk_create(writer.call, cycles)
        names = [f"w{n}" for n in range(threads)]
        _add_teammates(writer.call, names)
        before = writer.stats()
        start = threading.Barrier(threads + 1)
        errors: list[BaseException] = []

        def teammate(name: str) -> None:
            start.wait()
            try:
                while True:
                    grant = writer.call(lambda tx: tasks.claim_next(tx, name, ()))
                    if grant is None:
                        return
                    writer.call(lambda tx: tasks.complete(tx, name, grant.task.id, grant.token, b"ok"))
            except BaseException as error:  # noqa: BLE001 (reported below)
                errors.append(error)

        pool = [threading.Thread(target=teammate, args=(name,)) for name in names]
        for thread in pool:
            thread.start()
        start.wait()
        began = time.perf_counter()
        for thread in pool:
            thread.join()
        elapsed = time.perf_counter() - began
        if errors:
            raise errors[0]
        after = writer.stats()
        done = writer.call(lambda tx: tx.conn.execute("SELECT count(*) FROM tasks WHERE state = 3").fetchone()[0])
        if done != cycles:
            raise RuntimeError(f"writer run completed {done} of {cycles} tasks")
        batch = (after.jobs - before.jobs) / max(1, after.commits - before.commits)
        return cycles / elapsed, batch
    finally:
        writer.close()


def per_op_cycles_per_s(workdir: pathlib.Path, cycles: int) -> float:
    """One plain connection (WAL, synchronous=FULL), BEGIN IMMEDIATE … COMMIT per claim and per complete."""
    path = workdir / f"perop-{time.monotonic_ns()}.sqlite3"
    conn = open_writer(path, synchronous="FULL")
    clock = SystemClock()

    def transaction(job: Callable):
        conn.execute("BEGIN IMMEDIATE")
        try:
            value = job(Txn(conn, clock.now_ms()))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return value

    try:
        _bulk_create(transaction, cycles)
        _add_teammates(transaction, ["w0"])
        began = time.perf_counter()
        for _ in range(cycles):
            grant = transaction(lambda tx: tasks.claim_next(tx, "w0", ()))
            transaction(lambda tx: tasks.complete(tx, "w0", grant.task.id, grant.token, b"ok"))
        elapsed = time.perf_counter() - began
        if transaction(lambda tx: tasks.claim_next(tx, "w0", ())) is not None:
            raise RuntimeError("per-operation run left tasks unclaimed")
        return cycles / elapsed
    finally:
        conn.close()


def group_commit(workdir: pathlib.Path, sizes: dict) -> dict:
    writer_runs, baseline_runs, batches = [], [], []
    for _ in range(sizes["reps"]):
        rate, batch = writer_cycles_per_s(workdir, sizes["writer_cycles"], sizes["threads"])
        writer_runs.append(rate)
        batches.append(batch)
        baseline_runs.append(per_op_cycles_per_s(workdir, sizes["baseline_cycles"]))
    writer, baseline = _summary(writer_runs), _summary(baseline_runs)
    ratio = writer["median"] / baseline["median"]
    return {
        "threads": sizes["threads"],
        "synchronous": "FULL",
        "writer_cycles": sizes["writer_cycles"],
        "baseline_cycles": sizes["baseline_cycles"],
        "writer_cycles_per_s": writer,
        "per_op_txn_cycles_per_s": baseline,
        "writer_mean_batch": statistics.median(batches),
        "ratio": ratio,
        "target_ratio": GROUP_COMMIT_TARGET,
        "meets_target": ratio >= GROUP_COMMIT_TARGET,
    }


# ---------------------------------------------------------------- 2. claim latency vs board size


class _LatencyBoard:
    """A board of `size` independent tasks behind its own Writer, sampled one claim at a time."""

    def __init__(self, workdir: pathlib.Path, size: int) -> None:
        self.size = size
        path = workdir / f"latency-{size}-{time.monotonic_ns()}.sqlite3"
        self.writer = _writer(path)
        began = time.perf_counter()
        _bulk_create(self.writer.call, size)
        _add_teammates(self.writer.call, ["w0"])
        self.create_s = time.perf_counter() - began
        # Measure the steady state, not the aftermath of the bulk load: closing
        # checkpoints the WAL (TRUNCATE), as a daemon restart would.
        self.writer.close()
        self.writer = _writer(path)
        self.claim_ms: list[float] = []
        self.job_ms: list[float] = []
        self.cycle_ms: list[float] = []

    @staticmethod
    def _claim(tx: Txn):
        t0 = time.perf_counter()
        grant = tasks.claim_next(tx, "w0", ())
        return grant, (time.perf_counter() - t0) * 1000

    def sample(self, record: bool) -> None:
        t0 = time.perf_counter()
        grant, inside = self.writer.call(self._claim)
        t1 = time.perf_counter()
        self.writer.call(lambda tx: tasks.complete(tx, "w0", grant.task.id, grant.token, b"ok"))
        t2 = time.perf_counter()
        if record:
            self.claim_ms.append((t1 - t0) * 1000)
            self.job_ms.append(inside)
            self.cycle_ms.append((t2 - t0) * 1000)

    def summary(self) -> dict:
        return {
            "tasks": self.size,
            "create_s": self.create_s,
            "claim_p50_ms": statistics.median(self.claim_ms),
            "claim_p99_ms": _percentile(self.claim_ms, 0.99),
            "claim_job_p50_ms": statistics.median(self.job_ms),
            "cycle_p50_ms": statistics.median(self.cycle_ms),
        }


def claim_latency(workdir: pathlib.Path, sizes: dict) -> dict:
    boards = [_LatencyBoard(workdir, size) for size in sizes["sizes"]]
    small_board, large_board = boards
    try:
        # Alternate the two boards sample by sample so background noise hits both alike.
        for i in range(sizes["warmup"] + sizes["samples"]):
            for board in boards:
                board.sample(record=i >= sizes["warmup"])
        small, large = small_board.summary(), large_board.summary()
    finally:
        for board in boards:
            board.writer.close()
    ratio = large["claim_p50_ms"] / small["claim_p50_ms"]
    return {
        "samples": sizes["samples"],
        "small": small,
        "large": large,
        "ratio": ratio,
        "job_ratio": large["claim_job_p50_ms"] / small["claim_job_p50_ms"],
        "target_ratio": LATENCY_TARGET,
        "meets_target": ratio <= LATENCY_TARGET,
    }


# ---------------------------------------------------------------- report


def _table(result: dict) -> str:
    gc, cl = result["group_commit"], result["claim_latency"]
    w, b = gc["writer_cycles_per_s"], gc["per_op_txn_cycles_per_s"]
    verdict = lambda ok: "meets target" if ok else "MISSES target"  # noqa: E731
    small, large = cl["small"], cl["large"]
    lines = [
        f"board bench ({'quick' if result['quick'] else 'full'}, {result['reps']} reps,"
        f" {result['cpus']} cpus, load {result['loadavg_before'][0]:.1f}, SQLite {result['sqlite']},"
        f" fsync p50 {result['fsync_p50_ms']:.2f} ms)",
        "",
        "claim+complete cycles/s, synchronous=FULL        median       min       max",
        f"  writer, group commit ({gc['threads']:>2} threads)        {w['median']:9.0f} {w['min']:9.0f} {w['max']:9.0f}"
        f"   (mean batch {gc['writer_mean_batch']:.1f})",
        f"  one transaction per operation          {b['median']:9.0f} {b['min']:9.0f} {b['max']:9.0f}",
        f"  ratio {gc['ratio']:.1f}x (target >= {gc['target_ratio']:.0f}x): {verdict(gc['meets_target'])}",
        "",
        f"claim latency p50 (ms)        {small['tasks']:>8} tasks {large['tasks']:>8} tasks   ratio",
        f"  writer.call(claim job)      {small['claim_p50_ms']:14.3f} {large['claim_p50_ms']:14.3f}"
        f"   {cl['ratio']:.2f}x (target <= {cl['target_ratio']}x): {verdict(cl['meets_target'])}",
        f"  inside the transaction      {small['claim_job_p50_ms']:14.3f} {large['claim_job_p50_ms']:14.3f}"
        f"   {cl['job_ratio']:.2f}x",
        f"  claim+complete cycle        {small['cycle_p50_ms']:14.3f} {large['cycle_p50_ms']:14.3f}",
        f"  (bulk create took {small['create_s']:.2f} s and {large['create_s']:.2f} s)",
    ]
    return "\n".join(lines)


def run(quick: bool, reps: int | None, out: pathlib.Path) -> dict:
    sizes = dict(QUICK if quick else FULL)
    if reps:
        sizes["reps"] = reps
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="corral-board-bench-"))
    try:
        result = {
            "benchmark": "board",
            "quick": quick,
            "reps": sizes["reps"],
            "command": " ".join([pathlib.Path(sys.executable).name, "-m", "bench.board_bench", *sys.argv[1:]]),
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "cpus": os.cpu_count(),
            "loadavg_before": list(os.getloadavg()),
            "fsync_p50_ms": fsync_p50_ms(workdir),
            "group_commit": group_commit(workdir, sizes),
            "claim_latency": claim_latency(workdir, sizes),
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.board_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a few seconds (smoke test)")
    parser.add_argument("--reps", type=int, default=None, help="repetitions of the group-commit comparison")
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT, help=f"JSON output (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    if args.reps is not None and args.reps < 1:
        parser.error("--reps must be at least 1")
    result = run(args.quick, args.reps, args.out)
    print(_table(result))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
