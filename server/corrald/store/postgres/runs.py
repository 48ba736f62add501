"""A batch's first attempt on PostgreSQL: no savepoints, and runs of mergeable jobs in
one statement. This driver's batching strategy (a `JobGuard`).

A savepoint costs two round trips per job, so jobs run without one: a job that fails
before it wrote anything needs no rollback, and one that fails having written (or whose
statement failed) makes its batch run again (`Rerun`), then with a savepoint per job
(store/guard.py). Jobs are whole transaction bodies, so running them again is safe; most
failures (a stale token, a missing task) are found before the first write.

A Session completion's statement costs the server more to start and finish than
to run, and a group commit holds many of them. So the first statement of a run of
mergeable jobs (`txn.Mergeable`, `steps.complete_many`) runs once, ahead of them,
and each job then finds its row there (`Txn.ahead`) and goes on as if it had run its
own statement. A job of a run that fails makes its batch run again, with savepoints
and so without runs: its share was written before it ran. SQLite, whose statements
cost nothing but their own work, has no such strategy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...txn import RanAhead, Txn
from ..driver import Queued, Rerun


class MergedRuns:
    """One attempt of a batch, unguarded, with the runs of mergeable jobs it has run ahead:
    a run is the jobs queued one after another from its first, with the same statement,
    of distinct subjects. Each job takes its result as it runs, and learns whether the
    jobs run since the run's statement changed its subject's rows."""

    def __init__(
        self, timer: Callable[[], float], is_storage_error: Callable[[BaseException], bool], *, merging: bool = True
    ) -> None:
        self._timer = timer
        self._is_storage_error = is_storage_error
        self._merging = merging  # False: the benchmark's "merge" switch is off
        self._until = 0  # the batch's jobs before this index are in a run, or not mergeable
        self._results: dict[int, object] = {}
        self._shares: dict[int, float] = {}  # by job index: its share of its run's statement
        self._touched: set[str] | None = set()  # None: anyone's rows may have changed
        self.together = 0  # jobs that took a run's result

    def before(self, conn: Any, now_ms: int, batch: Sequence[Queued], index: int, fill: Callable[[], None]) -> float:
        if self._merging and index >= self._until:
            fill()  # the queued jobs join the run
            started = self._timer()
            try:
                run = self._start(conn, now_ms, batch, index)
            except Exception as error:
                if self._is_storage_error(error):
                    raise  # the database's, not the statement's: as for any job
                raise Rerun from error  # its jobs will each run their own
            # The run's statement is its jobs' writer time, in equal shares (fair queue, pacing).
            share = (self._timer() - started) / max(len(run), 1)
            self._shares.update(dict.fromkeys(run, share))
        return self._shares.pop(index, 0.0)

    def run(self, conn: Any, tx: Txn, batch: Sequence[Queued], index: int) -> tuple[bool, Any]:
        queued = batch[index]
        ahead = tx.ahead = self._take(queued, index) if self._results else None
        changes_before = conn.total_changes
        try:
            value = queued.run(tx)
            if tx.ahead is not None:  # its share of the run was written, and it did not take it
                raise RuntimeError("a job of a run did not take its result")
        except Exception as error:
            if not conn.in_transaction:
                return False, error  # the whole batch fails, and is logged once
            if ahead is not None or conn.total_changes != changes_before or conn.failed:
                raise Rerun from error  # (its share of a run's statement may have written)
            return False, error
        if self._results:
            self._ran(queued, tx)
        return True, value

    def _start(self, conn: Any, now_ms: int, batch: Sequence[Queued], index: int) -> list[int]:
        """Runs the run that begins at `index`, if it has more than one job; its jobs' indexes."""
        first = batch[index].merge
        assert first is not None
        run, subjects = [index], {first.subject}
        for later in range(index + 1, len(batch)):
            merge = batch[later].merge
            if merge is None or merge.run_many != first.run_many or merge.subject in subjects:
                break
            run.append(later)
            subjects.add(merge.subject)
        self._until = run[-1] + 1
        if len(run) < 2:
            return []  # one job runs its own statement
        requests = [merge.request for i in run if (merge := batch[i].merge) is not None]
        results = first.run_many(conn, now_ms, requests)
        self._results = dict(zip(run, results, strict=True))
        self._touched = set()
        self.together += len(run)
        return run

    def _take(self, queued: Queued, index: int) -> RanAhead[object, object] | None:
        merge = queued.merge
        if index not in self._results or merge is None:
            return None
        fresh = self._touched is not None and merge.subject not in self._touched
        return RanAhead(merge.request, self._results.pop(index), fresh)

    def _ran(self, queued: Queued, tx: Txn) -> None:
        """Notes whose rows the job just run changed, while jobs of its run are still to run
        (all of them mergeable: a run is never broken by another job)."""
        if self._touched is None:
            return
        assert queued.merge is not None
        touched = queued.merge.touched(tx.wakes)
        if touched is None:
            self._touched = None
        else:
            self._touched.update(touched)
