"""Claims taken back from their holders: leases that ran out (and, on a restart, those
that did not), and the lead's revoke."""

from __future__ import annotations

from ... import errors
from ...model import ClaimEnd, ClaimEndReason, ClaimOutcome, TaskRecord, TaskState
from ...txn import Txn
from ..boardclock import clock_reached
from ..dialect import sql
from ..status import refresh_status
from .ends import back_to_pending, count_failure, end_claim, slot_freed
from .rows import IN_PROGRESS, IN_REVIEW, task_by_seq


def reclaim_expired(tx: Txn) -> dict[str, int]:
    """Ends every claim whose lease is over (half-open: at the end instant it is dead).

    A lease that ended at its attempt's deadline is a timed-out attempt: a failure
    (FAILED in the history, "attempt timed out after ..."), and its holder, which
    was not silent, may claim again at once.

    Returns each former holder with the latest lease end reclaimed from it (timeouts
    aside). Asks nothing while `now` is before the earliest lease end the writer
    knows of.
    """
    if tx.leases.none_due(tx.now_ms):
        return {}
    # One statement for the leases that ended and the earliest left once they are
    # reclaimed (every row carries it; one row of NULLs but for it when none ended).
    rows = tx.conn.execute(
        sql(tx.conn).EXPIRED_LEASES,
        (tx.now_ms, tx.now_ms),
    ).fetchall()
    earliest_left = rows[0][-1]
    expired: dict[str, int] = {}
    for seq, fence, owner, attempt, lease_end, task_id, token, key, state, timed_out, timeout_ms, _ in rows:
        if seq is None:
            continue  # none ended
        if timed_out:
            why = f"attempt timed out after {_seconds(timeout_ms)}"
            end_claim(tx, fence, ClaimOutcome.TIMED_OUT, why, key=key)
            tx.wakes.tally["attempt_timeouts"] += 1
            tx.wakes.note("attempt_timed_out", task=task_id, teammate=owner, attempt=attempt)
            tx.wakes.claim_ended(owner, ClaimEnd(task_id, token, ClaimEndReason.ATTEMPT_TIMEOUT, why))
            count_failure(tx, seq, why, final=False)
            slot_freed(tx, owner)
            continue
        why = f"lease expired on attempt {attempt}"
        end_claim(tx, fence, ClaimOutcome.EXPIRED, why, key=key)
        tx.wakes.tally["lease_expirations"] += 1
        tx.wakes.note("lease_expired", task=task_id, teammate=owner, attempt=attempt)
        tx.wakes.claim_ended(owner, ClaimEnd(task_id, token, ClaimEndReason.LEASE_EXPIRED, why))
        if state == IN_REVIEW:
            back_to_pending(tx, seq)  # a review's lease: the review is offered again, at no cost
        else:
            count_failure(tx, seq, why, final=False)
        # Not woken like a freed slot: a frozen holder whose stream is still
        # open would only take the same task straight back (see delivery).
        tx.conn.execute(sql(tx.conn).NOTE_EXPIRY, (lease_end, owner))
        refresh_status(tx, owner)
        expired[owner] = max(expired.get(owner, 0), lease_end)
    # Each lease that ended left state 2, and reclaiming grants none.
    tx.leases.learned(earliest_left)
    return expired


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


def _seconds(ms: int) -> str:
    return f"{ms / 1000:g} s"


def extend_live_leases(tx: Txn) -> int:
    """On restart: a daemon's downtime never expires a working teammate.

    A lease that ended by the last instant the previous daemon reached may
    have been reported LEASE_EXPIRED, so it stays dead and is reclaimed. A
    lease that ran out only during the downtime is alive: every live lease
    gets a whole new duration from now. The board starts the clock no earlier
    than that instant (`Clock.not_before`); even if it did not, the verdict
    is the previous daemon's, taken at its own last instant.
    """
    reclaim_expired(Txn(tx.conn, clock_reached(tx.conn), tx.wakes))
    # An attempt's deadline is kept: downtime counts against its time limit.
    count = tx.conn.execute(
        sql(tx.conn).EXTEND_LIVE_LEASES,
        (tx.now_ms, tx.now_ms),
    ).rowcount
    tx.leases.forget()
    tx.wakes.deadline(tx.now_ms)
    return count
