"""`python -m bench.walk` records the files one Session completion enters."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_the_walk_records_a_completion_and_its_handoff():
    run = subprocess.run(
        [sys.executable, "-m", "bench.walk", "--json"], cwd=REPO, capture_output=True, text=True, timeout=110
    )
    assert run.returncode == 0, run.stderr
    walked = json.loads(run.stdout)
    files, followed = walked["files"], walked["followed"]
    # The op, the completion's step, and the handoff's claim of the next task were all seen.
    assert "SessionOps._complete" in files["service/session.py"]
    assert "complete_claim" in files["store/tasks/ends.py"]
    assert "claim_next" in files["store/tasks/claims.py"]
    assert followed[0] == "service/session.py"
    assert "writer.py" in files and "writer.py" not in followed
