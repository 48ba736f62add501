"""A SQLite board: one file, one daemon, one writer."""

from __future__ import annotations

import dataclasses
import logging
import pathlib
import sqlite3
from collections.abc import Callable

from ...clock import Clock
from ...config import WriterConfig
from ...txn import Txn
from .. import boardclock
from ..driver import DatabaseHealth
from .blobs import FileBlobs
from .storage import SqliteStorage, open_reader, open_writer

log = logging.getLogger("corrald.board")


@dataclasses.dataclass(frozen=True)
class SqliteBoard:
    """The board in the file at `path` (store.driver.BoardDriver)."""

    path: pathlib.Path
    lead_hash: bytes
    writer_config: WriterConfig = WriterConfig()

    store_name = "sqlite"
    shared = False  # a file this daemon alone serves
    daemon_id = ""
    reader_begin = "BEGIN"
    merged_completion = None  # each job's statements cost only their work: none runs for several

    def writer_storage(self) -> SqliteStorage:
        return SqliteStorage()

    def open_writer(self) -> sqlite3.Connection:
        config = self.writer_config
        return open_writer(self.path, synchronous=config.synchronous, busy_timeout_ms=config.busy_timeout_ms)

    def open_reader(self) -> sqlite3.Connection:
        return open_reader(self.path)

    def blob_store(self) -> FileBlobs:
        return FileBlobs(self.path.parent / "artifacts")

    def catch_up_clock(self, call: Callable[[Callable[[Txn], int]], int], clock: Clock) -> None:
        # One time base per board: if the host's wall clock now reads earlier than the
        # previous daemon got (stepped back between runs), this daemon carries on from
        # there, so no stored lease end, grace or expiry lies ahead of its "now" and the
        # restart rule sees a clock that never went back.
        behind_ms = clock.not_before(call(lambda tx: boardclock.clock_reached(tx.conn)))
        if behind_ms:
            log.warning("wall clock %.3f s behind this board's clock; carrying on from the board's", behind_ms / 1000)

    def join(self, tx: Txn) -> bool:
        return True  # nobody else serves it: every start is the board's restart

    def leave(self) -> None:
        """Nothing to say: nobody else serves the board."""

    def health(self, conn: sqlite3.Connection) -> DatabaseHealth | None:
        return None
