"""Smoke test: `python -m bench --quick` runs end to end and writes its results.

No timing assertions: the machine running tests is not a benchmark machine.
Only that every section ran and wrote JSON with the keys the report reads.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SECTIONS = [
    "e2e",
    "grpc_floor",
    "writer_floor",
    "tutorial",
    "huey",
    "paired",
    "latency",
    "scale",
    "semantics",
    "reviews",
    "proposals",
    "output",
    "leases",
    "mcp",
]
EXPECTED = {
    "e2e": ["idle", "session"],
    "grpc_floor": ["teammates", "bidi"],
    "writer_floor": ["FULL", "one_job_per_commit"],
    "tutorial": ["FULL"],
    "huey": ["FULL"],
    "paired": ["rounds", "ratios", "session", "idle", "before", "unary_floor", "bidi_floor", "tutorial_best"],
    "latency": [
        "dependency_p50_ms",
        "dependency_p99_ms",
        "shutdown_p50_ms",
        "shutdown_p99_ms",
        "session",
        "poll_loop",
    ],
    "scale": ["board_size", "streams", "busy_writer", "submissions"],
    "semantics": ["claims", "cycles"],
    "reviews": ["rounds", "ratio", "tasks_ratio", "jobs_ratio", "plain", "reviewed"],
    "proposals": ["claims", "depend"],
    "output": ["rounds", "ratio", "unary_ratio", "plain", "sdk", "unary"],
    "leases": ["rounds", "ratio_p50", "plain", "leased"],
    "mcp": ["sdk", "in_process", "stdio", "ready_to_return", "bridge_rss_mib"],
    "postgres": [
        "shared_cores",
        "server",
        "database",
        "cycles",
        "ready_to_claim",
        "board_size",
        "reclaim",
        "mvcc",
        "switches",
    ],
}
FIGURE_KEYS = {"median", "min", "max", "runs", "unit"}
TARGETS = {
    "1a",
    "1b",
    "1c",
    "1d",
    "1e",
    "2a",
    "2b",
    "2c",
    "3d",
    "3s",
    "3di",
    "3si",
    "4a",
    "4b",
    "4c",
    "4d",
    "4e",
    "5a",
    "5b",
    "6a",
    "10a",
    "10b",
    "12",
}


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
    _check_figures(results)
    summary = json.loads((results / "summary.json").read_text())
    assert TARGETS <= {target["id"] for target in summary["targets"]}
    assert "targets, measured by `python -m bench --quick" in done.stdout
    assert "## Targets" in docs.read_text()


def _results(results: pathlib.Path, section: str) -> dict:
    return json.loads((results / f"{section}.json").read_text())["results"]


def _check_figures(results: pathlib.Path) -> None:
    """Both transports, both floors, the SDK on Session and the in-run baseline left figures."""
    e2e = _results(results, "e2e")
    idle = next(iter(e2e["idle"]["FULL"]["independent"].values()))
    assert FIGURE_KEYS <= idle["throughput"].keys()
    assert FIGURE_KEYS <= idle["jobs_per_cycle"].keys() and FIGURE_KEYS <= idle["max_over_min"].keys()
    session = e2e["session"]
    assert "unavailable" not in session, session
    figure = next(iter(session["FULL"]["independent"].values()))
    assert FIGURE_KEYS <= figure["throughput"].keys() and FIGURE_KEYS <= figure["handoff_share"].keys()
    assert figure["session_ops_per_cycle"]["median"] >= 0.5  # the load spoke Session, as the daemon recorded
    floor = _results(results, "grpc_floor")
    assert all(FIGURE_KEYS <= f["throughput"].keys() for key in ("teammates", "bidi") for f in floor[key].values())
    paired = _results(results, "paired")
    # ec3c11e ran in this run unless the checkout cannot read it (then the reason is recorded).
    assert paired["before"]["throughput"] is not None or paired["baseline_missing"]
    assert paired["idle"]["throughput"] is not None and paired["bidi_floor"]["median"] > 0
    assert paired["session"]["throughput"] is not None, paired["session"]
    # The SDK's loop with CORRAL_TRANSPORT=session really spoke Session (else it is reported as not measured).
    assert paired["sdk:session"]["throughput"] is not None, paired["sdk:session"]
    latency = _results(results, "latency")
    assert FIGURE_KEYS <= latency["session"]["dependency_p99_ms"].keys(), latency["session"]
    writer_floor = _results(results, "writer_floor")
    assert "before" in writer_floor or writer_floor["before_missing"]
    semantics = _results(results, "semantics")
    # Keys were full while the claims ran (they passed over them), and both Session variants completed cleanly.
    assert all(full > 0 for full in semantics["claims"]["full_keys_at_end"]), semantics["claims"]
    cycles = semantics["cycles"]
    assert "unavailable" not in cycles, cycles
    assert cycles["plain"]["errors"] == 0 and cycles["semantics"]["errors"] == 0, cycles
    assert FIGURE_KEYS <= cycles["ratio"].keys() and FIGURE_KEYS <= semantics["claims"]["ratio_p50"].keys()
    reviews = _results(results, "reviews")
    # Every reviewed task was worked and then approved by a review's claim, and ended COMPLETED.
    assert "unavailable" not in reviews, reviews
    for name in ("plain", "reviewed"):
        assert reviews[name]["errors"] == 0 and not reviews[name]["timed_out"], (name, reviews[name])
        assert reviews[name]["tasks_completed"] == [reviews["tasks"]] * len(reviews["rounds"]), reviews[name]
        assert FIGURE_KEYS <= reviews[name]["jobs_per_cycle"].keys()
    assert reviews["reviewed"]["reviews"] == [reviews["tasks"]] * len(reviews["rounds"]), reviews["reviewed"]
    assert reviews["plain"]["reviews"] == [0] * len(reviews["rounds"])
    assert FIGURE_KEYS <= reviews["ratio"].keys()


@pytest.mark.timeout(240)
def test_quick_postgres_section(tmp_path: pathlib.Path) -> None:
    """`--only postgres` on the server the PostgreSQL tests use (tests/support/postgres.py: never a silent
    skip); the bench's own database is gone afterwards."""
    import psycopg

    from tests.support.postgres import server_dsn

    server = server_dsn()
    results, docs = tmp_path / "results", tmp_path / "benchmarks.md"
    # The SQLite configuration must be SQLite whatever store this test run's daemons use.
    env = {**os.environ, "CORRAL_BENCH_PG_DSN": server, "CORRAL_TEST_STORE": "sqlite"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--only",
            "postgres",
            "--results-dir",
            str(results),
            "--docs",
            str(docs),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    document = json.loads((results / "postgres.json").read_text())
    assert document["section"] == "postgres"
    pg = document["results"]
    assert "unavailable" not in pg, pg
    for key in EXPECTED["postgres"]:
        assert key in pg, key
    assert "shares the" in pg["shared_cores"]
    for table in pg["cycles"]["by_count"].values():
        for config in ("sqlite", "pg1", "pg2"):
            assert FIGURE_KEYS <= table[config]["throughput"].keys(), (config, table[config])
            assert table[config]["errors"]["max"] == 0, (config, table[config])
        assert table["pg1"]["pg_cpu_ms"] is not None or not pg["server_local"]
        assert FIGURE_KEYS <= table["ratios"]["pg2_vs_pg1"].keys()
    switches = pg["switches"]
    for name in ("notify", "lock", "group", "pool", "merge"):
        assert FIGURE_KEYS <= switches["ratios"][f"{name}_off_vs_on"].keys(), name
        assert switches[name]["errors"]["max"] == 0, (name, switches[name])
    ready = pg["ready_to_claim"]
    assert FIGURE_KEYS <= ready["cross_p99_ms"].keys() and ready["cross_p50_ms"]["median"] > 0
    assert ready["shutdown_cross_p50_ms"]["median"] > 0 and ready["shutdown_same_p50_ms"]["median"] > 0
    assert sum(ready["missed"]["runs"]) == 0, "a claim or a shutdown request never arrived"
    assert len(pg["board_size"]["sizes"]) == 2 and FIGURE_KEYS <= pg["board_size"]["ratio_p50"].keys()
    summary = json.loads((results / "summary.json").read_text())
    targets = {target["id"]: target for target in summary["targets"]}
    assert {"8a", "8b", "8c", "8d", "8f"} <= targets.keys()
    assert all("shares the" in targets[tid]["basis"] for tid in ("8a", "8b", "8c", "8d", "8f"))
    assert targets["8f"]["measured"] is not None, targets["8f"]
    assert "## 8. PostgreSQL boards" in docs.read_text()
    with psycopg.connect(server, autocommit=True) as conn:
        left = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (pg["database"],)).fetchall()
    assert not left, f"the bench left its database {pg['database']} behind"
