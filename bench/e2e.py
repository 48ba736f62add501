"""Section 1: corral end to end over its Unix socket, on both transports, and the writer-queue depth under load.

Transports (bench.teamworker): `idle` is the Idle stream + unary CompleteTask,
`session` the Session stream; `sdk:idle` and `sdk:session` are the Python
SDK's own loop with CORRAL_TRANSPORT set to either. A daemon that does not
serve Session gets its Session figures recorded as unavailable (with how it
refused), not failed.
"""

from __future__ import annotations

import contextlib
import sqlite3

from . import dags, teamworker
from .daemon import Daemon, Lead, run_async, session_refusal
from .stats import latency_fields, summarize, summary

TRANSPORTS = ("idle", "session")
LOADS = {  # transport -> (teamworker load, CORRAL_TRANSPORT for the SDK)
    "idle": ("idle", ""),
    "session": ("session", ""),
    "sdk:idle": ("sdk", "idle"),
    "sdk:session": ("sdk", "session"),
}
FIELDS = {
    "throughput": "cycles/s",
    "p50_ms": "ms",
    "p99_ms": "ms",
    "errors": "count",
    "refused": "count",
    "mean_batch": "jobs/commit",
    "queue_depth_p99": "jobs",
    "server_cpu_ms": "daemon CPU ms/cycle",
    "jobs_per_cycle": "writer jobs/cycle",
    "session_ops_per_cycle": "Session ops recorded/cycle",
}
# Figures a run may not have (None): they are summarised only when every run has them.
OPTIONAL = {
    "handoff_share": "share of claims handed off (GetStats claims_handed_off / claims)",
    "max_over_min": "per-teammate completions max/min",
}


def _setup(daemon: Daemon, count: int, session: bool) -> tuple[list[tuple[str, str]], str | None]:
    """The teammates' (name, token), and why the daemon refuses Session (None: it serves it, or not asked)."""

    async def go() -> tuple[dict[str, str], str | None]:
        lead = Lead(daemon.address, daemon.token)
        try:
            tokens = await lead.add_teammates([f"mate{i}" for i in range(count)])
        finally:
            await lead.close()
        # Before any task exists, so the probe's stream has nothing to claim.
        refusal = await session_refusal(daemon.address, next(iter(tokens.values()))) if session else None
        return tokens, refusal

    tokens, refusal = run_async(go())
    return list(tokens.items()), refusal


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
        "jobs": stats.writer.jobs,
        "writer_refused_total": stats.writer.refused_jobs,
        # 0 from a daemon older than these counters.
        "claims": stats.claims,
        "claims_handed_off": stats.claims_handed_off,
    }


def _session_ops(daemon: Daemon) -> int:
    """Session ops the daemon has recorded (table session_ops): one per op, none for Idle + unary
    calls (the request ids of unary writes, kept there too under their RPC's name, left out).

    Read from the database file (read-only), so it tells which transport a
    client really used, the SDK's included; 0 for a daemon without the table.
    """
    database = daemon.state_dir / "corral.sqlite3"
    try:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30)) as conn:
            return conn.execute("SELECT count(*) FROM session_ops WHERE instr(op_id, char(31)) = 0").fetchone()[0]
    except sqlite3.OperationalError:  # no such table: a daemon older than the Session stream
        return 0


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole > 0 else None


def _optional(results: list[dict], fields: dict[str, str]) -> dict:
    return {
        field: summary([r[field] for r in results], unit) if all(r[field] is not None for r in results) else None
        for field, unit in fields.items()
    }


def measure(
    kind: str,
    teammates: int,
    tasks: int,
    runs: int,
    *,
    sizes,
    synchronous: str = "FULL",
    transport: str = "idle",
    pythonpath: str | None = None,
) -> dict:
    """Median over `runs` runs on one daemon (fresh tasks each run); `pythonpath`: an older corrald."""
    load, sdk_transport = LOADS[transport]
    results = []
    with Daemon(synchronous=synchronous, pythonpath=pythonpath) as daemon:
        members, refusal = _setup(daemon, teammates, session=transport.endswith("session"))
        if refusal:
            return {"unavailable": refusal}
        before, ops_before = _writer_stats(daemon), _session_ops(daemon)
        for run in range(runs):
            _create(daemon, kind, tasks, prefix=f"r{run}-")
            cpu = daemon.cpu_seconds()
            tally = teamworker.run_clients(
                load,
                daemon.address,
                members,
                target=tasks,
                deadline_s=sizes.run_deadline_s,
                processes=sizes.client_processes,
                transport=sdk_transport,
            )
            cpu = daemon.cpu_seconds() - cpu
            after, ops_after = _writer_stats(daemon), _session_ops(daemon)
            done = max(tally["completed"], 1)
            results.append(
                {
                    "throughput": tally["throughput"],
                    **latency_fields(tally["latencies"]),
                    "errors": tally["errors"],
                    "refused": tally["refused"],
                    "completed": tally["completed"],
                    "timed_out": tally["timed_out"],
                    "error_samples": tally["error_samples"],
                    "server_cpu_ms": 1000 * cpu / done,
                    **after,
                    # Every job of the run, the tasks' creation (one job per 10,000) included.
                    "jobs_per_cycle": (after["jobs"] - before["jobs"]) / done,
                    "handoff_share": _share(
                        after["claims_handed_off"] - before["claims_handed_off"], after["claims"] - before["claims"]
                    ),
                    "session_ops_per_cycle": (ops_after - ops_before) / done,
                    **teamworker.spread(tally["per_teammate"]),
                }
            )
            before, ops_before = after, ops_after
    wants_session = transport.endswith("session")
    if any((r["session_ops_per_cycle"] >= 0.5) != wants_session for r in results):
        # The client spoke the other transport (an SDK that ignores CORRAL_TRANSPORT, say): not this row's figure.
        spoke = "Idle + unary" if wants_session else "Session"
        return {"unavailable": f"asked for {transport}, the client spoke {spoke} (table session_ops)"}
    figure = summarize(results, FIELDS) | _optional(results, OPTIONAL)
    figure["completed"] = [r["completed"] for r in results]
    figure["per_teammate_min_max"] = [[r["min_completions"], r["max_completions"]] for r in results]
    figure["timed_out"] = any(r["timed_out"] for r in results)
    figure["error_samples"] = [s for r in results for s in r["error_samples"]][:3]
    return figure


def available(figure: dict | None) -> bool:
    return bool(figure) and "unavailable" not in figure


def median(figure: dict, field: str = "throughput") -> float:
    return figure[field]["median"]


def _grid(transport: str, sizes, runs: int, log) -> dict:
    grid: dict = {"FULL": {}, "NORMAL": {}}
    for kind in sizes.dags:
        grid["FULL"][kind] = {}
        for count in sizes.teammates:
            figure = measure(kind, count, sizes.tasks(count), runs, sizes=sizes, transport=transport)
            if not available(figure):
                log(f"corral e2e  {transport:<7} {figure['unavailable']}")
                return figure
            grid["FULL"][kind][str(count)] = figure
            log(
                f"corral e2e  {transport:<7} {kind:<11} {count:>4} teammates: {median(figure):8.0f} cycles/s"
                f"  p50 {median(figure, 'p50_ms'):6.2f} ms  p99 {median(figure, 'p99_ms'):6.2f} ms"
                f"  CPU {median(figure, 'server_cpu_ms'):.2f} ms/cycle{notes(figure)}"
            )
    if sizes.normal:
        count = sizes.normal_at
        figure = measure(
            "independent", count, sizes.tasks(count), runs, sizes=sizes, synchronous="NORMAL", transport=transport
        )
        grid["NORMAL"]["independent"] = {str(count): figure}
        log(f"corral e2e  {transport:<7} NORMAL      {count:>4} teammates: {median(figure):8.0f} cycles/s")
    return grid


def run(sizes, runs: int, log) -> dict:
    """{transport: {synchronous: {DAG: {teammates: figure}}}}, or {transport: {"unavailable": why}}."""
    return {transport: _grid(transport, sizes, runs, log) for transport in TRANSPORTS}


def notes(figure: dict) -> str:
    """Writer jobs per cycle, per-teammate max/min and the handed-off share, for a log line."""
    parts = [f"jobs {median(figure, 'jobs_per_cycle'):.2f}/cycle"]
    if figure.get("max_over_min"):
        parts.append(f"max/min {median(figure, 'max_over_min'):.2f}")
    if figure.get("handoff_share"):
        parts.append(f"handed off {100 * median(figure, 'handoff_share'):.0f} %")
    return "".join(f"  {p}" for p in parts)
