"""Fixtures for the `corral` CLI tests: a real daemon and a CliRunner bound to it."""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import corral
from corral.cli import main
from tests.support import TeammateThread, watch_until

CONNECTION_ENV = ("CORRAL_ADDRESS", "CORRAL_TOKEN", "CORRAL_STATE_DIR", "CORRAL_DEBUG")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the developer's CORRAL_* settings (or CI's)."""
    for name in CONNECTION_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def lead(state_dir: Path) -> Iterator[corral.Lead]:
    """A Lead that launched a fresh daemon on `state_dir`; stopped afterwards."""
    with corral.Lead.launch(state_dir, ready_timeout=30) as lead:
        yield lead


@dataclass
class Cli:
    """Runs `corral` in-process against one daemon (`--state-dir`), stdout and stderr apart."""

    state_dir: Path | None

    def __call__(self, *args: str, env: dict[str, str] | None = None, connect: bool = True) -> Result:
        argv = list(args)
        if connect and self.state_dir is not None:
            argv += ["--state-dir", str(self.state_dir)]
        return CliRunner().invoke(main, argv, env=env, catch_exceptions=False)

    def json(self, *args: str) -> Any:
        """Run with --json, assert success, and parse stdout."""
        result = self(*args, "--json")
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)


@pytest.fixture
def cli(lead: corral.Lead, state_dir: Path) -> Cli:
    return Cli(state_dir)


@pytest.fixture
def make_cli() -> type[Cli]:
    """Cli(state_dir) for a daemon of the test's own (or for none)."""
    return Cli


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def write_file(tmp_path: Path) -> Callable[[str, str], Path]:
    """write_file("dag.toml", text) -> the path, in the test's tmp dir."""
    return lambda name, text: write(tmp_path / name, text)


def one_error_line(result: Result) -> str:
    """The single `corral: ...` line a failed command must print, and no traceback."""
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("corral: "), lines[0]
    return lines[0]


# Test modules get the helpers through fixtures: `import conftest` would be
# ambiguous with the other test directories' conftest modules.


@pytest.fixture
def error_line() -> Callable[[Result], str]:
    return one_error_line


@pytest.fixture
def until_event() -> Callable[..., corral.WatchEvent]:
    """until_event(lead, predicate): the first watch event, replayed from the start, that matches."""
    return functools.partial(watch_until, timeout=15.0)


@pytest.fixture
def start_teammate_factory() -> Iterator[Callable[[corral.Lead], Callable[..., TeammateThread]]]:
    """start_teammate_factory(lead)(name, handler, **run_teammate options) -> a running TeammateThread.

    Its idle polls are many (10,000) unless given; teammates still running at the end are removed,
    which ends their loops.
    """
    started: list[tuple[corral.Lead, TeammateThread]] = []

    def for_lead(lead: corral.Lead) -> Callable[..., TeammateThread]:
        def start(name: str, handler: Callable[[corral.Task], Any], **options: Any) -> TeammateThread:
            options.setdefault("max_idle_polls", 10_000)
            mate = TeammateThread(lead, name, handler, **options).start()
            started.append((lead, mate))
            return mate

        return start

    yield for_lead
    for lead, mate in started:
        if mate.running():
            with contextlib.suppress(corral.CorralError):
                lead.remove_teammate(mate.new.name)
            mate.join(10)


@pytest.fixture
def start_teammate(
    lead: corral.Lead, start_teammate_factory: Callable[[corral.Lead], Callable[..., TeammateThread]]
) -> Callable[..., TeammateThread]:
    """start_teammate(name, handler, **run_teammate options) on the `lead` fixture's daemon."""
    return start_teammate_factory(lead)
