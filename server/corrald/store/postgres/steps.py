"""The steps of the store's verbs that each driver takes its own way, on PostgreSQL: each
one statement (`store.driver.DriverSteps`), of the data-modifying WITH clauses of fused.py.

Over a network each statement is a round trip, so a claim, a completion, the opening of
time gates and a teammate's delivery view with its held claims are one statement each
here, where SQLite's driver runs plain statements in turn (store/sqlite/steps.py). A run
of Session completions queued together is one statement too (`complete_many`): this
driver's batching strategy (runs.py), which `PostgresBoard.merged_completion` offers
the writer.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Sequence

from ...leasepaths import WantedPath, probes
from ...model import ClaimOutcome, Completion, DeliveryView, OpCompletion, TaskRecord
from ...txn import PendingOpRecord, Txn
from .. import keys, leases, ops
from .. import usage as spending
from ..driver import ClaimTaken, ClaimToComplete, CompletedAtOnce, GatesOpened, ReadyCandidate, TaskCompleted
from ..tasks.claims import delivery_view_with_claims, pick_ready, ready_query
from ..tasks.rows import TASK_WIDTH, rows_by_id, task_record
from . import fused
from .lease_queries import ANY_CONFLICT
from .queries import RECORD_OP


@dataclasses.dataclass(frozen=True, slots=True)
class CompletionRead:
    """What a Session completion's statement returned (`complete_if_live`'s own, or the
    job's row of `complete_many`'s): the op record's seq (None: the op id was taken); the
    task it completed (None: the token held no live claim of it) with its concurrency
    key, its freed dependents and the ended claim's fence; and the columns of the
    teammate's delivery view read beside it (read into a view only when it is wanted and
    still the board's: a removed teammate's raises)."""

    op_seq: int | None
    task: TaskRecord | None
    key: str
    dependents: list[ReadyCandidate]
    fence: int
    view_columns: tuple[object, ...]


def _completion_read(op_seq: int | None, done: tuple) -> CompletionRead:
    """From a completion's row after the op record's seq: the task's columns (one of them
    the dependency list), its concurrency key, its freed dependents, the ended claim's
    fence; then the view, if read."""
    completed = done[0] is not None
    return CompletionRead(
        op_seq,
        task_record(done[:TASK_WIDTH]) if completed else None,
        done[TASK_WIDTH] or "",
        _freed(done[TASK_WIDTH + 1]),
        done[TASK_WIDTH + 2] or 0,
        tuple(done[TASK_WIDTH + 3 :]),
    )


def claim_first_ready(tx: Txn, roles: tuple[str, ...], token: str, teammate: str) -> ClaimTaken | None:
    """The first ready task, claimed in one statement unless it has resources; then the
    scan of store/leases.py picks the task, and a second statement claims it."""
    now = tx.now_ms
    claim_params = (token, teammate, now, teammate, now, now, now, now)
    ready, allowed = ready_query(tx.conn, roles)
    row = tx.conn.execute(fused.claim_first_ready(ready), (*allowed, *claim_params)).fetchone()
    if row is None:
        return None
    if row[-2] is None:  # not claimed: the first ready task has resources
        picked = pick_ready(tx.conn, roles, probe_first=False)  # this statement read it
        if picked is None:
            return None
        row = tx.conn.execute(fused.claim_first_ready(fused.READY_BY_SEQ), (picked[0], *claim_params)).fetchone()
        if row is None or row[-2] is None:
            raise RuntimeError(f"claim of task seq {picked[0]} changed no row")
    tx.wakes.events = True
    return ClaimTaken(task_record(row[:TASK_WIDTH]), row[-2], row[-1])


def complete_if_live(
    tx: Txn, completion: Completion, op_record: PendingOpRecord | None, *, view_after: bool
) -> CompletedAtOnce | None:
    """A completion without usage, checked and done in one statement; None if the token
    holds no live claim of the task (then nothing but a Session op's record is written,
    and the general path says why). A Session op's record not written yet is written by
    the same statement, and the op is found to have run before if it is taken. With
    `view_after`, the statement also reads the teammate's delivery view as the completion
    leaves it."""
    record = op_record if op_record is not None and op_record.seq is None else None
    read: CompletionRead | None
    ahead = tx.ahead
    if ahead is not None:  # the writer ran this statement already, for a run of jobs (`complete_many`)
        assert record is not None, "a run's completions are Session ops"
        assert ahead.request == OpCompletion(record.op_id, record.digest, completion), "not this job's"
        assert isinstance(ahead.row, CompletionRead)
        read = ahead.row
        # Unless asked for and still the board's, what it read of the view is not used.
        view_columns = read.view_columns if view_after and ahead.fresh else ()
        tx.ahead = None  # taken (the writer checks)
    else:
        now = tx.now_ms
        name = completion.teammate
        params = (
            *(_record_params(record) if record is not None else ()),
            *(completion.task_id, completion.token, name, now),  # live
            *(ClaimOutcome.COMPLETED.value, now, ""),  # ended
            *(completion.result, now),  # done
            now,  # logged
            *((name, now, name) if view_after else ()),  # the view
        )
        statement = fused.complete_if_live(record is not None, fused.VIEW_BESIDE_COMPLETION if view_after else None)
        row = tx.conn.execute(statement, params).fetchone()
        read = None if row is None else _completion_read(row[0], row[1:])
        view_columns = () if read is None else read.view_columns
    if record is not None:
        ops.record_written(tx, record, read.op_seq if read is not None else None)  # raises if the op ran before
    if read is None or read.task is None:
        return None
    _claim_completed(tx, read.task, read.fence, read.key)
    return CompletedAtOnce(read.task, read.dependents, _view_read(completion.teammate, view_columns))


def _claim_completed(tx: Txn, task: TaskRecord, fence: int, key: str) -> None:
    """What a completion's statement (which ended claim `fence`, completed `task` and logged
    its event) leaves to tell: the event, the output's followers, the freed key and resources."""
    tx.wakes.events = True
    tx.wakes.output.add(fence)  # its output's followers read to its end
    if key:
        keys.freed(tx, key)
    if task.resources or task.shared_resources:
        leases.freed_by_task(tx, task.seq)


def _record_params(record: PendingOpRecord) -> tuple[str, str, bytes, int]:
    """A Session op's record as `INSERT_OP`'s parameters (`RECORD_OP`, fused.RECORD_CLAUSE)."""
    return record.teammate, record.op_id, record.digest, record.done_ms


def _freed(rows: list[list] | None) -> list[ReadyCandidate]:
    """The dependents a statement freed, from its JSON list of their rows (`fused._FREED_JSON`; NULL: none)."""
    return [ReadyCandidate(*freed) for freed in rows] if rows else []


def _view_read(name: str, columns: tuple[object, ...]) -> DeliveryView | None:
    """The delivery view a completion's statement read, or None if it read none (or found no row)."""
    if not columns or all(value is None for value in columns):
        return None
    return delivery_view_with_claims(name, columns)


def complete_live_claim(tx: Txn, claim: ClaimToComplete) -> TaskCompleted:
    seq, fence, key, usage, now = claim.seq, claim.fence, claim.key, claim.usage, tx.now_ms
    sums, sum_params = spending.task_sums(tx.conn, usage)
    row = tx.conn.execute(
        fused.complete_claim(sums),
        (ClaimOutcome.COMPLETED.value, now, "", fence, claim.result, now, *sum_params, seq, seq, now),
    ).fetchone()
    task = task_record(row[:-1])
    _claim_completed(tx, task, fence, key)
    return TaskCompleted(task, _freed(row[-1]))


def record_op(conn: sqlite3.Connection, record: PendingOpRecord) -> int | None:
    inserted = conn.execute(RECORD_OP, _record_params(record)).fetchone()
    return None if inserted is None else inserted[0]


def open_due_gates(tx: Txn) -> GatesOpened:
    # Every row carries the earliest gate left, the row of no gate opened too.
    rows = tx.conn.execute(fused.OPEN_GATES_AND_EARLIEST, (tx.now_ms, tx.now_ms)).fetchall()
    return GatesOpened([ReadyCandidate(*row[:4]) for row in rows if row[0] is not None], rows[0][4])


def view_for_delivery(conn: sqlite3.Connection, name: str, now_ms: int) -> DeliveryView:
    row = conn.execute(fused.VIEW_WITH_CLAIMS, (name, now_ms, name)).fetchone()
    return delivery_view_with_claims(name, row)


def complete_many(conn: sqlite3.Connection, now_ms: int, requests: list[OpCompletion]) -> list[CompletionRead]:
    """`complete_if_live`'s statement for each Session completion of a run at once, each
    writing its op's record and reading its teammate's view: what it read for each
    request, in order (the `Mergeable.run_many` of `PostgresBoard.merged_completion`).
    The requests' teammates are distinct."""
    completions = [request.completion for request in requests]
    rows = conn.execute(
        fused.complete_many(fused.VIEW_BESIDE_COMPLETIONS),
        {
            "teammates": [c.teammate for c in completions],
            "op_ids": [request.op_id for request in requests],
            "digests": [request.digest for request in requests],
            "task_ids": [c.task_id for c in completions],
            "tokens": [c.token for c in completions],
            "results": [c.result for c in completions],
            "now": now_ms,
            "completed": ClaimOutcome.COMPLETED.value,
        },
    ).fetchall()
    assert [row[0] for row in rows] == list(range(1, len(requests) + 1)), "one row per request, in order"
    return [_completion_read(row[1], row[3:]) for row in rows]  # after the request's number: the op's, done's


# The advisory lock of the board's dependency graph: one number per schema is enough,
# each board being its own schema (pg_advisory_xact_lock is per database).
_GRAPH_LOCK = "SELECT pg_advisory_xact_lock(hashtext(current_schema() || ':graph'))"


def held_conflict(conn: sqlite3.Connection, wants: Sequence[WantedPath]) -> bool:
    """One statement for all of a task's paths (each statement is a round trip)."""
    return conn.execute(ANY_CONFLICT, (json.dumps(probes(wants)),)).fetchone() is not None


def lock_graph(tx: Txn) -> None:
    """Waits for the other writers' edits of the graph (of this daemon or another) to commit."""
    tx.conn.execute(_GRAPH_LOCK)


def inserted_seqs(conn: sqlite3.Connection, ids: list[str]) -> dict[str, int]:
    """Other daemons' writers insert beside this one, so the seqs are read back."""
    return {task_id: row.seq for task_id, row in rows_by_id(conn, ids).items()}
