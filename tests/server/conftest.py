"""Fixtures for the corrald server tests: a fake clock and a SQLite file. The board's tests,
which run on both stores, are in tests/conformance; what is left here no store changes, or
is SQLite's own machinery, on a SQLite file whatever `--store` says."""

from __future__ import annotations

import pathlib

import pytest

from corrald import failpoints
from corrald.clock import FakeClock


@pytest.fixture(autouse=True)
def _no_failpoints():
    failpoints.disable()
    yield
    failpoints.disable()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: pathlib.Path) -> pathlib.Path:
    """Where the test's SQLite board lives."""
    return tmp_path / "corral.sqlite3"
