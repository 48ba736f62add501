"""Reviews (TaskSpec.review): a completion leaves the task IN_REVIEW with its result; a
review's claim, taken by a teammate holding the reviewer role who is not the author, or
the Lead's ReviewTask, decides it: approved, it is COMPLETED with that result; rejected,
it goes back to PENDING for rework (no attempt used), or FAILED once the rejections
reach the policy's `max_rounds`.

A review's claim is a claim like any other (token, fence, lease, renewed, released,
expiring): the task is held IN_REVIEW while it lives, and one that ends without a
verdict leaves the review to be offered again (`ends.back_to_pending`).

This module offers a review to a reviewer and takes the Lead's decision; a completion
that submits a result and a review's verdict end a claim, and so are `ends`'
(`ends.decide_review` decides a review for both).
"""

from __future__ import annotations

import functools
import secrets
import types
from collections.abc import Iterable

from ... import errors
from ...model import ClaimEnd, ClaimEndReason, ClaimOutcome, ReviewItem, TaskRecord, TaskState, Verdict
from ...txn import Txn
from .. import keys
from ..dialect import sql
from .ends import LEAD, decide_review, end_claim, slot_freed
from .rows import IN_REVIEW, task_changed, task_record


def ready_query(conn, roles: Iterable[str]) -> tuple[str, list[str]] | None:
    """The query, and its parameters but the teammate's name (last, twice), for the first
    review a teammate with `roles` may take; None when it holds no role (a review needs one).
    One the teammate released in this round is not offered to it again: a teammate that
    cannot review it would otherwise be handed it straight back (a failed one may be,
    as a failed attempt at work is)."""
    roles = list(roles)
    if not roles:
        return None
    return _ready_text(sql(conn), len(roles)), roles


@functools.lru_cache(maxsize=64)
def _ready_text(statements: types.ModuleType, roles: int) -> str:
    """`ready_query`'s text, written once per driver and number of roles."""
    return statements.REVIEW_READY.format(roles=statements.marks(roles), full_keys=keys.FULL_KEYS)


def any_for(conn, roles: Iterable[str], teammate: str) -> bool:
    """Whether a review waits that a teammate with `roles` may take (not `teammate`'s own)."""
    ready = ready_query(conn, roles)
    return ready is not None and conn.execute(ready[0], (*ready[1], teammate, teammate)).fetchone() is not None


def claim_first(tx: Txn, teammate: str, roles: Iterable[str], token: str) -> tuple[TaskRecord, int, ReviewItem] | None:
    """Claims the first review `teammate` may take, under `token`: the task (IN_REVIEW), the
    claim's fence and what to review; None when there is none for it."""
    ready = ready_query(tx.conn, roles)
    if ready is None:
        return None
    statements = sql(tx.conn)
    query, params = ready
    lock = statements.row_lock("UPDATE OF tasks SKIP LOCKED")
    picked = tx.conn.execute(query + lock, (*params, teammate, teammate)).fetchone()
    if picked is None:
        return None
    seq, attempt, author, rounds = picked
    (fence,) = tx.conn.execute(
        statements.INSERT_REVIEW_CLAIM, (token, seq, teammate, attempt, tx.now_ms, rounds + 1)
    ).fetchone()
    (row,) = tx.conn.execute(statements.CLAIM_REVIEW, (teammate, fence, tx.now_ms, seq)).fetchall()
    task_changed(tx, seq)
    task = task_record(row)
    return task, fence, ReviewItem(task.result, author, rounds + 1)


def review_item(conn, task: TaskRecord) -> ReviewItem:
    """What a held review's claim carries, for a stream that sends it again."""
    author, rounds, _ = conn.execute(sql(conn).REVIEW_OF_TASK, (task.seq,)).fetchone()
    return ReviewItem(task.result, author, rounds + 1)


def rejected_result(conn, task: TaskRecord) -> bytes:
    """The result the last review rejected (a rework's claim carries it), or b''."""
    if not task.review_rounds:
        return b""
    *_, rejected = conn.execute(sql(conn).REVIEW_OF_TASK, (task.seq,)).fetchone()
    return bytes(rejected) if rejected is not None else b""


def lead_decides(tx: Txn, task_id: str, verdict: Verdict) -> TaskRecord:
    """ReviewTask: the Lead decides a task IN_REVIEW, taking a review a teammate holds
    away first (claim_ended REVOKED); FailedPrecondition for a task in any other state."""
    statements = sql(tx.conn)
    row = tx.conn.execute(statements.REVIEW_STATE + statements.row_lock(), (task_id,)).fetchone()
    if row is None:
        raise errors.TaskNotFound(f"no task {task_id!r}", id=task_id)
    seq, state, fence, rounds, attempt, key = row
    if state != IN_REVIEW:
        raise errors.FailedPrecondition(
            f"task {task_id!r} is {TaskState(state).name}: only a task IN_REVIEW is reviewed", id=task_id
        )
    if fence is not None:  # a teammate's review: taken away, as RevokeClaim would
        holder, token = tx.conn.execute(statements.REVIEW_HOLDER, (fence,)).fetchone()
        why = "the lead decided the review"
        end_claim(tx, fence, ClaimOutcome.REVOKED, why, key=key)
        tx.wakes.claim_ended(holder, ClaimEnd(task_id, token, ClaimEndReason.REVOKED, why))
        slot_freed(tx, holder)
    end = ClaimOutcome.APPROVED if verdict.approve else ClaimOutcome.REJECTED
    now = tx.now_ms
    tx.conn.execute(
        statements.LEAD_REVIEW,
        (secrets.token_urlsafe(24), seq, attempt, now, rounds + 1, now, end.value, verdict.feedback),
    )
    return decide_review(tx, seq, LEAD, verdict)
