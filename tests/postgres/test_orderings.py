"""The orderings that keep design §2 across the daemons of one PostgreSQL board, each
forced: a transaction on one daemon's writer is held open after its write, the
other daemon's transaction is started against it, and the test sees that one
wait for the other (a backend waiting on a lock) before it lets the first commit.

1. A claim for a teammate against a shutdown request for it: the claim that waited
   delivers the request, and claims nothing.
2. A new task's dependency against that dependency's completion, in both orders:
   the new task is ready either way.
3. Two claims at once: each gets a task of its own, never the same one.
4. The event log: an event committed later has a larger seq, so a reader resuming
   after seq N never misses one.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from corrald import delivery, validate
from corrald.clock import FakeClock
from corrald.config import Limits
from corrald.model import ClaimGrant, Completion, InboxItem, TaskState
from corrald.store import protocol, tasks, team
from corrald.store.postgres.target import PgTarget
from corrald.stream import StreamState
from tests.support import wait_until
from tests.support.boardkit import SyncBoard, spec
from tests.support.boards import qmarks
from tests.support.postgres import backends_waiting_for_a_lock, fresh_schema, run_database_dsn

pytestmark = pytest.mark.timeout(60)
WAIT = 15  # seconds for any single step


@pytest.fixture
def two_daemons() -> Iterator[tuple[SyncBoard, SyncBoard]]:
    """Two boards' writers on one schema, as two daemons of one board have. The first has
    one writer thread, so every backend that waits for a lock is the second daemon's."""
    target = PgTarget.parse(run_database_dsn(), schema=fresh_schema())
    clock = FakeClock()
    first = SyncBoard(target, clock, pg_writers=1).open()
    second = SyncBoard(target, clock).open()
    yield first, second
    second.dispose()
    first.dispose()
    with psycopg.connect(run_database_dsn(), autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {target.schema} CASCADE")


class Held:
    """A job run on one daemon's writer and held open after its write, before COMMIT."""

    def __init__(self, board: SyncBoard, write: Callable[[Any], Any]) -> None:
        self._wrote, self._go = threading.Event(), threading.Event()

        def job(tx) -> Any:
            value = write(tx)
            self._wrote.set()
            assert self._go.wait(WAIT), "the held transaction was never let go"
            return value

        self.future = board.board.writer.submit(job)
        assert self._wrote.wait(WAIT), "the held job never wrote"

    def commit(self) -> Any:
        self._go.set()
        return self.future.result(WAIT)


def waiting_for_a_lock(started: concurrent.futures.Future, *, or_done: bool = False) -> None:
    """Returns once a backend of this database waits for a lock held by another; fails if
    `started` finishes first (it did not wait for the held transaction), unless `or_done`."""
    with psycopg.connect(run_database_dsn(), autocommit=True) as conn:

        def someone_waits() -> bool:
            if or_done and started.done():
                return True
            assert not started.done(), f"it did not wait for the held transaction: {started.result()}"
            return backends_waiting_for_a_lock(conn) > 0

        wait_until(someone_waits, WAIT, "a backend waiting for the held transaction", interval=0.005)


def in_thread(call: Callable[[], Any]) -> concurrent.futures.Future:
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    future = executor.submit(call)
    executor.shutdown(wait=False)
    return future


def test_a_claim_waiting_for_a_shutdown_request_delivers_the_request_and_claims_nothing(two_daemons):
    here, there = two_daemons
    here.add("mate")
    here.create(spec("t1"))
    request = Held(here, lambda tx: protocol.request_shutdown(tx, "mate", "stop now", 60_000))
    stream = StreamState("mate")
    check = in_thread(lambda: there.call(lambda tx: delivery.next_for_teammate(tx, "mate", stream)))
    waiting_for_a_lock(check)
    request.commit()
    items = check.result(WAIT).items
    assert [item.kind for item in items if isinstance(item, InboxItem)] == ["shutdown_request"], items
    assert not [item for item in items if isinstance(item, ClaimGrant)], "a claim passed the shutdown gate"
    assert here.state("t1") == TaskState.PENDING


def claimed_dependency(board: SyncBoard) -> ClaimGrant:
    """Task d, claimed by teammate mate."""
    board.add("mate")
    board.create(spec("d"))
    grant = board.claim("mate")
    assert grant is not None
    return grant


def ready_and_claimed_next(here: SyncBoard, there: SyncBoard) -> None:
    """Task n waits for nothing, and is mate's next claim."""
    assert here.scalar("SELECT unmet_deps FROM tasks WHERE id = 'n'") == 0
    claimed = there.claim("mate")
    assert claimed is not None and claimed.task.id == "n"


def test_a_task_created_while_its_dependency_completes_elsewhere_is_ready(two_daemons):
    here, there = two_daemons
    grant = claimed_dependency(here)
    completion = Held(here, lambda tx: tasks.complete(tx, Completion("mate", "d", grant.token, b"done")))
    creation = in_thread(lambda: there.create(spec("n", "d")))
    waiting_for_a_lock(creation)
    completion.commit()
    creation.result(WAIT)
    ready_and_claimed_next(here, there)


def test_a_dependency_completing_while_a_task_is_created_on_it_elsewhere_readies_that_task(two_daemons):
    here, there = two_daemons
    grant = claimed_dependency(here)
    batch = validate.prepare_batch([spec("n", "d")], Limits(), here.clock.now_ms())
    creation = Held(here, lambda tx: tasks.create_batch(tx, batch))
    completion = in_thread(lambda: there.complete("mate", "d", grant.token))
    waiting_for_a_lock(completion)
    creation.commit()
    assert completion.result(WAIT).state == TaskState.COMPLETED
    ready_and_claimed_next(here, there)


def test_two_claims_at_once_on_two_daemons_take_two_tasks(two_daemons):
    here, there = two_daemons
    here.add("one")
    here.add("two")
    here.create(spec("t1"), spec("t2"))
    first = Held(here, lambda tx: tasks.claim_next(tx, "one", team.roles_of(tx.conn, "one")))
    second = in_thread(lambda: there.claim("two"))
    waiting_for_a_lock(second, or_done=True)  # it waits for the first, or passes over its task
    taken = {first.commit().task.id, second.result(WAIT).task.id}
    assert taken == {"t1", "t2"}
    assert here.scalar("SELECT count(*) FROM claims") == 2


def test_an_event_committed_later_has_the_larger_seq(two_daemons):
    here, there = two_daemons
    here.add("mate")
    last = here.scalar("SELECT coalesce(max(seq), 0) FROM events")
    first = Held(here, lambda tx: tasks.create_batch(tx, validate.prepare_batch([spec("a")], Limits(), 0)))
    second = in_thread(lambda: there.create(spec("b")))
    waiting_for_a_lock(second)
    # While the first is open, a reader resuming after `last` sees neither event.
    assert committed_events(here, last) == []
    first.commit()
    second.result(WAIT)
    created = [data for _, kind, data in committed_events(here, last) if kind == "task_changed"]
    assert [('"a"' in data, '"b"' in data) for data in created] == [(True, False), (False, True)], created


def committed_events(board: SyncBoard, after_seq: int) -> list[tuple[int, str, str]]:
    """What a Watch reader resuming after `after_seq` reads now (a reader's connection)."""
    query = "SELECT seq, kind, data FROM events WHERE seq > ? ORDER BY seq"
    return board.board.call_read(lambda conn: qmarks(conn).execute(query, (after_seq,)).fetchall())
