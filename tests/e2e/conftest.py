"""Fixtures for the SDK end-to-end tests against a real corrald."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import corral


@pytest.fixture
def lead(tmp_path: Path) -> Iterator[corral.Lead]:
    """A Lead that launched a fresh daemon on tmp_path/state; stopped afterwards."""
    with corral.Lead.launch(tmp_path / "state", ready_timeout=30) as lead:
        yield lead


@pytest.fixture(params=["session", "idle"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs the test once per teammate transport (CORRAL_TRANSPORT), for the
    core SDK tests; the rest of the suite takes the default (Session where offered)."""
    monkeypatch.setenv("CORRAL_TRANSPORT", request.param)
    return str(request.param)
