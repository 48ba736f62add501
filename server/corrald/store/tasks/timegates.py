"""Time gates: a task held back until an instant (`not_before`, a retry's backoff), opened when it comes."""

from __future__ import annotations

import sqlite3

from ...txn import Txn
from ..dialect import sql, steps
from .rows import PENDING, task_changed


def gate_shut(tx: Txn, gate_ms: int) -> None:
    """A task's gate was shut until `gate_ms`: the reaper's timer opens it then."""
    tx.wakes.deadline(gate_ms)
    tx.gates.lowered_to(gate_ms)


def open_due_gates(tx: Txn) -> None:
    """Opens every time gate whose instant has come; a task it leaves with nothing
    unmet is ready. Asks nothing while `now` is before the earliest gate the writer
    knows of."""
    if tx.gates.none_due(tx.now_ms):
        return
    gates = steps(tx.conn).open_due_gates(tx)
    for opened in gates.opened:
        if opened.state != PENDING:
            continue  # canceled while it waited
        if opened.unmet == 0:
            tx.wakes.ready_roles[opened.role] += 1
            tx.made_ready.add(opened.seq)
        task_changed(tx, opened.seq)
    tx.gates.learned(gates.earliest_ms)


def any_gate_due(conn: sqlite3.Connection, now_ms: int) -> bool:
    """Whether a shut time gate's instant has come (the writer opens it at the next claim or reap)."""
    return conn.execute(sql(conn).ANY_GATE_DUE, (now_ms,)).fetchone() is not None
