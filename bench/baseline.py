"""The code #15 is measured against, run in the same benchmark run: corral at ec3c11e.

`git archive` writes that commit's server/, client/ and bench/ into a scratch
directory. Its daemon is started by our launcher with PYTHONPATH pointing
there (the Idle + unary wire protocol is unchanged since, so the same client
processes drive both); its writer floor is its own bench/writer_floor.py, run
in a subprocess on its own corrald. Where the commit cannot be read (a
shallow clone, no git), the sections say so and the report falls back to the
figure of an earlier run, labelled as such.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator

from .daemon import scratch_dir

COMMIT = "ec3c11e"
REPO = pathlib.Path(__file__).resolve().parent.parent
# No run of `make bench` measured ec3c11e itself; the nearest full run is at
# 0c17fda, 14 commits earlier (admission pacing and a writer ordering fix came
# in between): its paired median at 32 teammates, independent DAG, FULL, 3
# rounds (bench/results/paired.json as committed in d0d5c5a).
EARLIER_RUN = {
    "commit": "0c17fda",
    "recorded_in": "d0d5c5a",
    "date": "2026-11-30",
    "teammates": 32,
    "idle_unary_cycles_per_s": 942.4,
    "what": "Idle + unary at 0c17fda (14 commits before ec3c11e), from an earlier run, not this one",
}


class Unavailable(Exception):
    """The baseline commit cannot be read from this checkout."""


@contextlib.contextmanager
def checkout(commit: str = COMMIT) -> Iterator[pathlib.Path]:
    """server/, client/ and bench/ of `commit` in a scratch directory (removed afterwards)."""
    try:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", commit, "server", "client", "bench"],
            cwd=REPO,
            capture_output=True,
            timeout=60,
            check=False,
        )
    except OSError as error:
        raise Unavailable(f"git archive {commit}: {error}") from None
    if archive.returncode != 0:
        raise Unavailable(f"git archive {commit}: {archive.stderr.decode(errors='replace').strip()}")
    root = scratch_dir(f"at-{commit}")
    try:
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(root, filter="data")
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def pythonpath(root: pathlib.Path) -> str:
    """What a process needs on PYTHONPATH to import that commit's corrald and corral."""
    return f"{root / 'server'}:{root / 'client'}"


# The writer floor of ec3c11e, through its own bench/writer_floor.py (whose
# `_measure(teammates, count, synchronous, deadline_s, runs)` it had then).
_OLD_WRITER_FLOOR = """
import asyncio, json, sys
from bench import writer_floor
teammates, count, deadline_s, runs = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
print(json.dumps(asyncio.run(writer_floor._measure(teammates, count, "FULL", deadline_s, runs))))
"""


def writer_floor(root: pathlib.Path, teammates: int, count: int, deadline_s: float, runs: int) -> list[dict]:
    """The per-run results of that commit's writer floor (the same fields as bench.writer_floor's)."""
    done = subprocess.run(
        [sys.executable, "-c", _OLD_WRITER_FLOOR, str(teammates), str(count), str(deadline_s), str(runs)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": f"{root}:{pythonpath(root)}"},
        capture_output=True,
        text=True,
        timeout=deadline_s * runs + 120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"writer floor at {COMMIT} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
