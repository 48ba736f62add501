"""A PostgreSQL board test's schema is one migrated already: the schema an earlier test
of the process used, emptied (tests/support/postgres.py's `board_schema`). Migrating one
costs some forty statements of DDL per test; when no released schema matched the
template's catalog, every test migrated one and nothing said so. A schema whose catalog
a test changed is dropped instead, never handed on."""

from __future__ import annotations

import psycopg
import pytest

from corrald.store.postgres.target import PgTarget
from tests.support.boardkit import SyncBoard, spec
from tests.support.postgres import board_schema, run_database_dsn

pytestmark = pytest.mark.timeout(60)


def _used(schema: str, clock) -> None:
    """A board on `schema`, two tasks made, a teammate added and a claim made, then closed."""
    board = SyncBoard(PgTarget.parse(run_database_dsn(), schema=schema), clock).open()
    board.create(spec("a"), spec("b", "a"))
    board.add("w1")
    assert board.claim("w1") is not None
    board.dispose()


def test_a_released_schema_is_emptied_and_handed_to_the_next_test(clock):
    with board_schema() as first:
        _used(first, clock)
    with board_schema() as second:
        assert second == first, "the released schema was dropped, not reused"
        board = SyncBoard(PgTarget.parse(run_database_dsn(), schema=second), clock).open()
        try:
            assert board.scalar("SELECT count(*) FROM tasks") == 0
            assert board.scalar("SELECT count(*) FROM claims") == 0
            assert board.scalar("SELECT count(*) FROM teammates") == 0
        finally:
            board.dispose()


def test_a_schema_whose_catalog_a_test_changed_is_dropped(clock):
    with board_schema() as first:
        with psycopg.connect(run_database_dsn(), autocommit=True) as conn:
            conn.execute(f"ALTER TABLE {first}.tasks ADD COLUMN extra bigint")
    with board_schema() as second:
        assert second != first
    with psycopg.connect(run_database_dsn(), autocommit=True) as conn:
        left = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (first,)).fetchall()
    assert not left, f"{first} is still there"
