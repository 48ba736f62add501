"""The CLI and the demo print only their own lines (gRPC core's log stays silent, even
traced), and Ctrl-C at the demo's last prompt stops the daemon cleanly and exits 0."""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import corral

# Tracing makes gRPC core log every API call; nothing of it may reach a command's output.
TRACED = {"GRPC_TRACE": "api,http", "GRPC_VERBOSITY": None}
CORE_LINE = re.compile(r"^[IWE]\d{4} [\d:.]+ +\d+ \S+\.cc:\d+\]", re.MULTILINE)
DAG = '[[tasks]]\nid = "a"\npayload = \'{"weight": 1}\'\n[[tasks]]\nid = "b"\ndepends_on = ["a"]\n'


def environment(**changes: str | None) -> dict[str, str]:
    merged = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "GRPC_"))}
    merged.update({k: v for k, v in changes.items() if v is not None})
    return merged


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="corral-t-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.timeout(60)
def test_a_command_prints_no_grpc_core_lines(tmp_path):
    with corral.Lead.launch(tmp_path / "state", ready_timeout=30) as lead:
        lead.create_tasks([corral.TaskSpec("a")])
        result = subprocess.run(
            [sys.executable, "-m", "corral.cli", "tasks", "list", "--state-dir", str(tmp_path / "state")],
            capture_output=True,
            text=True,
            timeout=30,
            env=environment(**TRACED),
            check=False,
        )
    assert result.returncode == 0, result.stderr
    assert result.stderr == "" and not CORE_LINE.search(result.stdout)
    assert re.search(r"^ a +pending ", result.stdout, re.MULTILINE), result.stdout


class Terminal:
    """A process on a pseudo-terminal of its own (its controlling one: ^C is SIGINT)."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child
            os.execve(argv[0], argv, env)
        self.output = b""

    def read_until(self, text: str, deadline: float) -> None:
        while text.encode() not in self.output:
            assert self._read(deadline), f"ended before {text!r}:\n{self.output.decode(errors='replace')}"

    def _read(self, deadline: float) -> bool:
        left = deadline - time.monotonic()
        assert left > 0, f"timed out:\n{self.output.decode(errors='replace')}"
        ready, _, _ = select.select([self.fd], [], [], left)
        if not ready:
            return True  # the deadline check above ends the wait
        try:
            chunk = os.read(self.fd, 4096)
        except OSError:  # EIO: the child's side closed
            return False
        self.output += chunk
        return bool(chunk)

    def finish(self, deadline: float) -> int:
        while self._read(deadline):
            pass
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        return os.waitstatus_to_exitcode(status)


@pytest.mark.timeout(120)
def test_ctrl_c_at_the_demos_last_prompt_stops_the_daemon_and_exits_0(short_dir):
    dag = short_dir / "small.toml"
    dag.write_text(DAG, encoding="utf-8")
    argv = [sys.executable, "-m", "corral.cli", "demo", "--plain", "--web", "127.0.0.1:0"]
    argv += ["--dir", str(short_dir), "--dag", str(dag), "--work-ms", "1"]
    terminal = Terminal(argv, environment(**TRACED))
    deadline = time.monotonic() + 90
    terminal.read_until("press Enter to start the team", deadline)
    os.write(terminal.fd, b"\r")
    terminal.read_until("to stop the daemon", deadline)
    os.write(terminal.fd, b"\x03")
    code = terminal.finish(deadline)
    out = terminal.output.decode(errors="replace")
    assert code == 0, out
    assert "Aborted!" not in out and "Traceback" not in out and "exited with status" not in out, out
    assert "corral demo: 2/2 tasks completed" in out
    assert not CORE_LINE.search(out), out
    run_dir = Path(re.search(r"run directory (\S+)", out)[1])  # type: ignore[index]
    assert not (run_dir / "state" / "corral.sock").exists()  # the daemon stopped and cleaned up
