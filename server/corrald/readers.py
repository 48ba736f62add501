"""Read-only connections for queries; every read is one short transaction.

Reads run on a small thread pool so they never block the event loop, and a
cursor is never held across an `await` (a held read transaction would pin the
WAL and stall checkpoints).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import pathlib
import sqlite3
import threading
from collections.abc import Callable
from typing import TypeVar

from .store.schema import open_reader

T = TypeVar("T")


class ReaderPool:
    def __init__(self, path: pathlib.Path, *, size: int = 4) -> None:
        self._path = path
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=size, thread_name_prefix="corral-reader")

    def _connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = open_reader(self._path)
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def _read(self, query: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._connection()
        conn.execute("BEGIN")
        try:
            return query(conn)
        finally:
            conn.execute("COMMIT")

    async def run(self, query: Callable[[sqlite3.Connection], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._read, query)

    def call(self, query: Callable[[sqlite3.Connection], T]) -> T:
        return self._executor.submit(self._read, query).result()

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
