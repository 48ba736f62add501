"""The board benchmark runs end to end in quick mode and writes its JSON (no timing assertions)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.timeout(90)
def test_board_bench_quick_writes_json(tmp_path):
    out = tmp_path / "board.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.board_bench", "--quick", "--reps", "1", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=80,
    )
    assert done.returncode == 0, done.stderr
    assert "ratio" in done.stdout
    result = json.loads(out.read_text())
    assert result["benchmark"] == "board" and result["quick"] is True
    assert result["fsync_p50_ms"] >= 0 and result["command"].endswith("--out " + str(out))
    group = result["group_commit"]
    for key in ("writer_cycles_per_s", "per_op_txn_cycles_per_s"):
        assert set(group[key]) >= {"median", "min", "max", "runs"}
        assert group[key]["median"] > 0
    assert {"ratio", "target_ratio", "meets_target", "threads", "writer_mean_batch"} <= set(group)
    latency = result["claim_latency"]
    assert {"small", "large", "ratio", "job_ratio", "target_ratio", "meets_target"} <= set(latency)
    for size in ("small", "large"):
        assert {"tasks", "claim_p50_ms", "claim_p99_ms", "claim_job_p50_ms", "cycle_p50_ms"} <= set(latency[size])
    assert latency["small"]["tasks"] < latency["large"]["tasks"]
