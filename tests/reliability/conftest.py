"""Fixtures for the reliability and security suite.

Sizes: reduced by default (`make test`), full with CORRAL_SOAK=1 (see `rel_harness.pick`).
Figures: every test prints its figures and appends them as JSON lines to
`<pytest basetemp>/reliability-figures.jsonl`.
"""

from __future__ import annotations

import pytest

from .rel_harness import SOAK, Daemon, Figures


def pytest_report_header(config):
    return f"corral reliability sizes: {'FULL (CORRAL_SOAK=1)' if SOAK else 'reduced'}"


@pytest.fixture
def figures(request, tmp_path_factory) -> Figures:
    path = tmp_path_factory.getbasetemp() / "reliability-figures.jsonl"
    return Figures(path, request.node.name)


@pytest.fixture
def daemons(tmp_path):
    """Makes daemons on fresh state directories under tmp_path; all are stopped at the end."""
    made: list[Daemon] = []

    def make(name: str = "state", **kwargs) -> Daemon:
        daemon = Daemon(tmp_path / name, **kwargs)
        made.append(daemon)
        return daemon

    yield make
    for daemon in made:
        try:
            daemon.stop()
        except Exception:  # noqa: BLE001 (teardown must reach every daemon)
            if daemon.alive():
                daemon.kill()


@pytest.fixture
def daemon(daemons) -> Daemon:
    """A running daemon on a fresh state directory."""
    return daemons().start()
