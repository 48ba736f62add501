"""Fixtures for the MCP bridge tests: one real daemon per module (teammates get fresh
names, so tests do not see each other's work), and the bridge opened in-process."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

import corral

from .mcpkit import Secrets


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[corral.Lead]:
    """A Lead that launched a daemon for the whole module."""
    with corral.Lead.launch(tmp_path_factory.mktemp("mcp") / "state", ready_timeout=30) as lead:
        yield lead


@pytest.fixture(scope="module")
def secrets(board: corral.Lead) -> Secrets:
    """Every credential the module mints (and the Lead's), to search results for."""
    return Secrets({board.token})


_names = itertools.count(1)


@pytest.fixture
def mint(board: corral.Lead, secrets: Secrets):
    """mint(prefix="mate", **options) -> (name, token): a fresh teammate."""

    def make(prefix: str = "mate", **options: object) -> tuple[str, str]:
        name = f"{prefix}{next(_names)}"
        new = board.add_teammate(name, **options)  # type: ignore[arg-type]
        secrets.tokens.add(new.token)
        return name, new.token

    return make


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture(autouse=True)
def _no_credential_in_log_lines(request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Every log line of the bridge and SDK, at every level, searched for every token."""
    caplog.set_level(logging.DEBUG, logger="corral")
    yield
    if "secrets" in request.fixturenames:
        secrets: Secrets = request.getfixturevalue("secrets")
        secrets.assert_absent(caplog.text, "a log line")
