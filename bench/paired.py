"""The throughput targets measured back to back, round by round, at one teammate count.

The section-by-section grid runs each system minutes apart, and on a shared
machine the load drifts in between; a ratio of two such medians mixes the
systems with the drift. Here each round measures, within a minute or two:

* corral on Session, then on Idle + unary (this checkout);
* corral on Idle + unary at ec3c11e (bench.baseline), the code #15 is
  measured against;
* the unary and the bidirectional echo floors;
* the tutorial design at every process count (synchronous=FULL on all sides);
* the Python SDK's own loop on both transports (CORRAL_TRANSPORT), for the
  record: what a `corral.aio` teammate gets, not a target.

Ratios are taken within the round; each figure is the median round.
"""

from __future__ import annotations

import contextlib

from . import baseline, e2e, grpc_floor, tutorial
from .stats import summary

CORRAL = ("session", "idle", "before", "sdk:session", "sdk:idle")
RATIOS = {  # name -> (numerator, denominator) among a round's figures
    "session_vs_tutorial": ("session", "tutorial_best"),
    "session_vs_bidi_floor": ("session", "bidi_floor"),
    "session_vs_before": ("session", "before"),
    "idle_vs_before": ("idle", "before"),
    "idle_vs_unary_floor": ("idle", "unary_floor"),
    "session_vs_idle": ("session", "idle"),
}


def _corral(figure: dict) -> dict:
    """The round's figures of one corral measurement (a single run)."""
    out = {
        "throughput": e2e.median(figure),
        "p50_ms": e2e.median(figure, "p50_ms"),
        "p99_ms": e2e.median(figure, "p99_ms"),
        "cpu_ms": e2e.median(figure, "server_cpu_ms"),
        "jobs_per_cycle": e2e.median(figure, "jobs_per_cycle"),
        "errors": e2e.median(figure, "errors"),
        "per_teammate_min_max": figure["per_teammate_min_max"],
    }
    for field in e2e.OPTIONAL:
        out[field] = e2e.median(figure, field) if figure.get(field) else None
    return out


def _round(count: int, sizes, before_path: str | None) -> dict:
    tasks = sizes.tasks(count)

    def corral(transport: str, pythonpath: str | None = None) -> dict:
        figure = e2e.measure("independent", count, tasks, 1, sizes=sizes, transport=transport, pythonpath=pythonpath)
        return _corral(figure) if e2e.available(figure) else {"unavailable": figure["unavailable"]}

    measured: dict = {"session": corral("session"), "idle": corral("idle")}
    measured["before"] = corral("idle", before_path) if before_path else None
    with grpc_floor.EchoServer() as server:
        for key, kind in (("unary_floor", "echo"), ("bidi_floor", "echo_bidi")):
            measured[key] = grpc_floor.measure(server, kind, count, tasks, 1, sizes)["throughput"]["median"]
    tut = {
        str(n): tutorial.measure("independent", n, sizes.tutorial_tasks, "FULL", sizes.run_deadline_s)
        for n in sizes.tutorial_processes
    }
    best = max(tut, key=lambda n: tut[n]["throughput"])
    measured |= {
        "tutorial": {n: t["throughput"] for n, t in tut.items()},
        "tutorial_best_processes": best,
        "tutorial_best": tut[best]["throughput"],
        "tutorial_worst_stall_ms": max(t["worst_stall_ms"] for t in tut.values()),
    }
    for transport in ("session", "idle"):
        measured[f"sdk:{transport}"] = corral(f"sdk:{transport}") if transport in sizes.sdk_transports else None
    rates = {k: _rate(measured.get(k)) for k in (*CORRAL, "unary_floor", "bidi_floor", "tutorial_best")}
    measured["ratios"] = {
        name: rates[top] / rates[bottom] if rates[top] and rates[bottom] else None
        for name, (top, bottom) in RATIOS.items()
    }
    return measured


def _rate(value) -> float | None:
    if isinstance(value, dict):
        return value.get("throughput")
    return value


def _summary(values: list, unit: str) -> dict | None:
    """The median round, or None when a round lacks the figure (a transport the daemon does not serve)."""
    if not values or any(v is None for v in values):
        return None
    return summary(values, unit)


def run(sizes, runs: int, log) -> dict:
    count = sizes.paired_teammates
    rounds = []
    with contextlib.ExitStack() as stack:
        try:
            before_path, before_missing = baseline.pythonpath(stack.enter_context(baseline.checkout())), None
        except baseline.Unavailable as error:
            before_path, before_missing = None, str(error)
            log(f"paired      no Idle + unary at {baseline.COMMIT} in this run: {before_missing}")
        for _ in range(runs):
            rounds.append(_round(count, sizes, before_path))
            log(_line(count, rounds[-1]))
    out: dict = {
        "teammates": count,
        "tasks": sizes.tasks(count),
        "baseline_commit": baseline.COMMIT,
        "baseline_missing": before_missing,
        "earlier_run": baseline.EARLIER_RUN,
        "rounds": rounds,
        "ratios": {name: _summary([r["ratios"][name] for r in rounds], "ratio") for name in RATIOS},
    }
    for key in CORRAL:
        figures = [r[key] if r[key] and "unavailable" not in r[key] else None for r in rounds]
        out[key] = {
            field: _summary([f[field] if f else None for f in figures], unit)
            for field, unit in (
                ("throughput", "cycles/s"),
                ("p99_ms", "ms"),
                ("cpu_ms", "daemon CPU ms/cycle"),
                ("jobs_per_cycle", "writer jobs/cycle"),
                ("max_over_min", "per-teammate completions max/min"),
                ("handoff_share", "share"),
            )
        }
        out[key]["per_teammate_min_max"] = [span for f in figures if f for span in f["per_teammate_min_max"]]
        missing = [r[key]["unavailable"] for r in rounds if r[key] and "unavailable" in r[key]]
        if missing:
            out[key]["unavailable"] = missing[0]
    for key in ("unary_floor", "bidi_floor", "tutorial_best"):
        out[key] = summary([r[key] for r in rounds], "cycles/s")
    return out


def _line(count: int, r: dict) -> str:
    def rate(key: str) -> str:
        value = _rate(r.get(key))
        return f"{value:6.0f}" if value else "   n/a"

    ratios = ", ".join(f"{name} {value:.2f}" for name, value in r["ratios"].items() if value is not None)
    return (
        f"paired      {count} teammates: session {rate('session')}, idle {rate('idle')}, idle@{baseline.COMMIT}"
        f" {rate('before')}, unary floor {rate('unary_floor')}, bidi floor {rate('bidi_floor')}, tutorial best"
        f" {rate('tutorial_best')} ({r['tutorial_best_processes']} procs), sdk session {rate('sdk:session')},"
        f" sdk idle {rate('sdk:idle')} cycles/s -> {ratios}"
    )
