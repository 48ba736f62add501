"""A claim's end by its holder (complete, fail, release) or by the lead (revoke), and a
run of completions in one statement (PostgreSQL)."""

from __future__ import annotations

import sqlite3
import types
from collections.abc import Iterable, Sequence

from ... import errors
from ...model import (
    ClaimEnd,
    ClaimEndReason,
    ClaimOutcome,
    TaskRecord,
    TaskState,
    Txn,
    Usage,
)
from .. import keys, ops
from .. import usage as spending
from ..dialect import fused, sql
from .ends import back_to_pending, count_failure, end_claim, live_claim, slot_freed
from .reclaim import reclaim_expired
from .rows import IN_PROGRESS, PENDING, TASK_WIDTH, task_by_seq, task_changed, task_record


def complete(tx: Txn, teammate: str, task_id: str, token: str, result: bytes, usage: Usage | None = None) -> TaskRecord:
    return complete_claim(tx, teammate, task_id, token, result, usage=usage)[0]


def complete_claim(
    tx: Txn,
    teammate: str,
    task_id: str,
    token: str,
    result: bytes,
    *,
    status_after: bool = True,
    usage: Usage | None = None,
    beside: tuple[str, tuple] | None = None,
) -> tuple[TaskRecord, bool, tuple | None]:
    """Completes the task, adding `usage` to the sums; says whether this call ended
    the claim (False: it was completed before, by this token, and the stored task is
    returned, its usage already counted). Without `status_after` the teammate's
    status is left to the caller, which decides its next claim in the same job (a
    handoff keeps it busy, unless the usage closed its budget gate).

    `beside` is a query (SQL, parameters) read in the same statement when the
    completion is one (PostgreSQL, no usage, a live claim): its row is returned
    third, else None. It sees the board as it was before the completion, and
    `live.fence` names the claim the completion ends."""
    several = fused(tx.conn)
    if usage is None and several is not None:
        # One round trip in the usual case: the check that the token holds a live
        # claim is part of the statement that completes the task; when it finds
        # none, the check below says why (or finds the task completed by this token).
        completed = _complete_if_live(tx, several, teammate, (task_id, token, result), beside)
        if completed is not None:
            task, key, dependents, read_beside = completed
            tx.wakes.events = True
            if key:
                keys.freed(tx, key)
            return _completed(tx, teammate, task_id, task, dependents, status_after), True, read_beside
    ops.write_pending_record(tx)
    seq, fence, _, key = live_claim(tx, teammate, task_id, token, completed_ok=True)
    if not fence:
        return task_by_seq(tx.conn, seq), False, None  # completed once: the stored result
    if usage is not None:
        spending.charge_teammate(tx, teammate, usage)
    statements = sql(tx.conn)
    sums, sum_params = spending.task_sums(tx.conn, usage)
    done_params = (result, tx.now_ms, *sum_params, seq)
    if several is not None:
        # One round trip: the claim's end, the task's row, its dependents' counts and its event.
        row = tx.conn.execute(
            several.complete_claim(sums),
            (ClaimOutcome.COMPLETED.value, tx.now_ms, "", fence, *done_params, seq, tx.now_ms),
        ).fetchone()
        tx.wakes.events = True
        if key:
            keys.freed(tx, key)
        task, dependents = task_record(row[:-1]), row[-1] or []
    else:
        end_claim(tx, fence, ClaimOutcome.COMPLETED, key=key)
        (row,) = tx.conn.execute(statements.complete_task(sums), done_params).fetchall()
        task = task_record(row)
        dependents = tx.conn.execute(statements.FREE_DEPENDENTS, (seq,)).fetchall()
        task_changed(tx, seq)
    return _completed(tx, teammate, task_id, task, dependents, status_after), True, None


def _complete_if_live(
    tx: Txn, several: types.ModuleType, teammate: str, request: tuple[str, str, bytes], beside: tuple[str, tuple] | None
) -> tuple[TaskRecord, str, list, tuple | None] | None:
    """A completion without usage, checked and done in one statement (PostgreSQL): the
    task, its concurrency key, its dependents' new counts and what `beside` read; None
    if the token holds no live claim of the task (then nothing but a Session op's
    record is written). A Session op's record not written yet is written by the same
    statement, and the op is found to have run before if it is taken."""
    task_id, token, result = request
    record = tx.op_record if tx.op_record is not None and tx.op_record.seq is None else None
    if tx.ahead is not None:  # the writer ran this statement already, for a run of jobs (`complete_many`)
        assert record is not None and tx.ahead.request == (*record.params[:3], *request), "not this job's"
        row = tx.ahead.row
        if beside is None or not tx.ahead.fresh:
            row = row[: 1 + _COMPLETED_WIDTH]  # what it read beside is not the board's now
        tx.ahead = None  # taken (the writer checks)
    else:
        statement = several.complete_if_live(record is not None, beside[0] if beside is not None else None)
        now = tx.now_ms
        params = (
            *(record.params if record is not None else ()),
            *(task_id, token, teammate, now),  # live
            *(ClaimOutcome.COMPLETED.value, now, ""),  # ended
            *(result, now),  # done
            now,  # logged
            *(beside[1] if beside is not None else ()),
        )
        row = tx.conn.execute(statement, params).fetchone()
    if record is not None:
        ops.record_written(tx, row[0] if row is not None else None)  # raises if the op ran before
    if row is None or row[1] is None:
        return None
    mine = row[1 : 1 + _COMPLETED_WIDTH]
    read = row[1 + _COMPLETED_WIDTH :] if beside is not None and len(row) > 1 + _COMPLETED_WIDTH else None
    return task_record(mine[:-2]), mine[-2], mine[-1] or [], read


# The statement's columns after the op record's seq: the task's (one of them the
# dependency list), its key, its freed dependents.
_COMPLETED_WIDTH = TASK_WIDTH + 2


#
# A Session completion's statement (`_complete_if_live`) costs the server more to
# start and finish than to run, and a group commit holds many of them. The writer
# runs them together: one statement completes a run of queued completions, and
# each job then finds its row there (`Txn.ahead`) and goes on as if it had run
# its own statement. Its shape is that statement's, taken apart by `r_n`, the
# request's place in the run.


def complete_many(conn: sqlite3.Connection, now_ms: int, requests: Sequence[tuple], beside: str) -> list[tuple]:
    """`_complete_if_live` for each of `requests` (teammate, op id, digest, task id, token,
    result) at once, each writing its op's record: one row per request, in order, shaped
    as that statement's with `beside` (a query over `teammates AS t` that may name the
    request's teammate `r.r_teammate`, the claim it ends `live.l_fence`, and `:now`).
    The requests' teammates are distinct. PostgreSQL only."""
    columns = list(zip(*requests, strict=True))
    rows = conn.execute(
        _fused(conn).complete_many(beside),
        {
            "teammates": list(columns[0]),
            "op_ids": list(columns[1]),
            "digests": list(columns[2]),
            "task_ids": list(columns[3]),
            "tokens": list(columns[4]),
            "results": list(columns[5]),
            "now": now_ms,
            "completed": ClaimOutcome.COMPLETED.value,
        },
    ).fetchall()
    assert [row[0] for row in rows] == list(range(1, len(requests) + 1)), "one row per request, in order"
    return [(op_seq, *rest) for _, op_seq, _done_n, *rest in rows]


def _completed(
    tx: Txn, teammate: str, task_id: str, task: TaskRecord, dependents: Iterable[Sequence], status_after: bool
) -> TaskRecord:
    """What a completion tells: the dependents it made ready, the freed slot, the note."""
    ready = [(dependent, role) for dependent, role, unmet, state in dependents if unmet == 0 and state == PENDING]
    tx.wakes.ready_roles.update(role for _, role in ready)
    tx.made_ready.update(dependent for dependent, _ in ready)
    tx.wakes.tally["completions"] += 1
    slot_freed(tx, teammate, status_after=status_after)
    tx.wakes.note("completed", task=task_id, teammate=teammate)
    return task


def fail(
    tx: Txn, teammate: str, task_id: str, token: str, error: str, retryable: bool, usage: Usage | None = None
) -> TaskRecord:
    seq, fence, _, key = live_claim(tx, teammate, task_id, token)
    if usage is not None:
        spending.charge(tx, teammate, seq, usage)
    end_claim(tx, fence, ClaimOutcome.FAILED, error, key=key)
    tx.wakes.tally["failures"] += 1
    count_failure(tx, seq, error, final=not retryable)
    slot_freed(tx, teammate)
    task = task_by_seq(tx.conn, seq)
    tx.wakes.note("failed", task=task_id, teammate=teammate, final=task.state is TaskState.FAILED, error=error[:200])
    return task


def release(tx: Txn, teammate: str, task_id: str, token: str) -> TaskRecord:
    seq, fence, _, key = live_claim(tx, teammate, task_id, token)
    end_claim(tx, fence, ClaimOutcome.RELEASED, key=key)
    tx.wakes.tally["releases"] += 1
    back_to_pending(tx, seq)
    slot_freed(tx, teammate)
    tx.wakes.note("released", task=task_id, teammate=teammate)
    return task_by_seq(tx.conn, seq)


def release_all(
    tx: Txn, teammate: str, outcome: ClaimOutcome, error: str = "", *, notice: ClaimEndReason | None = None
) -> None:
    """Returns every live claim of a teammate to PENDING without using an attempt;
    `error` is what each claim's history says of it. With `notice`, the teammate's
    open stream is told each claim ended, and why."""
    rows = tx.conn.execute(
        sql(tx.conn).HELD_CLAIMS_OF,
        (teammate,),
    ).fetchall()
    for seq, fence, task_id, token, key in rows:
        end_claim(tx, fence, outcome, error, key=key)
        back_to_pending(tx, seq)
        if notice is not None:
            tx.wakes.claim_ended(teammate, ClaimEnd(task_id, token, notice, error))


def revoke(tx: Txn, task_id: str, reason: str) -> TaskRecord:
    """The Lead takes the task's live claim away: the claim ends REVOKED (an ended
    attempt in the history, not a failure: it uses up none of `max_attempts`), the task
    is PENDING and ready again, and its holder's open stream is told. A lease that ran
    out is reclaimed first: that claim is no longer live to revoke."""
    reclaim_expired(tx)
    row = tx.conn.execute(
        sql(tx.conn).LIVE_CLAIM_OF_TASK,
        (task_id,),
    ).fetchone()
    if row is None:
        raise errors.TaskNotFound(f"no task {task_id!r}", id=task_id)
    seq, state, owner, fence, token, key = row
    if state != IN_PROGRESS or fence is None:
        raise errors.FailedPrecondition(f"task {task_id!r} has no live claim ({TaskState(state).name})", id=task_id)
    why = reason or "revoked by the lead"
    end_claim(tx, fence, ClaimOutcome.REVOKED, why, key=key)
    back_to_pending(tx, seq)
    slot_freed(tx, owner)
    tx.wakes.tally["revocations"] += 1
    tx.wakes.claim_ended(owner, ClaimEnd(task_id, token, ClaimEndReason.REVOKED, why))
    tx.wakes.note("revoked", task=task_id, teammate=owner, reason=why[:200])
    return task_by_seq(tx.conn, seq)


def _fused(conn: sqlite3.Connection) -> types.ModuleType:
    several = fused(conn)
    assert several is not None, "a run of completions is one statement only where statements are round trips"
    return several
