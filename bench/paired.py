"""Targets (1) measured back to back: corral, the gRPC floor and the tutorial design, round by round.

The section-by-section grid runs each system minutes apart, and on a shared
machine the load drifts in between; a ratio of two such medians mixes the
systems with the drift. Here each round measures corral at the target
teammate count, then the echo floor at the same count, then the tutorial
design at every process count (synchronous=FULL on both sides), and the
ratios are taken within the round. The figure is the median round.
"""

from __future__ import annotations

from . import e2e, grpc_floor, teamworker, tutorial
from .stats import summary


def _echo(count: int, sizes) -> float:
    members = [(f"m{i}", f"token-{i}") for i in range(count)]
    with grpc_floor.EchoServer() as server:
        tally = teamworker.run_clients(
            "echo",
            server.address,
            members,
            target=sizes.tasks(count),
            deadline_s=sizes.run_deadline_s,
            processes=sizes.client_processes,
        )
    return tally["throughput"]


def run(sizes, runs: int, log) -> dict:
    count = sizes.paired_teammates
    rounds = []
    for _ in range(runs):
        corral = e2e.measure("independent", count, sizes.tasks(count), 1, sizes=sizes)
        mine = corral["throughput"]["median"]
        floor = _echo(count, sizes)
        tut = {
            str(n): tutorial.measure("independent", n, sizes.tutorial_tasks, "FULL", sizes.run_deadline_s)
            for n in sizes.tutorial_processes
        }
        best = max(tut, key=lambda n: tut[n]["throughput"])
        rounds.append(
            {
                "corral": mine,
                "corral_cpu_ms": corral["server_cpu_ms"]["median"],
                "floor": floor,
                "tutorial": {n: t["throughput"] for n, t in tut.items()},
                "tutorial_best_processes": best,
                "tutorial_best": tut[best]["throughput"],
                "tutorial_worst_stall_ms": max(t["worst_stall_ms"] for t in tut.values()),
                "vs_floor": mine / floor,
                "vs_tutorial": mine / tut[best]["throughput"],
            }
        )
        log(
            f"paired      {count} teammates: corral {mine:6.0f}, floor {floor:6.0f}, tutorial best "
            f"{tut[best]['throughput']:6.0f} ({best} procs) cycles/s -> {mine / floor:.2f}x floor, "
            f"{mine / tut[best]['throughput']:.2f}x tutorial"
        )
    return {
        "teammates": count,
        "rounds": rounds,
        "corral": summary([r["corral"] for r in rounds], "cycles/s"),
        "floor": summary([r["floor"] for r in rounds], "cycles/s"),
        "tutorial_best": summary([r["tutorial_best"] for r in rounds], "cycles/s"),
        "vs_floor": summary([r["vs_floor"] for r in rounds], "ratio"),
        "vs_tutorial": summary([r["vs_tutorial"] for r in rounds], "ratio"),
    }
