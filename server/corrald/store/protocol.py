"""The Lead's protocol with a teammate: plans and their decisions, shutdown requests and answers."""

from __future__ import annotations

from .. import errors
from ..model import ClaimOutcome
from ..txn import Txn
from .dialect import sql
from .events import emit
from .inbox import enqueue
from .status import refresh_status
from .tasks import release_all
from .team import remove_teammate, teammate_row

# ---------------------------------------------------------------- plans


def submit_plan(tx: Txn, author: str, body: str) -> str:
    (plan_id,) = tx.conn.execute(sql(tx.conn).SUBMIT_PLAN, (author, body, tx.now_ms)).fetchone()
    emit(tx, "plan_submitted", {"plan_id": str(plan_id), "author": author, "plan": body})
    refresh_status(tx, author)
    return str(plan_id)


def _row_id(text: str) -> int:
    """An id the daemon issued ("42"), or -1, which matches nothing.

    Only the daemon's own spelling matches: "0042" names no plan, since the
    decision would go out carrying "0042" and the author compares the text.
    """
    if text.isascii() and text.isdigit() and len(text) <= 18 and str(int(text)) == text:
        return int(text)
    return -1


def decide_plan(tx: Txn, plan_id: str, approve: bool, feedback: str) -> int:
    row = tx.conn.execute(sql(tx.conn).PLAN, (_row_id(plan_id),)).fetchone()
    if row is None:
        raise errors.PlanNotFound(f"no plan {plan_id!r}", plan_id=plan_id)
    author, decided = row
    if decided is not None:
        raise errors.FailedPrecondition(f"plan {plan_id!r} was already decided", plan_id=plan_id)
    seq = enqueue(tx, author, "plan_decision", 0, ref=plan_id, approve=approve, body=feedback)
    tx.conn.execute(
        sql(tx.conn).DECIDE_PLAN,
        (int(approve), feedback, seq, _row_id(plan_id)),
    )
    emit(tx, "plan_decided", {"plan_id": plan_id, "author": author, "approve": approve, "feedback": feedback})
    return seq


# ---------------------------------------------------------------- shutdown


def request_shutdown(tx: Txn, name: str, reason: str, grace_ms: int) -> tuple[str, int]:
    teammate_row(tx.conn, name, lock=True)
    deadline = tx.now_ms + grace_ms
    (request_id,) = tx.conn.execute(
        sql(tx.conn).REQUEST_SHUTDOWN,
        (name, reason, tx.now_ms, deadline),
    ).fetchone()
    enqueue(tx, name, "shutdown_request", 0, ref=str(request_id), body=reason, deadline_ms=deadline)
    tx.wakes.deadline(deadline)
    refresh_status(tx, name, reason="shutting_down")
    return str(request_id), deadline


def respond_shutdown(tx: Txn, name: str, request_id: str, approve: bool, reason: str) -> None:
    teammate_row(tx.conn, name, lock=True)
    row = tx.conn.execute(
        sql(tx.conn).SHUTDOWN_ANSWERED,
        (_row_id(request_id), name),
    ).fetchone()
    if row is None:
        raise errors.ShutdownRequestNotFound(f"no shutdown request {request_id!r} for you", request_id=request_id)
    if row[0]:
        raise errors.FailedPrecondition(f"shutdown request {request_id!r} was already answered", request_id=request_id)
    if approve:
        release_all(tx, name, ClaimOutcome.RELEASED)
        tx.conn.execute(
            sql(tx.conn).APPROVE_SHUTDOWNS,
            (reason, name),
        )
        tx.wakes.ended[name] = "shutdown approved"
    else:
        tx.conn.execute(
            sql(tx.conn).REFUSE_SHUTDOWN,
            (reason, _row_id(request_id)),
        )
        tx.wakes.teammates.add(name)  # the shutdown gate opened
        tx.wakes.may_claim.add(name)
    emit(tx, "shutdown_answered", {"request_id": request_id, "teammate": name, "approve": approve, "reason": reason})
    refresh_status(tx, name)


def expire_shutdowns(tx: Txn) -> list[str]:
    """The forced path: past its grace, an unanswered teammate is removed."""
    names = [n for (n,) in tx.conn.execute(sql(tx.conn).EXPIRE_SHUTDOWNS, (tx.now_ms,)).fetchall()]
    for name in names:
        remove_teammate(tx, name, why="shutdown grace ran out")
    return names
