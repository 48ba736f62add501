"""Fixtures that start the polyglot tests' child programs and kill what is left when a test ends."""

from __future__ import annotations

import os
import pathlib
import sys
from collections.abc import Callable, Iterator

import pytest
from polyglot_kit import NODE_DIR, LoggingProcess, node_executable

import corral

PYTHON_TEAMMATE = pathlib.Path(__file__).resolve().parent / "python_teammate.py"
# The SDK these tests import, for the Python teammates in processes of their own.
SDK_DIR = pathlib.Path(corral.__file__).resolve().parents[1]

# Teammates wait for work for up to 600 polls of 200 ms: a test ends them with a shutdown.
TEAMMATE_ENV = {"CORRAL_MAX_IDLE_POLLS": "600", "CORRAL_POLL_INTERVAL_MS": "200"}

Spawn = Callable[[list[str], pathlib.Path, str, dict[str, str]], LoggingProcess]


@pytest.fixture
def spawned(tmp_path: pathlib.Path) -> Iterator[Spawn]:
    """spawned(argv, cwd, label, env): a child program whose stdout is JSON lines."""
    started: list[LoggingProcess] = []

    def start(argv: list[str], cwd: pathlib.Path, label: str, env: dict[str, str]) -> LoggingProcess:
        proc = LoggingProcess(argv, cwd, env, tmp_path, label)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()


@pytest.fixture
def node_procs(spawned: Spawn) -> Callable[..., LoggingProcess]:
    """node_procs(script, label, **env): a Node program of tests/polyglot/node."""

    def start(script: str, label: str, **env: str) -> LoggingProcess:
        return spawned([node_executable(), str(NODE_DIR / script)], NODE_DIR, label, env)

    return start


@pytest.fixture
def node_teammate(node_procs: Callable[..., LoggingProcess]) -> Callable[..., LoggingProcess]:
    """node_teammate(lead, name, transport="idle", work_ms=10, **env): adds the teammate and runs teammate.js."""

    def start(lead: corral.Lead, name: str, *, transport: str = "idle", work_ms: int = 10, **env: str):
        mate = lead.add_teammate(name)
        settings = {
            **lead.teammate_env(mate),
            **TEAMMATE_ENV,
            "CORRAL_NAME": name,
            "CORRAL_TRANSPORT": transport,
            "CORRAL_WORK_MS": str(work_ms),
            **env,
        }
        return node_procs("teammate.js", name, **settings)

    return start


@pytest.fixture
def python_teammate(spawned: Spawn) -> Callable[..., LoggingProcess]:
    """python_teammate(lead, name, transport, work_ms=10): adds the teammate and runs python_teammate.py."""

    def start(lead: corral.Lead, name: str, *, transport: str, work_ms: int = 10) -> LoggingProcess:
        mate = lead.add_teammate(name)
        path = os.pathsep.join(filter(None, [str(SDK_DIR), os.environ.get("PYTHONPATH", "")]))
        env = {
            **lead.teammate_env(mate),
            **TEAMMATE_ENV,
            "CORRAL_NAME": name,
            "CORRAL_TRANSPORT": transport,
            "CORRAL_WORK_MS": str(work_ms),
            "PYTHONPATH": path,
        }
        return spawned([sys.executable, str(PYTHON_TEAMMATE)], SDK_DIR, name, env)

    return start
