"""What GetStats, the metrics endpoint and the web board read of the board as a whole:
counts, the writer's and the reader pool's use, and a PostgreSQL board's health (its
driver's `health`), each in one read transaction."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from .model import HeldResource, TaskState, TeammateStatus, Usage
from .readers import ReaderPool
from .store import leases, status, tasks, usage
from .store import overview as pictures
from .store.driver import BoardDriver
from .writer import Writer, WriterStats

if TYPE_CHECKING:
    from .store.postgres.listener import WakeListener


@dataclasses.dataclass(frozen=True)
class BoardOverview:
    """The board as a page draws it, and the stats of the same read."""

    picture: pictures.BoardPicture
    stats: BoardStats


@dataclasses.dataclass(frozen=True)
class PostgresHealth:
    """A PostgreSQL board's side of GetStats (see store/postgres/store.py's `health`)."""

    listener_connected: bool
    listener_reconnects: int
    daemons: int
    oldest_transaction_s: float
    task_dead_tuples: int
    task_live_tuples: int
    notifies_sent: int
    notifies_heard: int
    # Pool use: the writer threads (each a connection) and how many are in a transaction
    # now; the reader connections and how many are reading now (this read among them).
    writers: int = 0
    writers_in_transaction: int = 0
    readers: int = 0
    readers_in_use: int = 0
    writable: bool = True
    commit_outcomes_asked: int = 0
    connections_cut: int = 0


@dataclasses.dataclass(frozen=True)
class BoardStats:
    tasks_by_state: dict[TaskState, int]
    teammates_by_status: dict[TeammateStatus, int]
    writer: WriterStats
    usage: Usage = Usage()
    store: str = "sqlite"
    postgres: PostgresHealth | None = None
    # The resources tasks IN_PROGRESS hold (at most leases.HELD_SHOWN), and their count.
    held_resources: tuple[HeldResource, ...] = ()
    held_resources_total: int = 0


def read(
    conn, driver: BoardDriver, writer: Writer, readers: ReaderPool | None, listener: WakeListener | None
) -> BoardStats:
    """The board's stats, read on `conn` (a read transaction)."""
    counts = tasks.count_by_state(conn), status.count_by_status(conn), writer.stats(), usage.board_total(conn)
    held, held_total = leases.held(conn)
    database = driver.health(conn)
    if database is None:
        return BoardStats(*counts, held_resources=tuple(held), held_resources_total=held_total)
    writing = counts[2]
    return BoardStats(
        *counts,
        held_resources=tuple(held),
        held_resources_total=held_total,
        store=driver.store_name,
        postgres=PostgresHealth(
            listener_connected=bool(listener is not None and listener.listening),
            listener_reconnects=listener.reconnects if listener is not None else 0,
            daemons=database.daemons,
            oldest_transaction_s=database.oldest_transaction_s,
            task_dead_tuples=database.task_dead_tuples,
            task_live_tuples=database.task_live_tuples,
            notifies_sent=database.notifies_sent,
            notifies_heard=listener.heard if listener is not None else 0,
            writers=writing.writers,
            writers_in_transaction=writing.writers_in_transaction,
            readers=readers.size if readers is not None else 0,
            readers_in_use=readers.in_use if readers is not None else 0,
            writable=database.writable,
            commit_outcomes_asked=database.commit_outcomes_asked,
            connections_cut=database.connections_cut,
        ),
    )


def overview(conn, graph_limit: int, claims_limit: int, page_max: int, stats: BoardStats) -> BoardOverview:
    """The board for a page (`store/overview.py`'s picture), with the stats of the same read."""
    return BoardOverview(pictures.board_picture(conn, graph_limit, claims_limit, page_max), stats)
