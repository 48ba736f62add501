"""The conformance suite: each test runs on a SQLite board and on a PostgreSQL one, by
parametrisation (`store`), whatever `--store` says; `make test` runs it once.

The board's fixtures here are those of tests/server/conftest.py keyed on `store`
instead of `--store`: a fake clock, a real store (a SQLite file, or a PostgreSQL schema
of its own, migrated already: tests/support/postgres.py's `board_schema`), a Board. A
test marked `sqlite_only` (SQLite's trace callback or query plan) runs on SQLite alone.
"""

from __future__ import annotations

import pathlib

import pytest

from corrald import failpoints
from corrald.clock import FakeClock
from tests.support.boardkit import SyncBoard

STORES = ("sqlite", "postgres")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "store" in metafunc.fixturenames:
        sqlite_only = metafunc.definition.get_closest_marker("sqlite_only") is not None
        metafunc.parametrize("store", STORES[:1] if sqlite_only else STORES)


@pytest.fixture
def store(request: pytest.FixtureRequest) -> str:
    """The store this test runs on (set by `pytest_generate_tests`)."""
    return request.param


@pytest.fixture(autouse=True)
def _no_failpoints():
    failpoints.disable()
    yield
    failpoints.disable()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: pathlib.Path, store: str):
    """Where the test's board lives: a SQLite file, or a PostgreSQL schema of its own (a
    PgTarget), migrated already."""
    if store != "postgres":
        yield tmp_path / "corral.sqlite3"
        return
    from corrald.store.postgres.target import PgTarget
    from tests.support.postgres import board_schema, run_database_dsn

    with board_schema() as schema:
        yield PgTarget.parse(run_database_dsn(), schema=schema)


@pytest.fixture
def board(db_path, clock):
    """An open Board (through `SyncBoard`) on a fresh store; closed at the end."""
    sync = SyncBoard(db_path, clock).open()
    yield sync
    sync.dispose()


@pytest.fixture
def make_board(db_path, clock):
    """Opens boards with custom limits or writer settings; all are disposed at the end."""
    made: list[SyncBoard] = []

    def make(path: pathlib.Path | None = None, **kwargs) -> SyncBoard:
        sync = SyncBoard(path or db_path, clock, **kwargs).open()
        made.append(sync)
        return sync

    yield make
    for sync in made:
        sync.dispose()
