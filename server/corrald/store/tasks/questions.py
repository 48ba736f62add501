"""Questions to the Lead: a holder asks (its claim ends, the task waits NEEDS_INPUT), the
Lead answers (the task is PENDING again, and its next claims carry every answer)."""

from __future__ import annotations

from ... import errors
from ...model import ClaimOutcome, TaskRecord, TaskState
from ...txn import Txn
from ..dialect import sql
from ..events import emit
from .ends import end_claim, live_claim, slot_freed
from .rows import NEEDS_INPUT, task_by_seq, task_changed

# The questions a task may hold: its claims carry them all, so they stay few.
QUESTIONS_PER_TASK_MAX = 20


def ask_question(tx: Txn, teammate: str, task_id: str, token: str, question: str) -> TaskRecord:
    """Ends the caller's live claim (ASKED: no attempt used) and leaves the task
    NEEDS_INPUT with `question`, claimed by no one until the Lead answers."""
    held = live_claim(tx, teammate, task_id, token)
    if held.reviewing:
        raise errors.InvalidArgument("task_id", f"task {task_id!r} is under your review: answer it with a verdict")
    seq, fence, key = held.seq, held.fence, held.key
    statements = sql(tx.conn)
    (asked,) = tx.conn.execute(statements.QUESTIONS_ASKED, (seq,)).fetchone()
    if asked >= QUESTIONS_PER_TASK_MAX:
        raise errors.FailedPrecondition(
            f"task {task_id!r} has had {asked} questions, the most one task may ask: complete or fail it",
            id=task_id,
        )
    end_claim(tx, fence, ClaimOutcome.ASKED, key=key)
    tx.conn.execute(statements.ASK_QUESTION, (question, seq))
    tx.conn.execute(statements.INSERT_QUESTION, (seq, fence, teammate, question, tx.now_ms))
    task_changed(tx, seq)
    emit(tx, "question_asked", {"task_id": task_id, "question": question, "asked_by": teammate})
    slot_freed(tx, teammate)
    tx.wakes.note("asked", task=task_id, teammate=teammate, question=question[:200])
    return task_by_seq(tx.conn, seq)


def answer_question(tx: Txn, task_id: str, text: str) -> TaskRecord:
    """Answers the question of a NEEDS_INPUT task, which is PENDING and ready again;
    FailedPrecondition for a task in any other state."""
    statements = sql(tx.conn)
    row = tx.conn.execute(statements.QUESTION_OF_TASK + statements.row_lock(), (task_id,)).fetchone()
    if row is None:
        raise errors.TaskNotFound(f"no task {task_id!r}", id=task_id)
    seq, state, question = row
    if state != NEEDS_INPUT:
        raise errors.FailedPrecondition(
            f"task {task_id!r} is {TaskState(state).name}: only a NEEDS_INPUT task has a question to answer",
            id=task_id,
        )
    tx.conn.execute(statements.ANSWER_QUESTION, (text, tx.now_ms, seq))
    (role,) = tx.conn.execute(statements.ANSWERED, (seq,)).fetchone()
    tx.wakes.ready_roles[role] += 1
    task_changed(tx, seq)
    emit(tx, "question_answered", {"task_id": task_id, "question": question, "answer": text})
    tx.wakes.note("answered", task=task_id)
    return task_by_seq(tx.conn, seq)
