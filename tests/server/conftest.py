"""Fixtures for the corrald server tests: a fake clock, a real store (a SQLite file, or with
`--store postgres` a schema of its own on PostgreSQL), a Board."""

from __future__ import annotations

import pathlib

import pytest
from boardkit import SyncBoard

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
def db_path(tmp_path: pathlib.Path, store_kind: str):
    """Where the test's board lives: a SQLite file, or a PostgreSQL schema of its own (a
    PgTarget), migrated already (tests/support/postgres.py's `board_schema`)."""
    if store_kind != "postgres":
        yield tmp_path / "corral.sqlite3"
        return
    from corrald.store.postgres.target import PgTarget
    from tests.support.postgres import board_schema, run_database_dsn

    with board_schema() as schema:
        yield PgTarget.parse(run_database_dsn(), schema=schema)


@pytest.fixture
def board(db_path, clock):
    """An open Board (through `SyncBoard`) on a fresh file; closed at the end."""
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
