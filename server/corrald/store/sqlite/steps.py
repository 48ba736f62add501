"""The steps of the store's verbs that each driver takes its own way, on SQLite: plain
statements one after another (`store.driver.DriverSteps`).

A SQLite statement costs only its own work, with no round trip, so each step here is
the statements of `queries.py` in turn. PostgreSQL's driver takes each step in one
statement (store/postgres/steps.py); the names, arguments and results are the same.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence

from ...leasepaths import DESCENDANTS_END, WantedPath, ancestors_and_self
from ...model import ClaimOutcome, Completion, DeliveryView
from ...txn import PendingOpRecord, Txn
from .. import usage as spending
from ..driver import ClaimTaken, ClaimToComplete, CompletedAtOnce, GatesOpened, ReadyCandidate, TaskCompleted
from ..tasks.claims import delivery_view, held_claim_refs, pick_ready
from ..tasks.ends import end_claim
from ..tasks.rows import TASK_WIDTH, earliest_gate, task_changed, task_record
from .lease_queries import HELD_OVER_OR_UNDER
from .queries import (
    CLAIM_TASK,
    FREE_DEPENDENTS,
    INSERT_CLAIM,
    OPEN_GATES,
    RECORD_OP,
    VIEW_FOR_DELIVERY,
    complete_task,
)


def claim_first_ready(tx: Txn, roles: tuple[str, ...], token: str, teammate: str) -> ClaimTaken | None:
    # A SQLite cursor reads the scan's rows as they are asked for: its first row is the probe.
    picked = pick_ready(tx.conn, roles, probe_first=False)
    if picked is None:
        return None
    seq, failures, last_attempt = picked
    fence = tx.conn.execute(INSERT_CLAIM, (token, seq, teammate, failures + 1, tx.now_ms)).lastrowid
    assert fence is not None  # an INSERT's
    now = tx.now_ms
    claimed = tx.conn.execute(CLAIM_TASK, (teammate, fence, now, now, now, seq)).fetchall()
    if len(claimed) != 1:
        raise RuntimeError(f"claim of task seq {seq} changed {len(claimed)} rows")
    task_changed(tx, seq)
    return ClaimTaken(task_record(claimed[0]), fence, last_attempt)


def complete_if_live(
    tx: Txn, completion: Completion, record: PendingOpRecord | None, *, view_after: bool
) -> CompletedAtOnce | None:
    """None: here the check that the claim is live and the completion are the general
    path's statements (`tasks.complete_claim`), which cost no more taken in turn."""
    return None


def complete_live_claim(tx: Txn, claim: ClaimToComplete) -> TaskCompleted:
    seq, usage = claim.seq, claim.usage
    sums, sum_params = spending.task_sums(tx.conn, usage)
    # The task's row says whether it holds resources and has dependents: the claim's end
    # and the freeing of dependents run only the statements those call for.
    (row,) = tx.conn.execute(complete_task(sums), (claim.result, tx.now_ms, *sum_params, seq)).fetchall()
    task = task_record(row)
    end_claim(
        tx, claim.fence, ClaimOutcome.COMPLETED, key=claim.key, leased=bool(task.resources or task.shared_resources)
    )
    dependents = []
    if row[TASK_WIDTH]:
        dependents = [ReadyCandidate(*freed) for freed in tx.conn.execute(FREE_DEPENDENTS, (seq,))]
    task_changed(tx, seq)
    return TaskCompleted(task, dependents)


def record_op(conn: sqlite3.Connection, record: PendingOpRecord) -> int | None:
    # Without RETURNING, which costs SQLite as much again as the insert itself.
    inserted = conn.execute(RECORD_OP, (record.teammate, record.op_id, record.digest, record.done_ms))
    return inserted.lastrowid if inserted.rowcount == 1 else None


def open_due_gates(tx: Txn) -> GatesOpened:
    opened = [ReadyCandidate(*row) for row in tx.conn.execute(OPEN_GATES, (tx.now_ms,))]
    return GatesOpened(opened, earliest_gate(tx.conn))  # what follows writes events only


def view_for_delivery(conn: sqlite3.Connection, name: str, now_ms: int) -> DeliveryView:
    row = conn.execute(VIEW_FOR_DELIVERY, (name,)).fetchone()
    return DeliveryView(delivery_view(name, row), held_claim_refs(conn, name, now_ms))


def held_conflict(conn: sqlite3.Connection, wants: Sequence[WantedPath]) -> bool:
    """A statement per wanted path, which costs no round trip here: its ancestors' (and its
    own) equality lookups and its descendants' range, both served by the held table's key;
    it measured a third of the time of ANY_CONFLICT, one statement for all the paths."""
    for path, exclusive in wants:
        among = ancestors_and_self(path)
        query = _held_over_or_under(len(among))
        if conn.execute(query, (*among, path + "/", path + DESCENDANTS_END, exclusive)).fetchone() is not None:
            return True
    return False


@functools.lru_cache(maxsize=64)
def _held_over_or_under(depth: int) -> str:
    """The check of a path `depth` segments deep (one statement text per depth)."""
    return HELD_OVER_OR_UNDER.format(paths=", ".join("?" * depth))


def lock_graph(tx: Txn) -> None:
    """Nothing to take: the board's one writer runs one edit at a time."""


def inserted_seqs(conn: sqlite3.Connection, ids: list[str]) -> dict[str, int]:
    """The board's one writer inserted them alone: AUTOINCREMENT gave the rows consecutive seqs."""
    (last,) = conn.execute("SELECT last_insert_rowid()").fetchone()
    return dict(zip(ids, range(last - len(ids) + 1, last + 1), strict=True))
