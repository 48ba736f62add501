"""Runs of mergeable jobs in one statement: this driver's batching strategy.

A Session completion's statement costs the server more to start and finish than
to run, and a group commit holds many of them. So the writer, given a `MergedRuns`
for an attempt of a batch (`PgStorage.merged_runs`), runs the first statement of
a run of mergeable jobs (`model.Mergeable`, `fused.complete_many`) once, ahead of
them, and each job then finds its row there (`Txn.ahead`) and goes on as if it had
run its own statement. SQLite, whose statements cost nothing but their own work,
has no such strategy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...model import RanAhead, Wakes
from ..driver import Queued


class MergedRuns:
    """The runs of mergeable jobs one attempt of a batch has run ahead: a run is the jobs
    queued one after another from its first, with the same statement, of distinct
    subjects. Each job takes its result as it runs, and learns whether the jobs run
    since the run's statement changed its subject's rows."""

    def __init__(self) -> None:
        self._until = 0  # the batch's jobs before this index are in a run, or not mergeable
        self._results: dict[int, Any] = {}
        self._touched: set[str] | None = set()  # None: anyone's rows may have changed
        self.together = 0  # jobs that took a run's result

    def may_start(self, batch: Sequence[Queued], index: int) -> bool:
        return index >= self._until and batch[index].merge is not None

    def start(self, conn: Any, now_ms: int, batch: Sequence[Queued], index: int) -> list[int]:
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

    def take(self, batch: Sequence[Queued], index: int) -> RanAhead | None:
        merge = batch[index].merge
        if index not in self._results or merge is None:
            return None
        fresh = self._touched is not None and merge.subject not in self._touched
        return RanAhead(merge.request, self._results.pop(index), fresh)

    def ran(self, queued: Queued, wakes: Wakes | None) -> None:
        """Notes whose rows the job just run changed, while jobs of its run are still to run
        (all of them mergeable: a run is never broken by another job)."""
        if not self._results or wakes is None or self._touched is None:
            return
        assert queued.merge is not None
        touched = queued.merge.touched(wakes)
        if touched is None:
            self._touched = None
        else:
            self._touched.update(touched)
