"""Section 1: corral end to end over its Unix socket, and the writer-queue depth under load."""

from __future__ import annotations

from . import dags, teamworker
from .daemon import Daemon, Lead, run_async
from .stats import latency_fields, summarize

FIELDS = {
    "throughput": "cycles/s",
    "p50_ms": "ms",
    "p99_ms": "ms",
    "errors": "count",
    "refused": "count",
    "mean_batch": "jobs/commit",
    "queue_depth_p99": "jobs",
    "server_cpu_ms": "daemon CPU ms/cycle",
}


def _setup(daemon: Daemon, count: int) -> list[tuple[str, str]]:
    async def go() -> dict[str, str]:
        lead = Lead(daemon.address, daemon.token)
        try:
            return await lead.add_teammates([f"mate{i}" for i in range(count)])
        finally:
            await lead.close()

    return list(run_async(go()).items())


def _create(daemon: Daemon, kind: str, count: int, prefix: str) -> float:
    async def go() -> float:
        lead = Lead(daemon.address, daemon.token)
        try:
            return await lead.create(dags.specs(kind, count, prefix=prefix))
        finally:
            await lead.close()

    return run_async(go())


def _writer_stats(daemon: Daemon) -> dict:
    async def go():
        lead = Lead(daemon.address, daemon.token)
        try:
            return await lead.stats()
        finally:
            await lead.close()

    stats = run_async(go())
    return {
        "mean_batch": stats.writer.mean_batch_size,
        "queue_depth_p99": stats.writer.queue_depth_p99,
        "commits": stats.writer.commits,
        "writer_refused_total": stats.writer.refused_jobs,
    }


def measure(kind: str, teammates: int, tasks: int, runs: int, *, sizes, synchronous: str = "FULL") -> dict:
    """Median over `runs` runs on one daemon (fresh tasks each run)."""
    results = []
    with Daemon(synchronous=synchronous) as daemon:
        members = _setup(daemon, teammates)
        for run in range(runs):
            _create(daemon, kind, tasks, prefix=f"r{run}-")
            cpu = daemon.cpu_seconds()
            tally = teamworker.run_clients(
                "corral",
                daemon.address,
                members,
                target=tasks,
                deadline_s=sizes.run_deadline_s,
                processes=sizes.client_processes,
            )
            results.append(
                {
                    "throughput": tally["throughput"],
                    **latency_fields(tally["latencies"]),
                    "errors": tally["errors"],
                    "refused": tally["refused"],
                    "completed": tally["completed"],
                    "timed_out": tally["timed_out"],
                    "error_samples": tally["error_samples"],
                    "server_cpu_ms": 1000 * (daemon.cpu_seconds() - cpu) / max(tally["completed"], 1),
                    **_writer_stats(daemon),
                }
            )
    figure = summarize(results, FIELDS)
    figure["completed"] = [r["completed"] for r in results]
    figure["timed_out"] = any(r["timed_out"] for r in results)
    figure["error_samples"] = [s for r in results for s in r["error_samples"]][:3]
    return figure


def run(sizes, runs: int, log) -> dict:
    out: dict = {"FULL": {}, "NORMAL": {}}
    for kind in dags.DAGS:
        out["FULL"][kind] = {}
        for count in sizes.teammates:
            figure = measure(kind, count, sizes.tasks(count), runs, sizes=sizes)
            out["FULL"][kind][str(count)] = figure
            log(
                f"corral e2e  {kind:<11} {count:>4} teammates: {figure['throughput']['median']:8.0f} cycles/s"
                f"  p50 {figure['p50_ms']['median']:6.2f} ms  p99 {figure['p99_ms']['median']:6.2f} ms"
            )
    count = sizes.normal_at
    figure = measure("independent", count, sizes.tasks(count), runs, sizes=sizes, synchronous="NORMAL")
    out["NORMAL"]["independent"] = {str(count): figure}
    log(f"corral e2e  NORMAL      {count:>4} teammates: {figure['throughput']['median']:8.0f} cycles/s")
    return out
