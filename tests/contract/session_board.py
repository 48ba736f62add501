"""What the Session tests read back from a daemon's board to judge a run against design §2.

The daemon's own database, opened read-only (WAL lets it be read while the
daemon writes), is the record of what committed and in which order: the
events table's `seq` orders every job (one writer, jobs run one after
another even inside a group commit), claims carry their fence and daemon-clock
instant, inbox items their send instant.

- `shutdown_gate_breaches`: claims committed while a shutdown request was
  unanswered (invariant 5, exact: both sides are in the event log).
- `board_history`: runs the reliability suite's history checker
  (`tests/reliability/rel_history.py`) over recorded deliveries and ops.
- `completions_per_task` and `claims_of`: what the claims table says.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3

from google.rpc import error_details_pb2

from tests.reliability.rel_history import Recorder, check
from tests.support.boards import one_snapshot, read_board

TASK_IN_PROGRESS = 2


def board_db(daemon) -> contextlib.AbstractContextManager[sqlite3.Connection]:
    """The daemon's board, read-only (the daemon may keep running), on either store
    (tests/support/boards.py)."""
    return read_board(daemon.state_dir)


def reason_of(status) -> str:
    """The ErrorInfo reason of a google.rpc.Status (an op result's), or ""."""
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info.reason
    return ""


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimRow:
    token: str
    task: str
    teammate: str
    fence: int
    attempt: int
    claim_ms: int
    outcome: str | None


def claims_of(conn: sqlite3.Connection) -> dict[str, ClaimRow]:
    """Every claim ever made, by token."""
    rows = conn.execute(
        "SELECT c.token, t.id, c.teammate, c.fence, c.attempt, c.claim_ms, c.outcome"
        " FROM claims c JOIN tasks t ON t.seq = c.task_seq ORDER BY c.fence"
    )
    return {row[0]: ClaimRow(*row) for row in rows}


def inbox_send_ms(conn: sqlite3.Connection) -> dict[tuple[str, int], int]:
    """(recipient, seq) -> the daemon-clock instant its job ran."""
    return {(name, seq): ms for name, seq, ms in conn.execute("SELECT recipient, seq, send_ms FROM inbox")}


def completions_per_task(conn: sqlite3.Connection) -> dict[str, int]:
    rows = conn.execute(
        "SELECT t.id, count(*) FROM claims c JOIN tasks t ON t.seq = c.task_seq"
        " WHERE c.outcome = 'completed' GROUP BY t.id"
    )
    return dict(rows)


def shutdown_gate_breaches(conn: sqlite3.Connection) -> list[str]:
    """Claims whose job ran while their teammate had an unanswered shutdown request.

    Walks the event log in commit order: a teammate's status moving to
    shutting down opens the window, its `shutdown_answered` closes it, and a
    `task_changed` to IN_PROGRESS owned by it inside the window is a claim
    past the gate (design §2 invariant 5)."""
    pending: dict[str, int] = {}  # teammate -> seq of the event that made it shut
    breaches = []
    for seq, kind, data in conn.execute(
        "SELECT seq, kind, data FROM events WHERE kind IN ('teammate_changed', 'shutdown_answered', 'task_changed')"
        " ORDER BY seq"
    ):
        fields = json.loads(data)
        if kind == "teammate_changed" and fields.get("reason") == "shutting_down":
            pending.setdefault(fields["name"], seq)
        elif kind == "shutdown_answered":
            pending.pop(fields["teammate"], None)
        elif kind == "task_changed" and fields.get("state") == TASK_IN_PROGRESS and fields.get("owner") in pending:
            owner = fields["owner"]
            breaches.append(
                f"task {fields['id']} claimed by {owner} at event {seq}, inside the shutdown window opened at "
                f"event {pending[owner]}"
            )
    return breaches


def board_history(recorder: Recorder, daemon) -> tuple[dict, list[str]]:
    """The reliability history checker over `recorder`'s records and the daemon's final board."""
    with board_db(daemon) as conn, one_snapshot(conn):  # its streams may still be ending
        return check(recorder.events, conn)
