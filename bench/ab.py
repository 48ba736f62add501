"""This tree against an earlier commit, round by round: Session cycles at 32 teammates.

    python -m bench.ab COMMIT [--rounds 6] [--tasks 8192] [--stores sqlite,postgres]

`git archive` writes COMMIT's server/ and client/ into a scratch directory
(bench.baseline); its daemon runs with PYTHONPATH pointing there and the same
client processes drive both. Each round runs the two daemons one after the
other on a fresh board, in an order that alternates, on every store asked for
(PostgreSQL: one daemon, its server on the same cores; CORRAL_BENCH_PG_DSN or
127.0.0.1:5432). A round's ratio is after/before; the figures printed are the
medians over rounds, with each round's ratio, daemon CPU per cycle and writer
jobs per cycle. It is the check a refactor of the daemon answers to: its speed
and its CPU per cycle against the commit before it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics
import sys

from . import baseline, e2e, teamworker
from .config import Sizes
from .daemon import Daemon
from .pg_server import SWITCHES_ENV, Store, find_server

TEAMMATES = 32


def _round(store: Store | None, schema: str, pythonpath: str | None, sizes: Sizes) -> dict:
    """One run on a fresh board: SQLite when `store` is None, else one PostgreSQL daemon."""
    if store is None:
        daemon = Daemon(pythonpath=pythonpath)
    else:
        daemon = Daemon(extra_args=store.args(schema), env={SWITCHES_ENV: ""}, pythonpath=pythonpath)
    tasks = sizes.tasks(TEAMMATES)
    with daemon as running:
        members, refusal = e2e._setup(running, TEAMMATES, session=True)  # noqa: SLF001 (the grid's own setup)
        if refusal:
            raise SystemExit(f"that daemon serves no Session: {refusal}")
        e2e._create(running, "independent", tasks, prefix="t-")  # noqa: SLF001
        before, cpu = e2e._writer_stats(running), running.cpu_seconds()  # noqa: SLF001
        tally = teamworker.run_clients(
            "session",
            [running.address],
            members,
            target=tasks,
            deadline_s=sizes.run_deadline_s,
            processes=sizes.client_processes,
        )
        cpu, after = running.cpu_seconds() - cpu, e2e._writer_stats(running)  # noqa: SLF001
    done = max(tally["completed"], 1)
    return {
        "cycles_per_s": tally["throughput"],
        "cpu_ms_per_cycle": 1000 * cpu / done,
        "jobs_per_cycle": (after["jobs"] - before["jobs"]) / done,
        "errors": tally["errors"],
    }


def _median(rounds: list[dict], side: str, field: str) -> float:
    return statistics.median(r[side][field] for r in rounds)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("commit", help="the commit to measure this tree against")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--tasks", type=int, default=8192, help="tasks per run (default 8192)")
    parser.add_argument("--stores", default="sqlite,postgres")
    args = parser.parse_args(argv)
    sizes = dataclasses.replace(Sizes(), tasks_for=((TEAMMATES, args.tasks),))
    stores = [name for name in args.stores.split(",") if name]
    server = None
    if "postgres" in stores:
        server, why = find_server()
        if server is None:
            raise SystemExit(f"no PostgreSQL server to measure on: {why}")
    results: dict[str, list[dict]] = {name: [] for name in stores}
    with baseline.checkout(args.commit) as root, Store(server) if server else contextlib.nullcontext() as store:
        before = baseline.pythonpath(root)
        for number in range(args.rounds):
            for name in stores:
                sides = [("before", before), ("after", None)]
                measured = {}
                for side, path in sides if number % 2 == 0 else sides[::-1]:
                    target = store if name == "postgres" else None
                    measured[side] = _round(target, f"ab{number}_{side}", path, sizes)
                measured["ratio"] = measured["after"]["cycles_per_s"] / measured["before"]["cycles_per_s"]
                results[name].append(measured)
                print(f"round {number} {name}: {json.dumps(measured)}", flush=True)
    for name, rounds in results.items():
        ratios = [r["ratio"] for r in rounds]
        print(
            f"{name}: cycles/s after {_median(rounds, 'after', 'cycles_per_s'):.0f},"
            f" before {_median(rounds, 'before', 'cycles_per_s'):.0f};"
            f" ratio median {statistics.median(ratios):.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f});"
            f" daemon CPU ms/cycle after {_median(rounds, 'after', 'cpu_ms_per_cycle'):.4f},"
            f" before {_median(rounds, 'before', 'cpu_ms_per_cycle'):.4f};"
            f" writer jobs/cycle after {_median(rounds, 'after', 'jobs_per_cycle'):.3f},"
            f" before {_median(rounds, 'before', 'jobs_per_cycle'):.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
