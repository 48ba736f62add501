"""A task's rows as the store reads them: records, attempts, what a task waits for, pages
of the board, and the `task_changed` events."""

from __future__ import annotations

import dataclasses
import functools
import json
import sqlite3
from collections.abc import Iterable, Sequence

from ... import errors
from ...model import (
    USING_AN_ATTEMPT,
    AttemptRecord,
    ClaimOutcome,
    QuestionAnswer,
    ReviewPolicy,
    TaskPage,
    TaskRecord,
    TaskState,
    TeammateAvailability,
    Usage,
    WaitingFor,
)
from ...txn import Txn
from .. import keys, leases
from ..dialect import sql

PENDING, IN_PROGRESS, COMPLETED = int(TaskState.PENDING), int(TaskState.IN_PROGRESS), int(TaskState.COMPLETED)
NEEDS_INPUT = int(TaskState.NEEDS_INPUT)
IN_REVIEW = int(TaskState.IN_REVIEW)
PROPOSED = int(TaskState.PROPOSED)


_STATES = {int(state): state for state in TaskState}  # a dict lookup, where TaskState(n) is a call


TASK_WIDTH = 40  # the columns of a task's row (the drivers' TASK_COLUMNS)


def task_record(row: tuple) -> TaskRecord:
    """A TaskRecord from a row of `TASK_COLUMNS`, built as a tuple (binding 29 keywords
    costs more): the columns are in TaskRecord's field order but for
    depends_on (the last column), state (an int), result (NULL until completed) and
    usage (four columns), and `failures` (read as the attempts used). The rules of
    `model.attempts_used` and of the resources' column are applied in place: every
    claim and completion builds a record, and a call per field costs more."""
    depends_on, state, failures, resources = row[39], row[9], row[31], row[38]
    return TaskRecord._make(
        (
            *row[0:5],  # seq .. payload
            tuple(depends_on.split("\n")) if depends_on else (),
            *row[5:9],  # priority .. lease_ms
            _STATES[state],
            row[10],  # owner
            row[11],  # attempt
            row[12] or b"",  # result
            *row[13:26],  # error .. concurrency_key
            Usage._make(row[26:30]),
            row[30],  # attempt_timeout_ms
            failures + 1 if state in USING_AN_ATTEMPT else failures,
            row[32],  # question
            None if row[33] is None else _review_policy(row[33], row[34]),
            row[35],  # review_rounds
            row[36],  # proposed_by
            row[37],  # discovered_from
            *(_resources(resources) if resources else _NO_RESOURCES),
            (),  # artifacts: read apart, by the reads that show them
        )
    )


_NO_RESOURCES: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())


def _resources(stored: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A task's exclusive and shared resources from `tasks.resources` (not '')."""
    exclusive, shared = json.loads(stored)
    return tuple(exclusive), tuple(shared)


@functools.lru_cache(maxsize=256)
def _review_policy(role: str, max_rounds: int) -> ReviewPolicy:
    return ReviewPolicy(role, max_rounds)


def task_by_seq(conn: sqlite3.Connection, seq: int) -> TaskRecord:
    return task_record(conn.execute(sql(conn).TASK_BY_SEQ, (seq,)).fetchone())


def records_by_seq(conn: sqlite3.Connection, seqs: Sequence[int]) -> list[TaskRecord]:
    """The tasks `seqs`, in that order, in one statement."""
    found = {
        record.seq: record
        for record in map(
            task_record,
            conn.execute(sql(conn).TASKS_BY_SEQ, (json.dumps(list(seqs)),)),
        )
    }
    return [found[seq] for seq in seqs if seq in found]


def get_task(conn: sqlite3.Connection, task_id: str) -> TaskRecord:
    row = conn.execute(sql(conn).TASK_BY_ID, (task_id,)).fetchone()
    if row is None:
        raise errors.TaskNotFound(f"no task {task_id!r}", id=task_id)
    return task_record(row)


# A task's history is bounded on the way out: a task retried without end (or
# released over and over) would otherwise make its GetTask grow without end.
ATTEMPTS_SHOWN = 100


def _attempt(row: tuple) -> AttemptRecord:
    attempt, owner, fence, claim_ms, end_ms, outcome, error, review_round, feedback = row
    return AttemptRecord(
        attempt=attempt,
        owner=owner,
        fence=fence,
        claim_ms=claim_ms,
        end_ms=end_ms,
        outcome=None if outcome is None else ClaimOutcome(outcome),
        error=error,
        review_round=review_round,
        feedback=feedback,
    )


def task_attempts(conn: sqlite3.Connection, seq: int, limit: int = ATTEMPTS_SHOWN) -> list[AttemptRecord]:
    """The task's most recent `limit` claims, oldest first (the live one last)."""
    rows = conn.execute(sql(conn).TASK_ATTEMPTS, (seq, limit)).fetchall()
    return [_attempt(row) for row in reversed(rows)]


def task_history(conn: sqlite3.Connection, task_id: str) -> tuple[TaskRecord, list[AttemptRecord], WaitingFor | None]:
    """The task, its recent claims and what it waits for, from one snapshot: never
    IN_PROGRESS without its live claim, nor a claim's end without the task's."""

    def read() -> tuple[TaskRecord, list[AttemptRecord], WaitingFor | None]:
        task = get_task(conn, task_id)
        return task, task_attempts(conn, task.seq), waiting_for(conn, [task]).get(task.seq)

    if conn.in_transaction:
        return read()
    conn.execute("BEGIN")  # a read transaction: the statements see the same commit
    try:
        return read()
    finally:
        conn.execute("COMMIT")


WAITING_DEPENDENCIES_SHOWN = 100


def waiting_for(conn: sqlite3.Connection, records: Sequence[TaskRecord]) -> dict[int, WaitingFor]:
    """Why each PENDING task among `records` is not being worked, by seq; a task a
    teammate online may claim now is left out. A few statements for the whole list."""
    pending = [record for record in records if record.state is TaskState.PENDING]
    if not pending:
        return {}
    seqs = json.dumps([record.seq for record in pending])
    unmet: dict[int, list[str]] = {}
    for seq, dep_id in conn.execute(
        sql(conn).UNMET_DEPENDENCIES,
        (seqs,),
    ):
        unmet.setdefault(seq, []).append(dep_id)
    gates = dict(
        conn.execute(
            sql(conn).SHUT_GATES,
            (seqs,),
        ).fetchall()
    )
    staffed = _availability(conn, {record.required_role for record in pending})
    full = keys.full_among(conn, {record.concurrency_key for record in pending if record.concurrency_key})
    found = {}
    for record in pending:
        why = WaitingFor(
            tuple(unmet.get(record.seq, ())[:WAITING_DEPENDENCIES_SHOWN]),
            gates.get(record.seq),
            staffed[record.required_role],
            record.concurrency_key if record.concurrency_key in full else "",
            leases.conflicts(conn, stored) if (stored := _stored_resources(record)) else (),
        )
        if (
            why.dependencies
            or why.ready_ms is not None
            or why.full_key
            or why.resources
            or why.teammates is not TeammateAvailability.SOME_ONLINE
        ):
            found[record.seq] = why
    return found


def _stored_resources(record: TaskRecord) -> str:
    return leases.stored(record.resources, record.shared_resources)


def _availability(conn: sqlite3.Connection, roles: set[str]) -> dict[str, TeammateAvailability]:
    """For each role ('' = none required): is a teammate that may take its tasks online?"""
    counts = dict.fromkeys(roles, (0, 0))
    for role_list, online in conn.execute("SELECT roles, online FROM teammates WHERE removed = 0"):
        held = set(json.loads(role_list)) | {""}
        for role in roles & held:
            registered, up = counts[role]
            counts[role] = (registered + 1, up + bool(online))
    return {
        role: TeammateAvailability.NONE_REGISTERED
        if registered == 0
        else TeammateAvailability.NONE_ONLINE
        if up == 0
        else TeammateAvailability.SOME_ONLINE
        for role, (registered, up) in counts.items()
    }


_NO_FENCE_YET = 2**63 - 1  # above every fence: SQLite rowids are signed 64-bit


def previous_attempt(conn: sqlite3.Connection, seq: int, before_fence: int = _NO_FENCE_YET) -> AttemptRecord | None:
    """The task's latest ended claim before the claim `before_fence` (by default, before any new one)."""
    row = conn.execute(sql(conn).PREVIOUS_ATTEMPT, (seq, before_fence)).fetchone()
    return None if row is None else _attempt(row)


def list_tasks(
    conn: sqlite3.Connection,
    *,
    states: Sequence[TaskState],
    owner: str,
    after_seq: int,
    limit: int,
    max_bytes: int,
) -> TaskPage:
    """Up to `limit` tasks after `after_seq`, as many as fit in `max_bytes` on the
    wire (always at least one). The page is chosen from sizes alone, so no task
    outside it is ever loaded."""
    statements = sql(conn)
    p = statements.P
    where: list[str] = [f"seq > {p}"]
    params: list[object] = [after_seq]
    if states:
        where.append(f"state IN ({statements.marks(len(states))})")
        params.extend(int(s) for s in states)
    if owner:
        where.append(f"owner = {p}")
        params.append(owner)
    sized = conn.execute(
        f"SELECT seq, {statements.WIRE_BYTES} FROM tasks WHERE {' AND '.join(where)} ORDER BY seq LIMIT {p}",
        (*params, limit + 1),
    ).fetchall()
    count, total = 0, 0
    for _, size in sized[:limit]:
        total += size
        if count and total > max_bytes:
            break
        count += 1
    if not count:
        return TaskPage([], more=False)
    last = sized[count - 1][0]
    rows = conn.execute(
        f"SELECT {statements.TASK_COLUMNS} FROM tasks WHERE {' AND '.join(where)}"
        f" AND seq <= {p} ORDER BY seq LIMIT {p}",
        (*params, last, count),
    ).fetchall()
    records = [task_record(row) for row in rows]
    return TaskPage(records, more=len(sized) > count, waiting=waiting_for(conn, records))


def wire_bytes_by_id(conn: sqlite3.Connection, task_ids: Iterable[str]) -> dict[str, int]:
    """Each task's size on the wire (the bound `list_tasks` uses), without loading any payload."""
    rows = conn.execute(sql(conn).WIRE_BYTES_BY_ID, (json.dumps(sorted(set(task_ids))),))
    return dict(rows)


def count_by_state(conn: sqlite3.Connection) -> dict[TaskState, int]:
    rows = conn.execute("SELECT state, count(*) FROM tasks GROUP BY state")
    return {TaskState(state): count for state, count in rows}


def next_deadline(conn: sqlite3.Connection) -> int | None:
    """The earliest instant at which a lease ends, a shutdown grace runs out or a time gate opens."""
    lease = conn.execute(sql(conn).EARLIEST_LEASE).fetchone()[0]
    grace = conn.execute(sql(conn).EARLIEST_GRACE).fetchone()[0]
    candidates = [t for t in (lease, grace, earliest_gate(conn)) if t is not None]
    return min(candidates) if candidates else None


@dataclasses.dataclass(frozen=True, slots=True)
class BoardRow:
    seq: int
    spec_digest: bytes
    state: TaskState
    create_ms: int
    finish_ms: int | None
    max_attempts: int
    lease_ms: int


def rows_by_id(conn: sqlite3.Connection, ids: list[str], lock: str = "") -> dict[str, BoardRow]:
    """The tasks among `ids` that are on the board, in one statement; `lock`: held in this
    mode (`row_lock`), taken in seq order."""
    if not ids:
        return {}
    statements = sql(conn)
    clause = statements.row_lock(f"{lock} OF t") if lock else ""  # '' on SQLite
    locking = f" ORDER BY t.seq{clause}" if clause else ""
    rows = conn.execute(statements.ROWS_BY_ID + locking, (json.dumps(ids),))
    return {
        task_id: BoardRow(seq, digest, TaskState(state), *times_and_limits)
        for task_id, seq, digest, state, *times_and_limits in rows
    }


def answers_of(conn: sqlite3.Connection, seq: int) -> tuple[QuestionAnswer, ...]:
    """Every question asked on the task and its answer (None while it waits), oldest first."""
    return tuple(QuestionAnswer(*row) for row in conn.execute(sql(conn).ANSWERS, (seq,)))


def earliest_gate(conn: sqlite3.Connection) -> int | None:
    return conn.execute(sql(conn).EARLIEST_GATE).fetchone()[0]


def task_events(tx: Txn, seqs: list[int]) -> None:
    """The `task_changed` event of each task in `seqs`, in that order."""
    tx.conn.execute(sql(tx.conn).TASKS_CHANGED, (tx.now_ms, json.dumps(seqs)))
    tx.wakes.events = True


def task_changed(tx: Txn, seq: int) -> None:
    """The `task_changed` event of task `seq` as it stands now."""
    tx.conn.execute(sql(tx.conn).TASK_CHANGED, (tx.now_ms, seq))
    tx.wakes.events = True
