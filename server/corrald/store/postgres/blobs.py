"""A PostgreSQL board's artifact bytes: rows of the board's database, so every daemon
of the board serves every artifact.

An upload is a row of `artifact_uploads` and its chunks (`artifact_chunks`, at most
`CHUNK_BYTES` each, keyed by the offset they start at), each written in a small
transaction of its own on a connection that is not the writer's, as the bytes
arrive. Once all are in, the upload's SHA-256 is set: it is complete, and only then
may the writer's attach job name it. A content already complete is not kept twice:
the later upload's rows are removed and the earlier one is marked as this daemon's
again (so no other daemon's start removes it before the attach).

Rows no artifact names (an upload cut short or refused at its attach) are removed at
a daemon's start when the daemon that wrote them no longer serves the board (it is
not in `daemons`: it stopped, or was silent for `DAEMON_GONE_MS`): a daemon still
serving it may be between the upload and its attach. Every method blocks: the
daemon calls them off its event loop.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable

import psycopg

from ...errors import Unavailable
from .sql import PgConnection

log = logging.getLogger("corrald.store")

CHUNK_BYTES = 1024 * 1024
_NOW_MS = "(extract(epoch from clock_timestamp()) * 1000)::bigint"
# Uploads no artifact names, written by a daemon that no longer serves the board.
_ORPHANS = (
    "SELECT u.id FROM artifact_uploads AS u WHERE u.daemon NOT IN (SELECT id FROM daemons)"
    " AND (u.sha256 IS NULL OR NOT EXISTS (SELECT 1 FROM artifact_contents AS c WHERE c.sha256 = u.sha256))"
)
_KEPT_CONNECTIONS = 4


class PgUpload:
    """One upload's rows, written as its bytes arrive (at most one chunk held here)."""

    def __init__(self, blobs: PgBlobs) -> None:
        self._blobs = blobs
        self._conn = blobs.connection()
        self._pending = bytearray()
        self._pos = 0
        row = self._conn.execute(
            f"INSERT INTO artifact_uploads (daemon, start_ms) VALUES (%s, {_NOW_MS}) RETURNING id",
            (blobs.daemon_id,),
        ).fetchone()
        assert row is not None
        self._id: int = row[0]

    def write(self, data: bytes) -> None:
        self._pending += data
        while len(self._pending) >= CHUNK_BYTES:
            self._flush(CHUNK_BYTES)

    def _flush(self, size: int) -> None:
        chunk = bytes(self._pending[:size])
        del self._pending[:size]
        self._conn.execute(
            "INSERT INTO artifact_chunks (upload, pos, data) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            (self._id, self._pos, chunk),
        )
        self._pos += len(chunk)

    def finish(self, sha256: str) -> None:
        """Marks the upload complete under its content's SHA-256 (or, that content being
        complete already, removes this one's rows and keeps that one)."""
        if self._pending:
            self._flush(len(self._pending))
        try:
            changed = self._conn.execute(
                "UPDATE artifact_uploads SET sha256 = %s, size = %s WHERE id = %s", (sha256, self._pos, self._id)
            ).rowcount
        except psycopg.errors.UniqueViolation:
            self._remove()
            changed = self._conn.execute(
                f"UPDATE artifact_uploads SET daemon = %s, start_ms = {_NOW_MS} WHERE sha256 = %s",
                (self._blobs.daemon_id, sha256),
            ).rowcount
        self._done()
        if changed != 1:  # removed by another daemon's start, this one having seemed gone
            raise Unavailable("the upload's stored bytes were removed before it completed; send it again")

    def abort(self) -> None:
        try:
            self._remove()
        finally:
            self._done()

    def _remove(self) -> None:
        self._conn.execute("DELETE FROM artifact_chunks WHERE upload = %s", (self._id,))
        self._conn.execute("DELETE FROM artifact_uploads WHERE id = %s", (self._id,))

    def _done(self) -> None:
        self._blobs.give_back(self._conn)


class PgBlobs:
    """The artifact rows of a board, written on connections of their own (a few kept)."""

    def __init__(self, connect: Callable[[], PgConnection], daemon_id: str) -> None:
        self._connect = connect
        self.daemon_id = daemon_id
        self._idle: queue.LifoQueue[PgConnection] = queue.LifoQueue()

    def connection(self) -> PgConnection:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            return self._connect()

    def give_back(self, conn: PgConnection) -> None:
        if not conn.reusable or self._idle.qsize() >= _KEPT_CONNECTIONS:
            conn.close()
        else:
            self._idle.put(conn)

    def prepare(self, named: Callable[[], set[str]]) -> None:
        """Removes the uploads no artifact names whose daemon no longer serves the board."""
        conn = self.connection()
        try:
            conn.execute("BEGIN")
            orphans = [upload for (upload,) in conn.execute(_ORPHANS).fetchall()]
            if orphans:
                conn.execute("DELETE FROM artifact_chunks WHERE upload = ANY(%s)", (orphans,))
                conn.execute("DELETE FROM artifact_uploads WHERE id = ANY(%s)", (orphans,))
            # Chunks whose upload row is gone (removed while its daemon seemed gone).
            conn.execute(
                "DELETE FROM artifact_chunks AS k WHERE NOT EXISTS"
                " (SELECT 1 FROM artifact_uploads AS u WHERE u.id = k.upload)"
            )
            conn.execute("COMMIT")
        finally:
            self.give_back(conn)
        if orphans:
            log.info("removed %d artifact uploads no artifact names (cut short or refused)", len(orphans))

    def begin(self) -> PgUpload:
        return PgUpload(self)

    def read(self, conn: PgConnection, sha256: str, offset: int, limit: int) -> bytes:
        """Up to `limit` bytes of the content from `offset`: fewer at the end of the chunk
        holding `offset` (the caller asks again from there). Chunks are stored
        uncompressed, so only the slice is read."""
        row = conn.execute(
            "SELECT substring(k.data FROM (%s - k.pos + 1)::integer FOR %s::integer) FROM artifact_chunks AS k"
            " WHERE k.upload = (SELECT id FROM artifact_uploads WHERE sha256 = %s) AND k.pos <= %s"
            " ORDER BY k.pos DESC LIMIT 1",
            (offset, limit, sha256, offset),
        ).fetchone()
        return b"" if row is None else bytes(row[0])

    def contents(self, conn: PgConnection) -> set[str]:
        return {sha for (sha,) in conn.execute("SELECT sha256 FROM artifact_uploads WHERE sha256 IS NOT NULL")}

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return
