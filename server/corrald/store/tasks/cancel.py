"""The lead's cancel and retry, each over a task and its dependents."""

from __future__ import annotations

import json
from collections.abc import Sequence

from ... import errors
from ...model import CanceledTask, TaskState
from ...txn import Txn
from ..dialect import sql
from .ends import cancel_seqs
from .rows import COMPLETED, IN_PROGRESS, PENDING, rows_by_id, task_events
from .timegates import gate_shut

_NOT_FAILED = (
    PENDING,
    IN_PROGRESS,
    COMPLETED,
    int(TaskState.NEEDS_INPUT),
    int(TaskState.IN_REVIEW),
    int(TaskState.PROPOSED),
)  # a dependency that may yet complete


def cancel(tx: Txn, task_ids: Sequence[str]) -> list[CanceledTask]:
    """Cancels the named tasks and, transitively, their unfinished dependents; returns
    every task this changed, the named ones first."""
    on_board = rows_by_id(tx.conn, list(task_ids))
    for task_id in task_ids:
        if task_id not in on_board:
            raise errors.TaskNotFound(f"no task {task_id!r}", id=task_id)
    seqs = cancel_seqs(tx, [(on_board[task_id].seq, "canceled by the lead") for task_id in task_ids])
    rows = tx.conn.execute(
        sql(tx.conn).CANCEL_TARGETS,
        (json.dumps(seqs),),
    )
    return [CanceledTask(*row) for row in rows]


_CANCELED_BY_THE_LEAD = "canceled by the lead"
# The error of a proposal the Lead rejected (store/proposals.py), then ": " and the feedback.
REJECTED_PROPOSAL = "proposal rejected"


def retry(tx: Txn, task_ids: Sequence[str], reset_attempts: bool) -> list[int]:
    """Sends the named FAILED or CANCELED tasks back to PENDING (a proposal the Lead has
    not decided to PROPOSED), with their transitive dependents that were canceled
    because of a dependency (not by the lead, nor a proposal the lead rejected) once
    every other dependency of theirs is COMPLETED or unfinished; returns the seqs
    changed, the named ones first. Refuses, writing nothing, a name that is not on
    the board or not FAILED or CANCELED, and a named task with a FAILED or CANCELED
    dependency that this call does not bring back (it would wait for it forever)."""
    on_board = rows_by_id(tx.conn, list(task_ids))
    for task_id in task_ids:
        row = on_board.get(task_id)
        if row is None:
            raise errors.TaskNotFound(f"no task {task_id!r}", id=task_id)
        if row.state not in (TaskState.FAILED, TaskState.CANCELED):
            raise errors.FailedPrecondition(
                f"task {task_id!r} is {row.state.name}: only FAILED or CANCELED tasks are retried", id=task_id
            )
    roots = list(dict.fromkeys(on_board[task_id].seq for task_id in task_ids))
    # The canceled dependents, and every dependency of each (with its state).
    edges = tx.conn.execute(
        sql(tx.conn).RETRY_TARGETS,
        (json.dumps(roots), int(TaskState.CANCELED), _CANCELED_BY_THE_LEAD, f"{REJECTED_PROPOSAL}%"),
    ).fetchall()
    deps: dict[int, list[tuple[int, int]]] = {}
    dep_ids: dict[int, str] = {}
    for seq, dep_seq, dep_state, dep_id in edges:
        deps.setdefault(seq, [])
        if dep_seq is not None:
            deps[seq].append((dep_seq, dep_state))
            dep_ids[dep_seq] = dep_id
    revived = set(roots)
    # A dependent comes back once nothing it needs is dead for good (a DAG: this ends).
    while True:
        more = {
            seq
            for seq, needs in deps.items()
            if seq not in revived and all(state in _NOT_FAILED or dep in revived for dep, state in needs)
        }
        if not more:
            break
        revived |= more
    for task_id in task_ids:
        for dep, state in deps[on_board[task_id].seq]:
            if state in (TaskState.FAILED, TaskState.CANCELED) and dep not in revived:
                raise errors.FailedPrecondition(
                    f"task {task_id!r} depends on {dep_ids[dep]!r}, which is {TaskState(state).name}"
                    " and would never complete: retry it in the same call",
                    id=task_id,
                    dependency=dep_ids[dep],
                )
    ordered = roots + sorted(revived - set(roots))
    for seq in ordered:
        _revive(tx, seq, unmet=sum(state != COMPLETED for _, state in deps[seq]), reset_attempts=reset_attempts)
    task_events(tx, ordered)
    tx.wakes.tally["retries"] += len(ordered)
    return ordered


def _revive(tx: Txn, seq: int, *, unmet: int, reset_attempts: bool) -> None:
    """One FAILED or CANCELED task PENDING again (PROPOSED, a proposal the Lead has not
    decided), behind its unmet dependencies and its not_before (if still ahead); its
    result and error are cleared, and with `reset_attempts` its failures and its
    review's rejections too."""
    (not_before, role, undecided) = tx.conn.execute(sql(tx.conn).REVIVED_GATE, (seq,)).fetchone()
    shut = not_before is not None and not_before > tx.now_ms
    tx.conn.execute(
        sql(tx.conn).REVIVE,
        (unmet + shut, int(shut), shut, not_before, tx.now_ms, reset_attempts, reset_attempts, seq),
    )
    if shut:
        gate_shut(tx, not_before)
    elif unmet == 0 and not undecided:
        tx.wakes.ready_roles[role] += 1
