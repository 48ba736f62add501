"""Several corrald daemons serving one PostgreSQL board (tests/support/postgres.py says
which server): each test gets a schema of its own and starts daemons on it.

These tests need PostgreSQL whatever `--store` says; they never fall back to SQLite.
"""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from corrald.store.postgres.sql import PgConnection
from corrald.store.postgres.storage import connect
from corrald.store.postgres.target import PgTarget
from tests.contract.wire import Daemon
from tests.support.boards import QmarkConnection
from tests.support.postgres import ThrowawayServer, fresh_schema, new_database, run_database_dsn


class BoardDaemon(Daemon):
    """A daemon of the test's board: the Lead's token is the one the board's first daemon wrote."""

    def __init__(self, board: SharedBoard, state_dir: pathlib.Path, **options: Any) -> None:
        super().__init__(state_dir, **options)
        self.board = board

    def read_lead_token(self) -> str:
        return self.board.lead_token()


class SharedBoard:
    """One PostgreSQL board (a schema of the run's database, or of the database `dsn` names)
    and the daemons serving it."""

    def __init__(self, root: pathlib.Path, dsn: str | None = None) -> None:
        self.root = root
        self.dsn = dsn or run_database_dsn()
        self.schema = fresh_schema()
        self.daemons: list[BoardDaemon] = []

    def store_args(self) -> list[str]:
        return ["--store", self.dsn, "--pg-schema", self.schema]

    def daemon(
        self,
        label: str | None = None,
        *,
        extra_args: tuple[str, ...] = (),
        failpoints: str | None = None,
        dsn: str | None = None,
        **options: Any,
    ) -> BoardDaemon:
        """A new daemon of the board, with a state directory of its own; started. With `dsn`,
        it reaches the board's database there (through a proxy, say) instead."""
        label = label or f"d{len(self.daemons) + 1}"
        store = ["--store", dsn or self.dsn, "--pg-schema", self.schema]
        made = BoardDaemon(self, self.root / label / "state", extra_args=[*store, *extra_args], **options)
        self.daemons.append(made)
        return made.start(failpoints)

    def lead_token(self) -> str:
        for daemon in self.daemons:
            path = daemon.state_dir / "lead.token"
            if path.exists():
                return path.read_text().strip()
        raise AssertionError("no daemon of this board wrote the lead token")

    @contextlib.contextmanager
    def connection(self) -> Iterator[QmarkConnection]:
        """The board read through the connection the store uses (taking `?` parameters)."""
        conn = PgConnection(connect(PgTarget.parse(self.dsn, schema=self.schema), read_only=True))
        try:
            yield QmarkConnection(conn)
        finally:
            conn.close()

    def sql(self, query: str, params: tuple = ()) -> list[tuple]:
        """A statement on the board's schema, autocommitted (for checks and for breaking things)."""
        with psycopg.connect(self.dsn, autocommit=True, options=f"-c search_path={self.schema}") as conn:
            cursor = conn.execute(query, params)
            return cursor.fetchall() if cursor.description is not None else []

    def stop_daemons(self) -> None:
        """Teardown: SIGTERM to every daemon still running, each must exit 0 within 5 s."""
        failures = []
        for daemon in reversed(self.daemons):
            try:
                if daemon.alive():
                    daemon.stop_and_check()
            except BaseException as error:  # noqa: BLE001 (report every daemon, then fail)
                failures.append(str(error))
        if failures:
            pytest.fail("\n".join(failures))


@pytest.fixture
def shared_board(tmp_path) -> Iterator[SharedBoard]:
    board = SharedBoard(tmp_path)
    yield board
    board.stop_daemons()


@pytest.fixture
def own_server() -> Iterator[ThrowawayServer]:
    """A server of the test's own, which it may stop and start (the shared one never is)."""
    started = ThrowawayServer().start()
    yield started
    started.close()


@pytest.fixture
def own_board(tmp_path, own_server) -> Iterator[SharedBoard]:
    """A board in a database of `own_server`."""
    made = SharedBoard(tmp_path, new_database(own_server.dsn))
    yield made
    made.stop_daemons()
