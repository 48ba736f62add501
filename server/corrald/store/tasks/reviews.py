"""Reviews (TaskSpec.review): a completion leaves the task IN_REVIEW with its result; a
review's claim, taken by a teammate holding the reviewer role who is not the author, or
the Lead's ReviewTask, decides it: approved, it is COMPLETED with that result; rejected,
it goes back to PENDING for rework (no attempt used), or FAILED once the rejections
reach the policy's `max_rounds`.

A review's claim is a claim like any other (token, fence, lease, renewed, released,
expiring): the task is held IN_REVIEW while it lives, and one that ends without a
verdict leaves the review to be offered again (`ends.back_to_pending`).
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
from ..events import emit
from .ends import LiveClaim, cancel_seqs, end_claim, slot_freed
from .rows import IN_REVIEW, task_by_seq, task_changed, task_record

LEAD = "lead"  # the reviewer a Lead's decision names


def submit(tx: Txn, teammate: str, held: LiveClaim, result: bytes, sums: str, sum_params: tuple) -> TaskRecord:
    """A work claim's completion of a task that needs a review: the claim ends COMPLETED,
    and the result waits IN_REVIEW for a reviewer holding the role (woken here) or the
    Lead. Nothing downstream is freed."""
    end_claim(tx, held.fence, ClaimOutcome.COMPLETED, key=held.key)
    role, *row = tx.conn.execute(
        sql(tx.conn).submit_for_review(sums), (result, teammate, *sum_params, held.seq)
    ).fetchone()
    task = task_record(tuple(row))
    if role:
        tx.wakes.ready_roles[role] += 1
        tx.made_ready.add(held.seq)  # a waiting reviewer served in this job wakes no one else
    task_changed(tx, held.seq)
    tx.wakes.note("submitted_for_review", task=task.id, teammate=teammate, reviewer=role or LEAD)
    return task


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


def answer(tx: Txn, reviewer: str, held: LiveClaim, verdict: Verdict, *, status_after: bool = True) -> TaskRecord:
    """A review's claim answered with its verdict (`status_after`: as `tasks.complete_claim`)."""
    end = ClaimOutcome.APPROVED if verdict.approve else ClaimOutcome.REJECTED
    tx.conn.execute(sql(tx.conn).END_REVIEW_CLAIM, (end.value, tx.now_ms, verdict.feedback, held.fence))
    tx.wakes.output.add(held.fence)  # its output's followers read to its end
    if held.key:
        keys.freed(tx, held.key)
    slot_freed(tx, reviewer, status_after=status_after)
    return _decide(tx, held.seq, reviewer, verdict)


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
    return _decide(tx, seq, LEAD, verdict)


def _decide(tx: Txn, seq: int, reviewer: str, verdict: Verdict) -> TaskRecord:
    statements = sql(tx.conn)
    task_id, rounds, max_rounds, author = tx.conn.execute(statements.REVIEW_POLICY, (seq,)).fetchone()
    round_number = rounds + 1
    if verdict.approve:
        (row,) = tx.conn.execute(statements.APPROVE, (tx.now_ms, seq)).fetchall()
        for dependent, role, unmet, state in tx.conn.execute(statements.FREE_DEPENDENTS, (seq,)).fetchall():
            if unmet == 0 and state == int(TaskState.PENDING):
                tx.wakes.ready_roles[role] += 1
                tx.made_ready.add(dependent)
        tx.wakes.tally["completions"] += 1
    elif round_number >= max_rounds:
        why = f"review rejected {round_number} times: {verdict.feedback}"
        tx.conn.execute(statements.REJECT_FINALLY, (int(TaskState.FAILED), round_number, tx.now_ms, why, seq))
        dependents = tx.conn.execute(statements.DEPENDENT_SEQS, (seq,)).fetchall()
        cancel_seqs(tx, [(dependent, f"dependency {task_id!r} failed") for (dependent,) in dependents])
        tx.wakes.tally["failures"] += 1
    else:
        (role,) = tx.conn.execute(statements.REJECT, (round_number, seq)).fetchone()
        tx.wakes.ready_roles[role] += 1
    task_changed(tx, seq)
    emit(
        tx,
        "review_decided",
        {
            "task_id": task_id,
            "approve": verdict.approve,
            "feedback": verdict.feedback,
            "reviewer": reviewer,
            "round": round_number,
        },
    )
    decided = "approved" if verdict.approve else "rejected"
    tx.wakes.note("review_decided", task=task_id, reviewer=reviewer, verdict=decided, author=author)
    return task_by_seq(tx.conn, seq)
