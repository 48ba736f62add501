"""How a live claim is checked and ended, and where its task goes next: back to PENDING
(after a backoff), FAILED, or with its dependents CANCELED."""

from __future__ import annotations

import json
import random
import sqlite3
from typing import NamedTuple

from ... import errors
from ...model import ClaimEnd, ClaimEndReason, ClaimOutcome, TaskState
from ...txn import Txn
from .. import keys, leases
from ..dialect import sql
from ..status import refresh_status
from .rows import task_changed, task_events
from .timegates import gate_shut

_IN_REVIEW = int(TaskState.IN_REVIEW)
# A claim that ended by its holder's completion: a work claim's, or a review's verdict.
_COMPLETING = (ClaimOutcome.COMPLETED, ClaimOutcome.APPROVED, ClaimOutcome.REJECTED)


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
