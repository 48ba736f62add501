"""`corral tasks output ID [-f] [--attempt N] [--offset N]`: a task's live output as raw
bytes on stdout; -f follows until the attempt ends (exit 0) or Ctrl-C (exit 0);
unknown tasks, attempts and offsets are the CLI's one error line, exit 1."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import corral
from tests.support import task_reached, watch_until

pytestmark = pytest.mark.timeout(60)

TEXT = "first line\nsecond line é\n"


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "GRPC_"))}


def _read_until(process: subprocess.Popen[bytes], wanted: bytes, deadline: float) -> bytes:
    """What the process printed, read until `wanted` is in it (or the deadline passes)."""
    assert process.stdout is not None
    seen = b""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while wanted not in seen:
            left = deadline - time.monotonic()
            assert left > 0, f"timed out waiting for {wanted!r}; printed {seen!r}"
            if selector.select(left):
                piece = os.read(process.stdout.fileno(), 65536)
                assert piece, f"the process ended before {wanted!r}; printed {seen!r}"
                seen += piece
    return seen


def _follow(state_dir: Path, task_id: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "corral.cli", "tasks", "output", task_id, "-f", "--state-dir", str(state_dir)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_environment())


def test_output_prints_the_stored_bytes_from_an_offset_of_an_attempt(cli, lead, start_teammate, error_line):
    lead.create_tasks([corral.TaskSpec("t")])
    start_teammate("ann", lambda task: corral.output(TEXT))
    watch_until(lead, task_reached("t", corral.TaskState.COMPLETED))
    whole = cli("tasks", "output", "t")
    assert whole.exit_code == 0, whole.stderr
    assert whole.stdout_bytes == TEXT.encode()
    start = len("first line\n")
    assert cli("tasks", "output", "t", "--offset", str(start), "--attempt", "1").stdout_bytes == TEXT[11:].encode()
    assert cli("tasks", "output", "t", "-f").stdout_bytes == TEXT.encode()  # an ended attempt: -f exits at once

    assert "ATTEMPT_NOT_FOUND" in error_line(cli("tasks", "output", "t", "--attempt", "4"))
    assert "NOT_FOUND" in error_line(cli("tasks", "output", "nope"))
    past = cli("tasks", "output", "t", "--offset", "999")
    assert past.exit_code == 1 and "offset" in error_line(past)
    assert cli("tasks", "output", "t", "--offset", "-1").exit_code == 2  # usage


def test_output_f_follows_until_the_attempt_ends(lead, state_dir, start_teammate):
    lead.create_tasks([corral.TaskSpec("t")])
    go = threading.Event()

    def handler(task: corral.Task) -> None:
        corral.output("before\n")
        assert go.wait(30)
        corral.output("after\n")

    start_teammate("ann", handler)
    watch_until(lead, task_reached("t", corral.TaskState.IN_PROGRESS))
    deadline = time.monotonic() + 30
    with _follow(state_dir, "t") as process:
        printed = _read_until(process, b"before\n", deadline)
        go.set()
        rest, errors = process.communicate(timeout=30)
    assert process.returncode == 0, errors
    assert printed + rest == b"before\nafter\n"


def test_output_f_leaves_cleanly_on_ctrl_c(lead, state_dir, start_teammate):
    lead.create_tasks([corral.TaskSpec("t")])
    done = threading.Event()

    def handler(task: corral.Task) -> None:
        corral.output("working\n")
        assert done.wait(30)

    start_teammate("ann", handler)
    watch_until(lead, task_reached("t", corral.TaskState.IN_PROGRESS))
    try:
        with _follow(state_dir, "t") as process:
            _read_until(process, b"working\n", time.monotonic() + 30)
            process.send_signal(signal.SIGINT)
            _, errors = process.communicate(timeout=30)
        assert process.returncode == 0, errors
        assert b"Traceback" not in errors and b"Aborted" not in errors
    finally:
        done.set()
