"""A savepoint per job: how a batch keeps a failing job's writes from the others
where a savepoint costs next to nothing (SQLite, in process), and on PostgreSQL once a
batch runs again after a job failed having written (store/postgres/runs.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..txn import Txn
from .driver import Queued


class Savepoints:
    """Each job inside a savepoint of its own, rolled back to if the job fails (a `JobGuard`)."""

    together = 0  # no statement runs for several jobs

    def before(self, conn: Any, now_ms: int, batch: Sequence[Queued], index: int, fill: Callable[[], None]) -> float:
        return 0.0

    def run(self, conn: Any, tx: Txn, batch: Sequence[Queued], index: int) -> tuple[bool, Any]:
        conn.execute("SAVEPOINT job")
        try:
            value = batch[index].run(tx)
        except Exception as error:
            if conn.in_transaction:  # else the whole batch failed with it
                conn.execute("ROLLBACK TO job")
                conn.execute("RELEASE job")
            return False, error
        conn.execute("RELEASE job")
        return True, value


SAVEPOINTS = Savepoints()  # it keeps no state: one serves every batch
