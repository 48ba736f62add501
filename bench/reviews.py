"""Section 9: review before done: Session cycles when every task passes a review by a second teammate.

At `sizes.paired_teammates` teammates, all holding role "rev", on the Session
(raw stubs, slots=1, bench.teamworker's `session` load), each variant on a
fresh daemon:

* "plain": N independent tasks.
* "reviewed": the same N tasks, each with `review=ReviewPolicy(reviewer_role="rev")`.
  A completion leaves the task IN_REVIEW; the daemon hands the review's claim
  to a teammate holding "rev" that is not the author, which answers it with
  `verdict=ReviewVerdict(approve=True)` and no result (bench.teamworker).

A cycle is one completion op answered: a reviewed task is two cycles (its work
and its review), so the reviewed run's target is 2N cycles, and it is checked
afterwards that every task is COMPLETED (GetStats `tasks_by_state`). Per variant:
cycles/s, tasks completed/s, cycle p50/p99 (and the reviews' own), daemon CPU
ms per cycle, writer jobs per cycle (GetStats `writer.jobs` over the run, the
tasks' creation not included) and the share of claims handed off (made in a
completion's own transaction). A review handed off in the completing
transaction, like a work claim, costs no writer job of its own: then the
reviewed variant's jobs per cycle stay close to plain's.

Variants alternate within each round (plain first in even rounds); the ratios
reviewed/plain are taken per round, and each figure is the median round.
"""

from __future__ import annotations

from corral.v1 import corral_pb2 as pb

from . import dags, teamworker
from .daemon import Daemon, Lead, lead_call, session_refusal
from .stats import latency_fields, summary

ROLE = "rev"
LOAD = "session"
VARIANTS = ("plain", "reviewed")
CYCLES_PER_TASK = {"plain": 1, "reviewed": 2}  # work, and its review
COMPLETED = pb.TaskState.Name(pb.TASK_STATE_COMPLETED)
FIELDS = {  # field -> unit, summarised over the rounds for each variant
    "throughput": "cycles/s",
    "tasks_per_s": "tasks/s",
    "p50_ms": "ms",
    "p99_ms": "ms",
    "review_p50_ms": "ms",
    "review_p99_ms": "ms",
    "server_cpu_ms": "daemon CPU ms/cycle",
    "jobs_per_cycle": "writer jobs/cycle",
    "jobs_per_task": "writer jobs/task",
    "handoff_share": "share of claims handed off",
}


def _specs(variant: str, count: int) -> list[pb.TaskSpec]:
    specs = dags.specs("independent", count, prefix="t-")
    if variant == "reviewed":
        for spec in specs:
            spec.review.reviewer_role = ROLE
    return specs


def _writer_stats(daemon: Daemon) -> dict:
    stats = lead_call(daemon, lambda lead: lead.stats())
    return {
        "jobs": stats.writer.jobs,
        "commits": stats.writer.commits,
        "claims": stats.claims,
        "claims_handed_off": stats.claims_handed_off,
        "tasks_by_state": dict(stats.tasks_by_state),
    }


def _run(variant: str, teammates: int, tasks: int, sizes) -> dict:
    """One variant on a fresh daemon: N tasks worked through by `teammates` holding role "rev"."""
    with Daemon() as daemon:

        async def setup(lead: Lead) -> tuple[dict[str, str], str | None]:
            tokens = await lead.add_teammates([f"mate{i}" for i in range(teammates)], roles=(ROLE,))
            # Before any task exists, so the probe's stream has nothing to claim.
            return tokens, await session_refusal(daemon.address, next(iter(tokens.values())))

        tokens, refusal = lead_call(daemon, setup)
        if refusal:
            return {"unavailable": refusal}
        lead_call(daemon, lambda lead: lead.create(_specs(variant, tasks)))
        before = _writer_stats(daemon)
        cpu = daemon.cpu_seconds()
        target = tasks * CYCLES_PER_TASK[variant]
        tally = teamworker.run_clients(
            LOAD,
            daemon.address,
            list(tokens.items()),
            target=target,
            deadline_s=sizes.run_deadline_s,
            processes=sizes.client_processes,
        )
        cpu = daemon.cpu_seconds() - cpu
        after = _writer_stats(daemon)
    cycles = max(tally["completed"], 1)
    completed_tasks = after["tasks_by_state"].get(COMPLETED, 0)
    claims = after["claims"] - before["claims"]
    jobs = after["jobs"] - before["jobs"]
    return {
        "throughput": tally["throughput"],
        "tasks_per_s": completed_tasks / tally["wall_s"],
        **latency_fields(tally["latencies"]),
        **latency_fields(tally["review_latencies"], prefix="review_"),
        "server_cpu_ms": 1000 * cpu / cycles,
        "jobs_per_cycle": jobs / cycles,
        "jobs_per_task": jobs / max(completed_tasks, 1),
        "handoff_share": (after["claims_handed_off"] - before["claims_handed_off"]) / claims if claims else 0.0,
        "cycles": tally["completed"],
        "target_cycles": target,
        "reviews": tally["reviews"],
        "tasks": tasks,
        "tasks_completed": completed_tasks,
        "tasks_by_state": after["tasks_by_state"],
        "wall_s": tally["wall_s"],
        "writer_jobs": jobs,
        "commits": after["commits"] - before["commits"],
        "claims": claims,
        "errors": tally["errors"],
        "refused": tally["refused"],
        "timed_out": tally["timed_out"] or completed_tasks < tasks,
        "error_samples": tally["error_samples"],
        **teamworker.spread(tally["per_teammate"]),
    }


def _line(name: str, m: dict) -> str:
    return (
        f"{name} {m['throughput']:6.0f} cycles/s ({m['tasks_per_s']:5.0f} tasks/s, p50 {m['p50_ms']:.2f}"
        f" p99 {m['p99_ms']:.2f} ms, CPU {m['server_cpu_ms']:.2f} ms/cycle, jobs {m['jobs_per_cycle']:.3f}/cycle,"
        f" handed off {100 * m['handoff_share']:.0f} %, errors {m['errors']})"
    )


def run(sizes, runs: int, log) -> dict:
    count = sizes.paired_teammates
    tasks = sizes.tasks(count)
    rounds = []
    for run_index in range(runs):
        order = VARIANTS if run_index % 2 == 0 else VARIANTS[::-1]
        measured = {name: _run(name, count, tasks, sizes) for name in order}
        missing = [m["unavailable"] for m in measured.values() if "unavailable" in m]
        if missing:
            log(f"reviews     no Session in this daemon: {missing[0]}")
            return {"teammates": count, "tasks": tasks, "unavailable": missing[0], "rounds": []}
        plain, reviewed = measured["plain"], measured["reviewed"]
        measured["order"] = list(order)
        measured["ratio"] = reviewed["throughput"] / plain["throughput"]
        measured["tasks_ratio"] = reviewed["tasks_per_s"] / plain["tasks_per_s"]
        measured["jobs_ratio"] = reviewed["jobs_per_cycle"] / plain["jobs_per_cycle"]
        rounds.append(measured)
        log(f"reviews     {count} teammates, {tasks} tasks, round {run_index + 1} ({' then '.join(order)}):")
        log(f"reviews       {_line('plain   ', plain)}")
        log(f"reviews       {_line('reviewed', reviewed)}")
        log(
            f"reviews       reviewed/plain: cycles/s {measured['ratio']:.2f}, tasks/s {measured['tasks_ratio']:.2f},"
            f" jobs/cycle {measured['jobs_ratio']:.2f}"
        )
    out: dict = {
        "teammates": count,
        "tasks": tasks,
        "load": LOAD,
        "role": ROLE,
        "rounds": rounds,
        "ratio": summary([r["ratio"] for r in rounds], "ratio"),
        "tasks_ratio": summary([r["tasks_ratio"] for r in rounds], "ratio"),
        "jobs_ratio": summary([r["jobs_ratio"] for r in rounds], "ratio"),
    }
    for name in VARIANTS:
        out[name] = {field: summary([r[name][field] for r in rounds], unit) for field, unit in FIELDS.items()}
        out[name]["errors"] = sum(r[name]["errors"] for r in rounds)
        out[name]["timed_out"] = any(r[name]["timed_out"] for r in rounds)
        out[name]["tasks_completed"] = [r[name]["tasks_completed"] for r in rounds]
        out[name]["reviews"] = [r[name]["reviews"] for r in rounds]
    return out
