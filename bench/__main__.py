"""`python -m bench`: run the benchmark sections, write JSON results and docs/benchmarks.md.

corral is measured on both transports (Session, and Idle + unary), beside the
unary and bidirectional echo floors, the writer floor, the tutorial design and
Huey; the code of ec3c11e (bench/baseline.py) runs in the same run as the
baseline of #15. The `paired` section holds the throughput targets as ratios
within back-to-back rounds.

python -m bench                  # everything, 3 runs per figure (takes a while)
python -m bench --quick          # tiny sizes, for the smoke test
python -m bench --only latency   # one section (repeatable; comma-separated works too)
python -m bench --only reviews   # Session cycles of tasks that pass a review, against plain tasks
python -m bench --only leases    # claims on a board whose tasks hold and want path leases
python -m bench --only proposals # claims beside PROPOSED tasks; AddDependencies on a 100,000-task board
python -m bench --only output    # Session cycles while 32 teammates append 1 KiB of output every 100 ms
python -m bench --only postgres  # PostgreSQL boards (CORRAL_BENCH_PG_DSN, default 127.0.0.1:5432)
python -m bench --runs 5
python -m bench --report-only    # rebuild docs/benchmarks.md from bench/results/*.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import shlex
import subprocess
import sys
import time

from . import (
    big_batch,
    config,
    e2e,
    grpc_floor,
    huey_baseline,
    latency,
    leases,
    mcp,
    output,
    paired,
    postgres,
    proposals,
    report,
    reviews,
    scale,
    semantics,
    tutorial,
    web,
    writer_floor,
)
from .stats import machine

SECTIONS = {
    "e2e": e2e.run,
    "grpc_floor": grpc_floor.run,
    "writer_floor": writer_floor.run,
    "tutorial": tutorial.run,
    "huey": huey_baseline.run,
    "paired": paired.run,
    "latency": latency.run,
    "scale": scale.run,
    "big_batch": big_batch.run,
    "semantics": semantics.run,
    "reviews": reviews.run,
    "proposals": proposals.run,
    "output": output.run,
    "leases": leases.run,
    "web": web.run,
    "mcp": mcp.run,
    "postgres": postgres.run,
}
HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, well under a minute (smoke test)")
    parser.add_argument(
        "--only", action="append", default=[], metavar="NAME", help=f"run only these sections: {', '.join(SECTIONS)}"
    )
    parser.add_argument("--runs", type=int, default=None, help="runs per figure (default 3; 1 with --quick)")
    parser.add_argument(
        "--results-dir",
        type=pathlib.Path,
        default=None,
        help="where <section>.json goes (default bench/results, or bench/results/quick)",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="measure nothing: rebuild the Markdown and targets from the JSON already in --results-dir",
    )
    parser.add_argument(
        "--docs",
        type=pathlib.Path,
        default=None,
        help="Markdown report (default docs/benchmarks.md; <results-dir>/benchmarks.md with --quick)",
    )
    args = parser.parse_args(argv)
    only = [name for value in args.only for name in value.split(",") if name]
    unknown = [name for name in only if name not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    args.only = only or list(SECTIONS)
    if args.runs is not None and args.runs < 1:
        parser.error("--runs must be at least 1")
    args.runs = args.runs or (1 if args.quick else 3)
    args.results_dir = args.results_dir or (HERE / "results" / "quick" if args.quick else HERE / "results")
    args.docs = args.docs or (args.results_dir / "benchmarks.md" if args.quick else REPO / "docs" / "benchmarks.md")
    return args


def _code_version() -> dict:
    """Which corral the numbers belong to: the commit, and any uncommitted server/client files."""

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=False
            ).stdout.strip()
        except OSError:
            return ""

    # line[2:].strip(): git() strips its output, so the first line has lost the leading blank of " M path".
    dirty = [line[2:].strip() for line in git("status", "--porcelain", "--", "server", "client", "proto").splitlines()]
    return {"commit": git("rev-parse", "--short", "HEAD") or "unknown", "uncommitted": dirty}


def _log(line: str) -> None:
    print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parse(argv)
    sizes = config.QUICK if args.quick else config.FULL
    args.results_dir.mkdir(parents=True, exist_ok=True)
    command = "python -m bench" + ("" if not argv else " " + shlex.join(argv))
    context = {
        "machine": machine(),
        "code": _code_version(),
        "command": command,
        "runs": args.runs,
        "quick": args.quick,
        "sizes": dataclasses.asdict(sizes),
    }
    if args.report_only:
        previous = args.results_dir / "summary.json"
        if previous.exists():  # keep the context of the run that measured the numbers
            context = {k: v for k, v in json.loads(previous.read_text()).items() if k != "targets"}
        args.only = []
    else:
        _log(f"corral bench: {', '.join(args.only)}; {args.runs} run(s) per figure; results in {args.results_dir}")
    for name in args.only:
        started = time.monotonic()
        result = SECTIONS[name](sizes, args.runs, _log)
        document = {"section": name, **context, "elapsed_s": time.monotonic() - started, "results": result}
        (args.results_dir / f"{name}.json").write_text(json.dumps(document, indent=1) + "\n")
        _log(f"  [{name} done in {document['elapsed_s']:.0f} s]")
    sections = report.load(args.results_dir)
    targets = report.targets(sections)
    (args.results_dir / "summary.json").write_text(json.dumps({**context, "targets": targets}, indent=1) + "\n")
    _log("")
    for line in report.target_lines(targets, context["command"]):
        _log(line)
    args.docs.parent.mkdir(parents=True, exist_ok=True)
    args.docs.write_text(report.markdown(sections, targets, context))
    _log(f"\nwrote {args.results_dir}/*.json and {args.docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
