"""Read-only connections for queries; every read is one short transaction.

Reads run on a small thread pool so they never block the event loop, and a
cursor is never held across an `await` (a held read transaction would pin the
WAL and stall checkpoints, or on PostgreSQL hold back vacuum). Each thread keeps
one connection, opened by `open_reader`, and opens another when it breaks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .errors import Unavailable

T = TypeVar("T")


class ReaderPool:
    def __init__(self, open_reader: Callable[[], Any], *, size: int = 4, begin: str = "BEGIN") -> None:
        self._open_reader = open_reader
        self._begin = begin  # the statement that opens one read's transaction
        self._local = threading.local()
        self._connections: list[Any] = []
        self._lock = threading.Lock()
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=size, thread_name_prefix="corral-reader")
        self.size = size
        self.in_use = 0  # reads running now (GetStats)

    def _connection(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is not None and getattr(conn, "broken", False):  # a PostgreSQL connection lost
            # Forgotten before another is opened: that fails while the server is away, and
            # the next read on this thread must try again, not find the lost one.
            self._local.conn = None
            with self._lock:
                self._connections.remove(conn)
            conn = None
        if conn is None:
            conn = self._open_reader()
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def _read(self, query: Callable[[Any], T]) -> T:
        # A PostgreSQL connection may be cut under a read (a server restart): a read
        # changes nothing, so it runs once more on a new connection, and past that the
        # caller hears UNAVAILABLE. (A SQLite connection never breaks this way.)
        with self._lock:
            self.in_use += 1
        try:
            for attempt in (1, 2):
                conn = self._connection()
                try:
                    conn.execute(self._begin)
                    try:
                        return query(conn)
                    finally:
                        if conn.in_transaction:
                            conn.execute("COMMIT")
                except Exception as error:
                    if not getattr(conn, "broken", False):
                        raise
                    if attempt == 2:
                        raise Unavailable(f"the board's database cannot be read now: {error}") from None
            raise AssertionError("unreachable")
        finally:
            with self._lock:
                self.in_use -= 1

    async def run(self, query: Callable[[Any], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._read, query)

    def call(self, query: Callable[[Any], T]) -> T:
        return self._executor.submit(self._read, query).result()

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
