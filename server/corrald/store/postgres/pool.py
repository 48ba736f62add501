"""This daemon's pool of writers on a PostgreSQL board (`WriterConfig.writers`), each
writer thread with its own connection, draining the writer's one queue.

The board's write lock (storage.py) still orders their transactions, so the pool
pipelines them: when one writer's batch takes no more jobs while more are waiting, the
next writer opens its transaction for them, its BEGIN waiting for the lock on the server
while the first commits and answers, and it takes its first job only once the lock is
its own; so one owner's jobs run in the order they were queued. One writer at a time
takes jobs or waits for them (the turn), so batches are not split among idle writers,
and no writer opens a transaction for jobs that the running batch will take. With
nothing waiting, a writer keeps the turn and takes the next job itself, as a lone writer
would: another would only add a thread's wake-up and a connection's cold caches
(measured: 0.9x the Session cycles of one writer when the turn went round).

Each batch answers its callers and tells its wake-ups in the order the batches
committed (commit tickets), so a stream never learns of a later commit before an
earlier one. Other daemons write the board too, so what a transaction's jobs learn of
the leases and time gates holds for that transaction only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ...txn import DeadlineWatch


class WriterPool:
    """The turn and the commit tickets the pool's writers share; `shifts`, one per writer."""

    def __init__(self, commit: Callable[[Any], None], writers: int, jobs_waiting: Callable[[], bool]) -> None:
        if writers < 1:
            raise ValueError(f"{writers} writers: a PostgreSQL board has 1 or more")
        self._commit = commit
        self._jobs_waiting = jobs_waiting
        self._turn = threading.Lock()
        # A ticket is taken with the COMMIT, under `_committing`; `_answered` counts the
        # tickets answered.
        self._committing = threading.Lock()
        self._order = threading.Condition()
        self._tickets = self._answered = 0
        self.shifts = [PoolShift(self) for _ in range(writers)]


class PoolShift:
    """One writer thread of the pool (a `Shift`)."""

    def __init__(self, pool: WriterPool) -> None:
        self._pool = pool
        self._has_turn = False  # it holds the pool's turn: it alone takes jobs or waits for them
        self._ticket = -1  # the place of its batch's commit, once committed

    def wait_turn(self) -> None:
        if not self._has_turn:
            self._pool._turn.acquire()
            self._has_turn = True

    def batch_closed(self) -> None:
        # Jobs are waiting that this batch will not take: the next writer opens its
        # transaction for them now, while this one commits.
        if self._has_turn and self._pool._jobs_waiting():
            self.leave()

    def leave(self) -> None:
        if self._has_turn:
            self._has_turn = False
            self._pool._turn.release()

    def watches(self) -> tuple[DeadlineWatch, DeadlineWatch]:
        return DeadlineWatch(), DeadlineWatch()

    def commit(self, conn: Any) -> None:
        pool = self._pool
        with pool._committing:
            pool._commit(conn)
            self._ticket, pool._tickets = pool._tickets, pool._tickets + 1

    @contextmanager
    def answering(self) -> Iterator[None]:
        """After every batch that committed before its own (a batch that did not commit told
        nothing, and needs no turn)."""
        ticket, self._ticket = self._ticket, -1
        if ticket < 0:
            yield
            return
        order = self._pool._order
        with order:
            order.wait_for(lambda: self._pool._answered == ticket)
        try:
            yield
        finally:
            with order:
                self._pool._answered += 1
                order.notify_all()
