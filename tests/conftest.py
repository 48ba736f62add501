"""Options for the whole suite: `--store` runs the board's tests on SQLite (the
default) or on PostgreSQL (tests/support/postgres.py says which server)."""

from __future__ import annotations

import os

import pytest

STORES = ("sqlite", "postgres")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--store",
        choices=STORES,
        default=os.environ.get("CORRAL_TEST_STORE", "sqlite"),
        help="which store the board's tests run on (default sqlite, or $CORRAL_TEST_STORE)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "sqlite_only: tests of what only a SQLite board has (its file, WAL, pragmas)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On PostgreSQL, the tests of SQLite's own machinery are not collected (deselected, and
    counted as such in pytest's summary): they have nothing to test there."""
    if config.getoption("--store") != "postgres":
        return
    kept, dropped = [], []
    for item in items:
        (dropped if item.get_closest_marker("sqlite_only") else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(scope="session")
def store_kind(request: pytest.FixtureRequest) -> str:
    return request.config.getoption("--store")
