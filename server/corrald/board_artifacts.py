"""The board's artifacts (PutArtifact, GetArtifact): the claim checked on the reader
pool, bytes stored by the driver's blob store off the event loop, the attach a writer
job, reads on the reader pool. `Board` takes them from here."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .model import ArtifactRecord
from .store import artifacts
from .store.artifacts import Uploaded  # what an upload stored, as the service hands it over

if TYPE_CHECKING:
    from .clock import Clock
    from .config import Limits
    from .readers import ReaderPool
    from .writer import Writer


class BoardArtifacts:
    """What the board does for artifacts; `blobs` is the driver's blob store
    (store/sqlite/blobs.py, store/postgres/blobs.py)."""

    clock: Clock
    limits: Limits
    readers: ReaderPool | None
    writer: Writer
    blobs: Any
    read: Callable[[Callable[[Any], Any]], Awaitable[Any]]  # BoardReads'

    async def check_artifact_claim(self, name: str, task_id: str, token: str) -> None:
        """Raises as a stale call is refused unless the caller's claim is live: an upload's
        header is checked before any of its bytes are read. A read, not a writer job: the
        attach checks the claim again in the writer, so an upload whose claim ends while
        its bytes arrive is refused there."""
        now_ms = self.clock.now_ms()
        await self.read(lambda conn: artifacts.check_claim(conn, now_ms, name, task_id, token))

    async def begin_upload(self) -> Any:
        """A new upload of the blob store (its write, finish and abort block: call them
        off the loop, as this does)."""
        return await asyncio.to_thread(self.blobs.begin)

    async def attach_artifact(self, name: str, task_id: str, token: str, upload: Uploaded) -> ArtifactRecord:
        """Attaches stored content to the task (see `artifacts.attach`): one writer job that
        copies no bytes."""
        quota = self.limits.artifact_store_max_bytes
        return await self.writer.run(lambda tx: artifacts.attach(tx, name, task_id, token, upload, quota))

    async def find_artifact(self, task_id: str, name: str, reader: str | None) -> ArtifactRecord:
        """The task's current artifact of that name (`reader`: a teammate, who may read only
        its own tasks and their dependencies)."""
        return await self.read(lambda conn: artifacts.find(conn, task_id, name, reader))

    async def read_artifact(self, sha256: str, offset: int, limit: int) -> bytes:
        """Up to `limit` bytes of stored content from `offset`, on a reader's thread (fewer
        than asked is no end: ask again from there until the artifact's size)."""
        return await self.read(lambda conn: self.blobs.read(conn, sha256, offset, limit))
