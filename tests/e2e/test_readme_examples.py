"""The README's Python examples, run exactly as written (a doc that drifts from the code fails here)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks_under(heading: str) -> list[str]:
    """The ```python blocks of the README section titled `heading`."""
    text = README.read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@pytest.mark.timeout(120)
def test_the_lead_and_teammate_examples_run_as_written_and_again(tmp_path: Path) -> None:
    (lead_code,) = python_blocks_under("A Lead in Python")
    (teammate_code,) = python_blocks_under("A teammate in Python")
    (tmp_path / "lead.py").write_text(lead_code, encoding="utf-8")
    (tmp_path / "teammate.py").write_text(teammate_code, encoding="utf-8")
    for run in (1, 2):  # a second run in the same folder works too
        done = subprocess.run(
            [sys.executable, "lead.py"], cwd=tmp_path, capture_output=True, text=True, timeout=100, check=False
        )
        assert done.returncode == 0, (run, done.stderr[-3000:])
        # Each teammate printed how its run ended (what they wrote to stderr says why not). The
        # two share the Lead's stdout, and print() may write a line and its newline apart, so
        # one's line can end up glued to the other's: each summary starts at its own name.
        summaries = ["RunSummary(" + part.strip() for part in done.stdout.split("RunSummary(")[1:]]
        assert len(summaries) == 2, (run, done.stdout, done.stderr[-3000:])
        assert all("exit_reason=<ExitReason.SHUTDOWN" in line for line in summaries), summaries
        completed = sorted(int(re.search(r"completed=(\d+)", line).group(1)) for line in summaries)
        assert sum(completed) == 3, summaries  # fetch, index and review, each once
