"""The board's reads: each a query on a reader connection, never the writer's. `Board`
takes them from here, so that the board's writes stay together in board.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from . import stats
from .model import AttemptRecord, FeedPage, TaskPage, TaskRecord, TaskState, TeammateRecord, WaitingFor
from .stats import BoardOverview, BoardStats
from .store import output, overview, tasks, team
from .store.tasks import artifact_refs

if TYPE_CHECKING:
    from .config import Limits
    from .readers import ReaderPool
    from .store.driver import BoardDriver
    from .store.postgres.listener import WakeListener
    from .writer import Writer

T = TypeVar("T")


class BoardReads:
    """What the board answers from a read: tasks, teammates, the feed, the overview, stats."""

    limits: Limits
    readers: ReaderPool | None
    driver: BoardDriver
    writer: Writer
    listener: WakeListener | None

    async def read(self, query: Callable):
        assert self.readers is not None
        return await self.readers.run(query)

    def call_read(self, query: Callable[..., T]) -> T:
        """A read from any thread, blocking it until answered."""
        assert self.readers is not None
        return self.readers.call(query)

    async def get_task(self, task_id: str) -> TaskRecord:
        return await self.read(lambda conn: tasks.get_task(conn, task_id))

    async def task_history(self, task_id: str) -> tuple[TaskRecord, list[AttemptRecord], WaitingFor | None]:
        """The task with its artifacts, its most recent claims (oldest first) and what it
        waits for (a read)."""

        def query(conn):
            record, attempts, waiting = tasks.task_history(conn, task_id)
            return artifact_refs.with_artifacts(conn, [record])[0], attempts, waiting

        return await self.read(query)

    async def output_attempt(self, task_id: str, attempt: int, reader: str | None) -> output.OutputAttempt:
        """The claim whose output TailOutput reads (see `output.find_attempt`; `reader`: a
        teammate, who may read only its own tasks and their dependencies)."""
        return await self.read(lambda conn: output.find_attempt(conn, task_id, attempt, reader))

    async def read_output(self, fence: int, offset: int, limit: int) -> output.OutputPage:
        """Up to `limit` bytes of a claim's output from `offset` (a read)."""
        chunk_max = self.limits.output_append_max_bytes
        return await self.read(lambda conn: output.read_output(conn, fence, offset, limit, chunk_max))

    async def list_tasks(
        self, *, states: Sequence[TaskState], owner: str, after_seq: int, limit: int, max_bytes: int
    ) -> TaskPage:
        """A page of tasks chosen within `max_bytes` before any payload is read, each with its
        artifacts (a read: one statement more for the page's artifacts)."""

        def query(conn) -> TaskPage:
            page = tasks.list_tasks(
                conn, states=states, owner=owner, after_seq=after_seq, limit=limit, max_bytes=max_bytes
            )
            return dataclasses.replace(page, tasks=artifact_refs.with_artifacts(conn, page.tasks))

        return await self.read(query)

    async def list_teammates(self, after: int = 0, limit: int = -1) -> list[tuple[int, TeammateRecord]]:
        """Teammates in the order they were added, each with its position (a page cursor)."""
        return await self.read(lambda conn: team.list_teammates(conn, after, limit))

    async def work_waited_for(self, name: str, roles: tuple[str, ...]) -> list[str]:
        """Some unfinished tasks this teammate could still take; empty when none remains (a read)."""
        return await self.read(lambda conn: tasks.work_waited_for(conn, name, roles, limit=1))

    async def teammate_roles(self, name: str) -> tuple[str, ...]:
        return await self.read(lambda conn: team.roles_of(conn, name))

    async def read_feed(self, after_seq: int, limit: int, max_bytes: int) -> FeedPage:
        """Events after `after_seq` with the task or teammate each one is about (a read:
        `overview.feed_page`)."""
        return await self.read(lambda conn: overview.feed_page(conn, after_seq, limit, max_bytes))

    async def overview(self, graph_limit: int, claims_limit: int = 2000) -> BoardOverview:
        """The board for a page, in one read transaction (see `BoardOverview`)."""

        page_max = self.limits.page_size_max
        return await self.read(
            lambda conn: stats.overview(conn, graph_limit, claims_limit, page_max, self._stats(conn))
        )

    async def task_rows(self, after_seq: int, limit: int) -> list[dict[str, object]]:
        """A page of the board as the page's table shows it (a read)."""
        return await self.read(lambda conn: overview.task_rows(conn, after_seq, limit))

    async def last_event_seq(self) -> int:
        return await self.read(overview.last_event_seq)

    def _stats(self, conn) -> BoardStats:
        return stats.read(conn, self.driver, self.writer, self.readers, self.listener)

    async def stats(self) -> BoardStats:
        return await self.read(self._stats)

    def stats_blocking(self) -> BoardStats:
        """`stats` for a thread off the event loop (the metrics endpoint); the board must be open."""
        assert self.readers is not None
        return self.readers.call(self._stats)
