"""Smoke test: `python -m bench --quick` runs end to end and writes its results.

No timing assertions: the machine running tests is not a benchmark machine.
Only that every section ran and wrote JSON with the keys the report reads.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SECTIONS = ["e2e", "grpc_floor", "writer_floor", "tutorial", "huey", "paired", "latency", "scale"]
EXPECTED = {
    "e2e": ["FULL", "NORMAL"],
    "grpc_floor": ["teammates"],
    "writer_floor": ["FULL", "one_job_per_commit"],
    "tutorial": ["FULL", "NORMAL"],
    "huey": ["FULL"],
    "paired": ["rounds", "vs_floor", "vs_tutorial"],
    "latency": ["dependency_p50_ms", "dependency_p99_ms", "shutdown_p50_ms", "shutdown_p99_ms", "poll_loop"],
    "scale": ["board_size", "streams", "busy_writer", "submissions"],
}
FIGURE_KEYS = {"median", "min", "max", "runs", "unit"}


@pytest.mark.timeout(300)
def test_quick_bench_writes_results(tmp_path: pathlib.Path) -> None:
    # Huey is a benchmark-only dependency (bench/requirements.txt); without it, skip just that section.
    sections = [s for s in SECTIONS if s != "huey" or importlib.util.find_spec("huey") is not None]
    results, docs = tmp_path / "results", tmp_path / "benchmarks.md"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--only",
            ",".join(sections),
            "--results-dir",
            str(results),
            "--docs",
            str(docs),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for section in sections:
        document = json.loads((results / f"{section}.json").read_text())
        assert document["section"] == section
        assert {"machine", "command", "runs", "results"} <= document.keys()
        for key in EXPECTED[section]:
            assert key in document["results"], (section, key)
    e2e = json.loads((results / "e2e.json").read_text())["results"]
    figure = next(iter(e2e["FULL"]["independent"].values()))
    assert FIGURE_KEYS <= figure["throughput"].keys()
    summary = json.loads((results / "summary.json").read_text())
    ids = {target["id"] for target in summary["targets"]}
    assert {"1a", "1b", "3d", "3s", "4a", "4b", "4c", "4d", "4e"} <= ids
    assert "targets:" in done.stdout
    assert "## Targets" in docs.read_text()
