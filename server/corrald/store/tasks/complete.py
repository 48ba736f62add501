"""A claim's end by its holder (complete, fail, release) or by the lead (revoke)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from ... import errors
from ...model import ClaimEnd, ClaimEndReason, ClaimOutcome, Completion, DeliveryView, TaskRecord, TaskState, Usage
from ...txn import Txn
from .. import ops
from .. import usage as spending
from ..dialect import sql, steps
from . import reviews
from .ends import LiveClaim, back_to_pending, count_failure, end_claim, live_claim, slot_freed
from .reclaim import reclaim_expired
from .rows import IN_PROGRESS, IN_REVIEW, PENDING, task_by_seq


def complete(tx: Txn, completion: Completion, usage: Usage | None = None) -> TaskRecord:
    return complete_claim(tx, completion, usage=usage).task


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimCompleted:
    """What `complete_claim` did: the task as completed (or as it stands), whether this call
    ended the claim (False: the token completed it before), and the teammate's delivery
    view as the completion left it, if the completion's step read it (`view_after`)."""

    task: TaskRecord
    ended_claim: bool
    view: DeliveryView | None = None


def complete_claim(
    tx: Txn, completion: Completion, *, status_after: bool = True, usage: Usage | None = None, view_after: bool = False
) -> ClaimCompleted:
    """Completes the task, adding `usage` to the sums. Completed before by this token, the
    stored task is returned, its usage already counted. Without `status_after` the
    teammate's status is left to the caller, which decides its next claim in the same job
    (a handoff keeps it busy, unless the usage closed its budget gate).

    The driver may check the claim and complete the task in one step (`DriverSteps.
    complete_if_live`), reading the teammate's delivery view too with `view_after`; when it
    does not, the general path checks the claim, says why it is not live, or finds the task
    completed by this token."""
    teammate = completion.teammate
    driver = steps(tx.conn)
    if usage is None and completion.verdict is None:
        done = driver.complete_if_live(tx, completion, view_after=view_after)
        if done is not None:
            task = _completed(tx, teammate, completion.task_id, done.task, done.dependents, status_after)
            return ClaimCompleted(task, True, done.view)
    ops.write_pending_record(tx)
    held = live_claim(tx, teammate, completion.task_id, completion.token, completed_ok=True)
    if not held.fence:
        return ClaimCompleted(task_by_seq(tx.conn, held.seq), False)  # completed once: the stored result
    _check_verdict(held, completion)
    if held.reviewing:
        assert completion.verdict is not None
        if usage is not None:
            spending.charge(tx, teammate, held.seq, usage)
        return ClaimCompleted(reviews.answer(tx, teammate, held, completion.verdict, status_after=status_after), True)
    if usage is not None:
        spending.charge_teammate(tx, teammate, usage)
    sums, sum_params = spending.task_sums(tx.conn, usage) if usage is not None else ("", ())
    if held.review_role is not None:  # the result waits for its review
        task = reviews.submit(tx, teammate, held, completion.result, sums, sum_params)
        slot_freed(tx, teammate, status_after=status_after)
        return ClaimCompleted(task, True)
    done_params = (completion.result, tx.now_ms, *sum_params, held.seq)
    task, dependents = driver.complete_live_claim(tx, held.seq, held.fence, held.key, sums, done_params)
    return ClaimCompleted(_completed(tx, teammate, completion.task_id, task, dependents, status_after), True)


def _check_verdict(held: LiveClaim, completion: Completion) -> None:
    """A review's claim takes a verdict and no result; any other claim, no verdict."""
    if held.reviewing and completion.verdict is None:
        raise errors.InvalidArgument("verdict", "a review's claim is completed with a verdict (approve or reject)")
    if not held.reviewing and completion.verdict is not None:
        raise errors.InvalidArgument("verdict", "only a review's claim (Claim.review) takes a verdict")
    if held.reviewing and completion.result:
        raise errors.InvalidArgument("result", "a review leaves the result under review as it is: send none")


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
    """Ends the claim FAILED: the task is retried or FAILED. A review's claim that fails
    costs the task nothing: the review is offered again."""
    held = live_claim(tx, teammate, task_id, token)
    seq = held.seq
    if usage is not None:
        spending.charge(tx, teammate, seq, usage)
    end_claim(tx, held.fence, ClaimOutcome.FAILED, error, key=held.key)
    tx.wakes.tally["failures"] += 1
    if held.reviewing:
        back_to_pending(tx, seq)
    else:
        count_failure(tx, seq, error, final=not retryable)
    slot_freed(tx, teammate)
    task = task_by_seq(tx.conn, seq)
    tx.wakes.note("failed", task=task_id, teammate=teammate, final=task.state is TaskState.FAILED, error=error[:200])
    return task


def release(tx: Txn, teammate: str, task_id: str, token: str) -> TaskRecord:
    held = live_claim(tx, teammate, task_id, token)
    seq = held.seq
    end_claim(tx, held.fence, ClaimOutcome.RELEASED, key=held.key)
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
    if state not in (IN_PROGRESS, IN_REVIEW) or fence is None:
        raise errors.FailedPrecondition(f"task {task_id!r} has no live claim ({TaskState(state).name})", id=task_id)
    why = reason or "revoked by the lead"
    end_claim(tx, fence, ClaimOutcome.REVOKED, why, key=key)
    back_to_pending(tx, seq)
    slot_freed(tx, owner)
    tx.wakes.tally["revocations"] += 1
    tx.wakes.claim_ended(owner, ClaimEnd(task_id, token, ClaimEndReason.REVOKED, why))
    tx.wakes.note("revoked", task=task_id, teammate=owner, reason=why[:200])
    return task_by_seq(tx.conn, seq)
