"""How a live claim is checked and ended, and where its task goes next.

A holder ends its claim by a completion (a work claim's result: the task COMPLETED,
or IN_REVIEW under a review policy; a review's claim, by its verdict), a failure or a
release; the task is then COMPLETED, back to PENDING (after a backoff), or FAILED with
its dependents CANCELED. The claim's other ends take the same steps: a lease that ran
out and the lead's revoke (`reclaim`), the lead's decision on a review (`reviews`), a
teammate's removal (`release_all`).
"""

from __future__ import annotations

import dataclasses
import json
import random
import sqlite3
from typing import NamedTuple

from ... import errors
from ...model import (
    ClaimEnd,
    ClaimEndReason,
    ClaimOutcome,
    Completion,
    DeliveryView,
    TaskRecord,
    TaskState,
    Usage,
    Verdict,
)
from ...txn import PendingOpRecord, Txn
from .. import keys, leases, ops
from .. import usage as spending
from ..dialect import sql, steps
from ..driver import ClaimToComplete, ReadyCandidate
from ..events import emit
from ..status import refresh_status
from .rows import task_by_seq, task_changed, task_events, task_record
from .timegates import gate_shut

_IN_REVIEW = int(TaskState.IN_REVIEW)
# A claim that ended by its holder's completion: a work claim's, or a review's verdict.
_COMPLETING = (ClaimOutcome.COMPLETED, ClaimOutcome.APPROVED, ClaimOutcome.REJECTED)

LEAD = "lead"  # the reviewer a Lead's decision names


class LiveClaim(NamedTuple):
    """The caller's live claim of a task, as `live_claim` found it."""

    seq: int  # the task's
    fence: int  # 0: the token completed the task before (`completed_ok`)
    lease_ms: int
    key: str  # the task's concurrency key ('' for none)
    reviewing: bool  # a review's claim: the task is IN_REVIEW
    review_role: str | None  # the task's review policy (None: no review; '': the Lead)


def live_claim(tx: Txn, teammate: str, task_id: str, token: str, *, completed_ok: bool = False) -> LiveClaim:
    """The caller's live claim of the task, or raises why there is none.

    With `completed_ok`, the token that completed the task returns fence 0
    instead of raising (a repeated CompleteTask is answered from the store).
    """
    return live_claim_at(tx.conn, tx.now_ms, teammate, task_id, token, completed_ok=completed_ok)


def live_claim_at(
    conn: sqlite3.Connection, now_ms: int, teammate: str, task_id: str, token: str, *, completed_ok: bool = False
) -> LiveClaim:
    """`live_claim` on any connection (a reader's too), as of `now_ms`."""
    # One statement for the task and the token's claim (if any): the writer
    # gives up the GIL on every statement and may wait to get it back.
    row = conn.execute(
        sql(conn).LIVE_CLAIM,
        (token, task_id),
    ).fetchone()
    if row is None:
        raise errors.TaskNotFound(f"no task {task_id!r}", id=task_id)
    seq, live_fence, lease_end, lease_ms, key, attempt_deadline, fence, claim_task, holder, outcome, state, role = row
    if fence is None or claim_task != seq or holder != teammate:
        raise errors.ClaimTokenMismatch(f"token is not your claim on task {task_id!r}", id=task_id)
    if outcome is None and fence == live_fence:
        if now_ms >= lease_end:
            if attempt_deadline is not None and lease_end >= attempt_deadline:
                raise errors.AttemptTimedOut(f"attempt on task {task_id!r} ran past its attempt_timeout", id=task_id)
            raise errors.LeaseExpired(f"lease on task {task_id!r} ended", id=task_id)
        return LiveClaim(seq, fence, lease_ms, key, state == _IN_REVIEW, role)
    if outcome in _COMPLETING and completed_ok:
        return LiveClaim(seq, 0, lease_ms, key, False, role)
    if outcome == ClaimOutcome.EXPIRED:
        raise errors.LeaseExpired(f"lease on task {task_id!r} ended", id=task_id)
    if outcome == ClaimOutcome.CANCELED:
        raise errors.TaskCanceled(f"task {task_id!r} was canceled", id=task_id)
    if outcome == ClaimOutcome.REVOKED:
        raise errors.ClaimRevoked(f"claim on task {task_id!r} was revoked", id=task_id)
    if outcome == ClaimOutcome.TIMED_OUT:
        raise errors.AttemptTimedOut(f"attempt on task {task_id!r} ran past its attempt_timeout", id=task_id)
    raise errors.ClaimTokenMismatch(f"claim on task {task_id!r} already ended ({outcome})", id=task_id)


def end_claim(
    tx: Txn, fence: int, outcome: ClaimOutcome, error: str = "", *, key: str, leased: bool | None = None
) -> None:
    """Ends the live claim `fence` of a task whose concurrency key is `key` ('' for none),
    freeing what it holds: its key's slot, its resources (none, for a task without any);
    its output's followers read to its end. `leased`: whether the task has resources, when
    the caller has its row (None: the claim's end statement reads it)."""
    params = (outcome.value, tx.now_ms, error, fence)
    if leased is None:
        row = tx.conn.execute(sql(tx.conn).END_CLAIM_LEASED, params).fetchone()
        leased = row is not None and bool(row[0])
    else:
        tx.conn.execute(sql(tx.conn).END_CLAIM, params)
    tx.wakes.output.add(fence)
    if key:
        keys.freed(tx, key)
    if leased:
        leases.freed_by_claim(tx, fence)


def slot_freed(tx: Txn, teammate: str, *, status_after: bool = True) -> None:
    """A claim of this teammate ended: its stream may claim again now."""
    tx.wakes.teammates.add(teammate)
    tx.wakes.may_claim.add(teammate)
    if status_after:
        refresh_status(tx, teammate)


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
    tx: Txn,
    completion: Completion,
    *,
    status_after: bool = True,
    usage: Usage | None = None,
    view_after: bool = False,
    op_record: PendingOpRecord | None = None,
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
        done = driver.complete_if_live(tx, completion, op_record, view_after=view_after)
        if done is not None:
            task = _completed(tx, teammate, completion.task_id, done.task, done.dependents, status_after)
            return ClaimCompleted(task, True, done.view)
    ops.write_pending_record(tx, op_record)
    held = live_claim(tx, teammate, completion.task_id, completion.token, completed_ok=True)
    if not held.fence:
        return ClaimCompleted(task_by_seq(tx.conn, held.seq), False)  # completed once: the stored result
    _check_verdict(held, completion)
    if held.reviewing:
        assert completion.verdict is not None
        if usage is not None:
            spending.charge(tx, teammate, held.seq, usage)
        return ClaimCompleted(_review_answered(tx, teammate, held, completion.verdict, status_after=status_after), True)
    if usage is not None:
        spending.charge_teammate(tx, teammate, usage)
    if held.review_role is not None:  # the result waits for its review
        task = _submitted_for_review(tx, teammate, held, completion.result, usage)
        slot_freed(tx, teammate, status_after=status_after)
        return ClaimCompleted(task, True)
    done = driver.complete_live_claim(tx, ClaimToComplete(held.seq, held.fence, held.key, completion.result, usage))
    return ClaimCompleted(_completed(tx, teammate, completion.task_id, done.task, done.dependents, status_after), True)


def _check_verdict(held: LiveClaim, completion: Completion) -> None:
    """A review's claim takes a verdict and no result; any other claim, no verdict."""
    if held.reviewing and completion.verdict is None:
        raise errors.InvalidArgument("verdict", "a review's claim is completed with a verdict (approve or reject)")
    if not held.reviewing and completion.verdict is not None:
        raise errors.InvalidArgument("verdict", "only a review's claim (Claim.review) takes a verdict")
    if held.reviewing and completion.result:
        raise errors.InvalidArgument("result", "a review leaves the result under review as it is: send none")


def _completed(
    tx: Txn, teammate: str, task_id: str, task: TaskRecord, dependents: list[ReadyCandidate], status_after: bool
) -> TaskRecord:
    """What a completion tells: the dependents it made ready, the freed slot, the note."""
    _made_ready(tx, dependents)
    tx.wakes.tally["completions"] += 1
    slot_freed(tx, teammate, status_after=status_after)
    tx.wakes.note("completed", task=task_id, teammate=teammate)
    return task


def _made_ready(tx: Txn, dependents: list[ReadyCandidate]) -> None:
    for dependent in dependents:
        if dependent.ready:
            tx.wakes.ready_roles[dependent.role] += 1
            tx.made_ready.add(dependent.seq)


def _submitted_for_review(tx: Txn, teammate: str, held: LiveClaim, result: bytes, usage: Usage | None) -> TaskRecord:
    """A work claim's completion of a task that needs a review: the claim ends COMPLETED,
    and the result waits IN_REVIEW for a reviewer holding the role (woken here) or the
    Lead. Nothing downstream is freed."""
    end_claim(tx, held.fence, ClaimOutcome.COMPLETED, key=held.key)
    sums, sum_params = spending.task_sums(tx.conn, usage)
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


def _review_answered(
    tx: Txn, reviewer: str, held: LiveClaim, verdict: Verdict, *, status_after: bool = True
) -> TaskRecord:
    """A review's claim answered with its verdict (`status_after`: as `tasks.complete_claim`)."""
    end = ClaimOutcome.APPROVED if verdict.approve else ClaimOutcome.REJECTED
    tx.conn.execute(sql(tx.conn).END_REVIEW_CLAIM, (end.value, tx.now_ms, verdict.feedback, held.fence))
    tx.wakes.output.add(held.fence)  # its output's followers read to its end
    if held.key:
        keys.freed(tx, held.key)
    slot_freed(tx, reviewer, status_after=status_after)
    return decide_review(tx, held.seq, reviewer, verdict)


def decide_review(tx: Txn, seq: int, reviewer: str, verdict: Verdict) -> TaskRecord:
    """The verdict on the task `seq` IN_REVIEW, by `reviewer` (a teammate's review, or
    LEAD): approved, it is COMPLETED and its dependents counted down; rejected, it goes
    back for rework, or is FAILED (its dependents CANCELED) at the policy's max_rounds."""
    statements = sql(tx.conn)
    task_id, rounds, max_rounds, author = tx.conn.execute(statements.REVIEW_POLICY, (seq,)).fetchone()
    round_number = rounds + 1
    if verdict.approve:
        (row,) = tx.conn.execute(statements.APPROVE, (tx.now_ms, seq)).fetchall()
        _made_ready(tx, [ReadyCandidate(*freed) for freed in tx.conn.execute(statements.FREE_DEPENDENTS, (seq,))])
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


def back_to_pending(tx: Txn, seq: int, wait_ms: int = 0) -> None:
    """The task is PENDING again: ready now, or, with a wait, once its gate opens."""
    if wait_ms <= 0:
        (role,) = tx.conn.execute(
            sql(tx.conn).BACK_TO_PENDING,
            (seq,),
        ).fetchone()
        tx.wakes.ready_roles[role] += 1
    else:
        gate = tx.now_ms + wait_ms
        tx.conn.execute(
            sql(tx.conn).BACK_TO_PENDING_GATED,
            (gate, seq),
        )
        gate_shut(tx, gate)
    task_changed(tx, seq)


def count_failure(tx: Txn, seq: int, error: str, *, final: bool) -> None:
    """One claim ended by failure or expiry: retry after its backoff while attempts remain, else FAILED."""
    failures, max_attempts, backoff_ms, backoff_max_ms = tx.conn.execute(
        sql(tx.conn).COUNT_FAILURE,
        (error, seq),
    ).fetchone()
    if final or failures >= max_attempts:
        _finish(tx, seq, TaskState.FAILED)
        cancel_seqs(tx, _dependents(tx, seq, "failed"))
    else:
        back_to_pending(tx, seq, retry_wait_ms(failures, backoff_ms, backoff_max_ms, random.random()))


# Retries of many tasks that failed together (a provider outage) spread over
# the last fifth of each wait instead of arriving at one instant.
RETRY_JITTER = 0.2


def retry_wait_ms(failures: int, backoff_ms: int, backoff_max_ms: int, draw: float) -> int:
    """The wait before the retry that follows failure number `failures` (1 = the first):
    `backoff_ms`, doubled per failure after the first, at most `backoff_max_ms`, less up
    to RETRY_JITTER of it (`draw` in [0, 1) says how much)."""
    if backoff_ms <= 0:
        return 0
    full = min(backoff_ms << min(failures - 1, 40), backoff_max_ms)
    return max(1, round(full * (1 - RETRY_JITTER * draw)))


def _finish(tx: Txn, seq: int, state: TaskState) -> None:
    tx.conn.execute(
        sql(tx.conn).FINISH,
        (int(state), tx.now_ms, seq),
    )
    task_changed(tx, seq)


def _dependents(tx: Txn, seq: int, how: str) -> list[tuple[int, str]]:
    """The dependents of task `seq`, each with the reason it is canceled: `seq` ended `how`."""
    (task_id,) = tx.conn.execute(sql(tx.conn).TASK_ID, (seq,)).fetchone()
    why = f"dependency {task_id!r} {how}"
    return [(dep, why) for (dep,) in tx.conn.execute(sql(tx.conn).DEPENDENT_SEQS, (seq,))]


def cancel_seqs(tx: Txn, roots: list[tuple[int, str]]) -> list[int]:
    """Cancels each unfinished (task seq, reason) and, transitively, the unfinished
    dependents of each; a dependent's reason names its first dependency (in its
    depends_on order) that this cancels. Returns the seqs changed, roots first.

    Set-based: one recursive query finds them all, and each table is updated in one
    statement, so canceling the root of a 10,000-task DAG is one short job.
    """
    conn = tx.conn
    reasons: dict[int, str] = {}
    for seq, why in roots:
        reasons.setdefault(seq, why)
    doomed = conn.execute(
        sql(conn).DOOMED,
        (json.dumps(list(reasons)),),
    ).fetchall()
    if not doomed:
        return []
    doomed_seqs = {seq for seq, *_ in doomed}
    named = [seq for seq in reasons if seq in doomed_seqs]
    others = [seq for seq, *_ in doomed if seq not in reasons]
    edges = conn.execute(
        sql(conn).DOOMED_DEPENDENCIES,
        (json.dumps(others),),
    )
    for seq, dep_seq, dep_id in edges:
        if seq not in reasons and dep_seq in doomed_seqs:
            reasons[seq] = f"dependency {dep_id!r} was canceled"
    held = [(seq, fence, owner) for seq, fence, owner, *_ in doomed if fence is not None]
    for seq, fence, owner, task_id, token, _ in doomed:
        if fence is not None:
            tx.wakes.claim_ended(owner, ClaimEnd(task_id, token, ClaimEndReason.TASK_CANCELED, reasons[seq]))
    conn.executemany(
        sql(conn).END_DOOMED_CLAIM,
        [(ClaimOutcome.CANCELED.value, tx.now_ms, reasons[seq], fence) for seq, fence, _ in held],
    )
    tx.wakes.output.update(fence for _, fence, _ in held)
    conn.executemany(
        sql(conn).FINISH_DOOMED,
        [(int(TaskState.CANCELED), tx.now_ms, reasons[seq], seq) for seq, *_ in doomed],
    )
    for _, fence, _, _, _, key in doomed:
        if fence is not None:
            if key:
                keys.freed(tx, key)
            leases.freed_by_claim(tx, fence)
    ordered = named + others
    task_events(tx, ordered)
    tx.wakes.tally["cancellations"] += len(doomed)
    for owner in sorted({owner for _, _, owner in held}):
        slot_freed(tx, owner)
    return ordered
