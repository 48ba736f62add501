"""Creating a batch of tasks: idempotent by id and by request id, dependencies counted in one pass."""

from __future__ import annotations

import dataclasses
import json
import sqlite3

from ... import errors
from ...model import CreatedBatch, CreatedTask, TaskSpec, TaskState
from ...txn import Txn
from ...validate import PreparedBatch, batch_digest, spec_digest_with_trace
from .. import leases
from ..dialect import insert_rows, sql, steps
from .rows import BoardRow, rows_by_id, task_events
from .timegates import gate_shut

# A new task's row as both drivers insert it (`insert_rows`: COPY for many on PostgreSQL).
NEW_TASK_COLUMNS = (
    "id",
    "title",
    "description",
    "payload",
    "priority",
    "required_role",
    "max_attempts",
    "lease_ms",
    "spec_digest",
    "state",
    "unmet_deps",
    "create_ms",
    "not_before_ms",
    "retry_backoff_ms",
    "retry_backoff_max_ms",
    "ready_ms",
    "gate_shut",
    "trace_parent",
    "concurrency_key",
    "attempt_timeout_ms",
    "review_role",
    "review_max_rounds",
    "proposed_by",
    "discovered_from",
    "resources",
    "undecided",
)


@dataclasses.dataclass(frozen=True, slots=True)
class Origin:
    """Where a teammate's proposed batch comes from: who proposed it, the task whose
    claim it was discovered from ('' for none), and whether it waits for the Lead."""

    proposed_by: str
    discovered_from: str
    needs_decision: bool  # PROPOSED until the Lead decides; else PENDING at once


_THE_LEAD = Origin("", "", needs_decision=False)


def create_batch(tx: Txn, batch: PreparedBatch, request_id: str = "", origin: Origin = _THE_LEAD) -> CreatedBatch:
    """Adds a checked batch, all or nothing; an identical re-send changes nothing. A
    teammate's proposal (`origin`) enters PROPOSED where it waits for the Lead.

    Set-based, so the job's time grows with rows written, not with statements:
    one lookup of the batch's ids, one of the dependencies outside it, one
    INSERT per table, and the creation events written by SQL from the rows.
    """
    conn = tx.conn
    if request_id:
        row = conn.execute(sql(conn).CREATE_REQUEST, (request_id,)).fetchone()
        if row is not None:
            ids = json.loads(row[1])
            on_board = rows_by_id(conn, ids)
            if bytes(row[0]) != batch.digest and not _recorded_with_traces(conn, batch, bytes(row[0]), ids, on_board):
                raise errors.AlreadyExists(
                    f"request_id {request_id!r} was used for a different batch", field="request_id"
                )
            return CreatedBatch([_created(task_id, on_board[task_id]) for task_id in ids], tuple(ids))
    specs = batch.specs
    on_board = rows_by_id(conn, [spec.id for spec in specs])
    _refuse_changed_specs(changed_specs(conn, batch, on_board))
    new_specs = [(index, spec) for index, spec in enumerate(specs) if spec.id not in on_board]
    new_ids = {spec.id for _, spec in new_specs}
    # The dependencies' rows stay as read until this transaction ends: a completion of one
    # waits for it, and then counts down the new tasks too (docs/postgres.md, ordering 2).
    outside = rows_by_id(
        conn, list({dep for _, spec in new_specs for dep in spec.depends_on if dep not in new_ids}), lock="SHARE"
    )
    # A gate still shut counts as one more unmet dependency (schema migration 6).
    shut = [spec.not_before_ms is not None and spec.not_before_ms > tx.now_ms for _, spec in new_specs]
    unmet = [
        _unmet_deps(index, spec, new_ids, outside) + gated for (index, spec), gated in zip(new_specs, shut, strict=True)
    ]
    state = TaskState.PROPOSED if origin.needs_decision else TaskState.PENDING
    seq_of: dict[str, int] = {}
    if new_specs:
        insert_rows(
            conn,
            "tasks",
            NEW_TASK_COLUMNS,
            [
                (
                    spec.id,
                    spec.title,
                    spec.description,
                    spec.payload,
                    spec.priority,
                    spec.required_role,
                    spec.max_attempts,
                    spec.lease_ms,
                    batch.spec_digests[index],
                    int(state),
                    count,
                    tx.now_ms,
                    spec.not_before_ms,
                    spec.retry_backoff_ms,
                    spec.retry_backoff_max_ms,
                    spec.not_before_ms,
                    gated,
                    spec.trace_parent,
                    spec.concurrency_key,
                    spec.attempt_timeout_ms,
                    None if spec.review is None else spec.review.reviewer_role,
                    0 if spec.review is None else spec.review.max_rounds,
                    origin.proposed_by,
                    origin.discovered_from,
                    leases.stored(spec.resources, spec.shared_resources),
                    int(origin.needs_decision),
                )
                for (index, spec), count, gated in zip(new_specs, unmet, shut, strict=True)
            ],
        )
        for (_, spec), gated in zip(new_specs, shut, strict=True):
            if gated:
                assert spec.not_before_ms is not None
                gate_shut(tx, spec.not_before_ms)
        seq_of.update(steps(conn).inserted_seqs(conn, [spec.id for _, spec in new_specs]))
        seq_of.update((task_id, row.seq) for task_id, row in outside.items())
        insert_rows(
            conn,
            "deps",
            ("task_seq", "dep_seq", "position"),
            [
                (seq_of[spec.id], seq_of[dep], position)
                for _, spec in new_specs
                for position, dep in enumerate(spec.depends_on)
            ],
        )
        task_events(tx, [seq_of[spec.id] for _, spec in new_specs])
        for (_, spec), count in zip(new_specs, unmet, strict=True):
            if count == 0 and state is TaskState.PENDING:
                tx.wakes.ready_roles[spec.required_role] += 1
    if request_id:
        conn.execute(
            sql(conn).INSERT_CREATE_REQUEST,
            (request_id, batch.digest, json.dumps([spec.id for spec in specs])),
        )
    unchanged = tuple(spec.id for spec in specs if spec.id not in new_ids)
    created = [
        CreatedTask(spec.id, seq_of[spec.id], state, tx.now_ms, None, spec.max_attempts, spec.lease_ms)
        if spec.id in new_ids
        else _created(spec.id, on_board[spec.id])
        for spec in specs
    ]
    return CreatedBatch(created, unchanged)


def _created(task_id: str, row: BoardRow) -> CreatedTask:
    return CreatedTask(task_id, row.seq, row.state, row.create_ms, row.finish_ms, row.max_attempts, row.lease_ms)


def changed_specs(
    conn: sqlite3.Connection, batch: PreparedBatch, on_board: dict[str, BoardRow]
) -> list[tuple[int, str]]:
    """The specs of the batch whose id is on the board with a different spec, as (index, id).

    The trace context is not part of a spec (validate.spec_digest), but earlier versions
    counted it: a task they created with one keeps a digest of its spec with that trace
    context, the one stored with it. Such a digest is made again before a spec is called
    different; only a digest that differs is looked at, so a plain resend reads nothing more.
    """
    differing = [
        (index, spec.id)
        for index, (spec, digest) in enumerate(zip(batch.specs, batch.spec_digests, strict=True))
        if spec.id in on_board and on_board[spec.id].spec_digest != digest
    ]
    if not differing:
        return []
    traced = dict(conn.execute(sql(conn).TRACE_PARENTS_BY_ID, (json.dumps([task_id for _, task_id in differing]),)))
    return [
        (index, task_id)
        for index, task_id in differing
        if task_id not in traced
        or spec_digest_with_trace(batch.specs[index], traced[task_id], batch.limits) != on_board[task_id].spec_digest
    ]


def _recorded_with_traces(
    conn: sqlite3.Connection, batch: PreparedBatch, recorded: bytes, ids: list[str], on_board: dict[str, BoardRow]
) -> bool:
    """Whether a request id recorded by an earlier version, whose batch digest counted the
    trace contexts, names this very batch. That digest was made of its specs' digests, which
    are the ones stored on the tasks it names (each was created by it, or was on the board
    with the same digest): it is made again from those, and each spec must be the same."""
    if ids != [spec.id for spec in batch.specs] or len(on_board) != len(ids):
        return False
    stored = batch_digest([on_board[task_id].spec_digest for task_id in ids])
    return stored == recorded and not changed_specs(conn, batch, on_board)


def _refuse_changed_specs(differing: list[tuple[int, str]]) -> None:
    """Refuses, naming every one, when an id of the batch is on the board with a different spec."""
    if differing:
        shown = ", ".join(repr(task_id) for _, task_id in differing[:20])
        more = f" and {len(differing) - 20} more" if len(differing) > 20 else ""
        raise errors.AlreadyExists(
            f"task {shown}{more} exists with a different spec"
            if len(differing) == 1
            else f"tasks {shown}{more} exist with a different spec",
            field=f"tasks[{differing[0][0]}].id",
        )


def _unmet_deps(index: int, spec: TaskSpec, new_ids: set[str], outside: dict[str, BoardRow]) -> int:
    """How many of the task's dependencies are not COMPLETED; refuses unknown or dead ones."""
    unmet = 0
    for dep in spec.depends_on:
        if dep in new_ids:
            unmet += 1
            continue
        row = outside.get(dep)
        if row is None:
            raise errors.InvalidArgument(f"tasks[{index}].depends_on", f"unknown dependency {dep!r}")
        if row.state in (TaskState.FAILED, TaskState.CANCELED):
            raise errors.InvalidArgument(f"tasks[{index}].depends_on", f"dependency {dep!r} is {row.state.name}")
        unmet += row.state != TaskState.COMPLETED
    return unmet
