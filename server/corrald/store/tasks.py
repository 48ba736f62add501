"""Tasks: create, claim, renew, complete, fail, release, cancel, reclaim."""

from __future__ import annotations

import dataclasses
import json
import random
import secrets
import sqlite3
from collections.abc import Iterable, Sequence

from .. import errors
from ..config import DEPENDENCY_RESULTS_MAX_BYTES
from ..model import (
    AttemptRecord,
    CanceledTask,
    ClaimEnd,
    ClaimEndReason,
    ClaimGrant,
    ClaimOutcome,
    CreatedBatch,
    CreatedTask,
    Progress,
    TaskPage,
    TaskRecord,
    TaskSpec,
    TaskState,
    TeammateAvailability,
    Txn,
    Usage,
    WaitingFor,
)
from ..validate import PreparedBatch
from . import keys, ops
from . import usage as spending
from .dialect import fuses_statements, sql
from .gates import protocol_pending
from .status import mark_busy, refresh_status

PENDING, IN_PROGRESS, COMPLETED = int(TaskState.PENDING), int(TaskState.IN_PROGRESS), int(TaskState.COMPLETED)
_STATES = {int(state): state for state in TaskState}  # a dict lookup, where TaskState(n) is a call


# ---------------------------------------------------------------- reads


_TASK_WIDTH = 32  # the columns of a task's row (the drivers' TASK_COLUMNS)


def _record(row: tuple) -> TaskRecord:
    """A TaskRecord from a row of `TASK_COLUMNS`, built as a tuple (binding 29 keywords
    costs more): the columns are in TaskRecord's field order but for
    depends_on (the last column), state (an int), result (NULL until completed) and
    usage (four columns)."""
    depends_on = row[31]
    return TaskRecord._make(
        (
            *row[0:5],  # seq .. payload
            tuple(depends_on.split("\n")) if depends_on else (),
            *row[5:9],  # priority .. lease_ms
            _STATES[row[9]],
            row[10],  # owner
            row[11],  # attempt
            row[12] or b"",  # result
            *row[13:26],  # error .. concurrency_key
            Usage._make(row[26:30]),
            row[30],  # attempt_timeout_ms
        )
    )


def task_by_seq(conn: sqlite3.Connection, seq: int) -> TaskRecord:
    return _record(conn.execute(sql(conn).TASK_BY_SEQ, (seq,)).fetchone())


def records_by_seq(conn: sqlite3.Connection, seqs: Sequence[int]) -> list[TaskRecord]:
    """The tasks `seqs`, in that order, in one statement."""
    found = {
        record.seq: record
        for record in map(
            _record,
            conn.execute(sql(conn).TASKS_BY_SEQ, (json.dumps(list(seqs)),)),
        )
    }
    return [found[seq] for seq in seqs if seq in found]


def get_task(conn: sqlite3.Connection, task_id: str) -> TaskRecord:
    row = conn.execute(sql(conn).TASK_BY_ID, (task_id,)).fetchone()
    if row is None:
        raise errors.TaskNotFound(f"no task {task_id!r}", id=task_id)
    return _record(row)


# A task's history is bounded on the way out: a task retried without end (or
# released over and over) would otherwise make its GetTask grow without end.
ATTEMPTS_SHOWN = 100


def _attempt(row: tuple) -> AttemptRecord:
    attempt, owner, fence, claim_ms, end_ms, outcome, error = row
    return AttemptRecord(
        attempt=attempt,
        owner=owner,
        fence=fence,
        claim_ms=claim_ms,
        end_ms=end_ms,
        outcome=None if outcome is None else ClaimOutcome(outcome),
        error=error,
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
        sql(conn).WAITING_FOR_SELECT,
        (seqs,),
    ):
        unmet.setdefault(seq, []).append(dep_id)
    gates = dict(
        conn.execute(
            sql(conn).WAITING_FOR_SELECT_2,
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
        )
        if (
            why.dependencies
            or why.ready_ms is not None
            or why.full_key
            or why.teammates is not TeammateAvailability.SOME_ONLINE
        ):
            found[record.seq] = why
    return found


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


def _previous_attempt(conn: sqlite3.Connection, seq: int, before_fence: int = _NO_FENCE_YET) -> AttemptRecord | None:
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
    records = [_record(row) for row in rows]
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
    lease = conn.execute(sql(conn).NEXT_DEADLINE_SELECT).fetchone()[0]
    grace = conn.execute(sql(conn).NEXT_DEADLINE_SELECT_2).fetchone()[0]
    candidates = [t for t in (lease, grace, _earliest_gate(conn)) if t is not None]
    return min(candidates) if candidates else None


# ---------------------------------------------------------------- create


def create_batch(tx: Txn, batch: PreparedBatch, request_id: str = "") -> CreatedBatch:
    """Adds a checked batch, all or nothing; an identical re-send changes nothing.

    Set-based, so the job's time grows with rows written, not with statements:
    one lookup of the batch's ids, one of the dependencies outside it, one
    INSERT per table, and the creation events written by SQL from the rows.
    """
    conn = tx.conn
    if request_id:
        row = conn.execute(sql(conn).CREATE_BATCH_SELECT, (request_id,)).fetchone()
        if row is not None:
            if row[0] != batch.digest:
                raise errors.AlreadyExists(
                    f"request_id {request_id!r} was used for a different batch", field="request_id"
                )
            ids = json.loads(row[1])
            on_board = _rows_by_id(conn, ids)
            return CreatedBatch([_created(task_id, on_board[task_id]) for task_id in ids], tuple(ids))
    specs = batch.specs
    on_board = _rows_by_id(conn, [spec.id for spec in specs])
    _refuse_changed_specs(specs, batch.spec_digests, on_board)
    new_specs = [(index, spec) for index, spec in enumerate(specs) if spec.id not in on_board]
    new_ids = {spec.id for _, spec in new_specs}
    # The dependencies' rows stay as read until this transaction ends: a completion of one
    # waits for it, and then counts down the new tasks too (docs/postgres.md, ordering 2).
    outside = _rows_by_id(
        conn, list({dep for _, spec in new_specs for dep in spec.depends_on if dep not in new_ids}), lock="SHARE"
    )
    # A gate still shut counts as one more unmet dependency (schema migration 6).
    shut = [spec.not_before_ms is not None and spec.not_before_ms > tx.now_ms for _, spec in new_specs]
    unmet = [
        _unmet_deps(index, spec, new_ids, outside) + gated for (index, spec), gated in zip(new_specs, shut, strict=True)
    ]
    seq_of: dict[str, int] = {}
    if new_specs:
        conn.executemany(
            sql(conn).CREATE_BATCH_INSERT_TASKS,
            [
                (
                    spec.id,
                    spec.title,
                    spec.description,
                    spec.payload,
                    spec.priority,
                    spec.required_role,
                    spec.max_attempts,
                    spec.lease_ms,
                    batch.spec_digests[index],
                    PENDING,
                    count,
                    tx.now_ms,
                    spec.not_before_ms,
                    spec.retry_backoff_ms,
                    spec.retry_backoff_max_ms,
                    spec.not_before_ms,
                    gated,
                    spec.trace_parent,
                    spec.concurrency_key,
                    spec.attempt_timeout_ms,
                )
                for (index, spec), count, gated in zip(new_specs, unmet, shut, strict=True)
            ],
        )
        for (_, spec), gated in zip(new_specs, shut, strict=True):
            if gated:
                assert spec.not_before_ms is not None
                _gate_shut(tx, spec.not_before_ms)
        seq_of.update(_inserted_seqs(conn, [spec.id for _, spec in new_specs]))
        seq_of.update((task_id, row.seq) for task_id, row in outside.items())
        conn.executemany(
            sql(conn).CREATE_BATCH_INSERT_DEPS,
            [
                (seq_of[spec.id], seq_of[dep], position)
                for _, spec in new_specs
                for position, dep in enumerate(spec.depends_on)
            ],
        )
        _task_events(tx, [seq_of[spec.id] for _, spec in new_specs])
        for (_, spec), count in zip(new_specs, unmet, strict=True):
            if count == 0:
                tx.wakes.ready_roles[spec.required_role] += 1
    if request_id:
        conn.execute(
            sql(conn).CREATE_BATCH_INSERT_CREATE_REQUESTS,
            (request_id, batch.digest, json.dumps([spec.id for spec in specs])),
        )
    unchanged = tuple(spec.id for spec in specs if spec.id not in new_ids)
    created = [
        CreatedTask(spec.id, seq_of[spec.id], TaskState.PENDING, tx.now_ms, None, spec.max_attempts, spec.lease_ms)
        if spec.id in new_ids
        else _created(spec.id, on_board[spec.id])
        for spec in specs
    ]
    return CreatedBatch(created, unchanged)


def _inserted_seqs(conn: sqlite3.Connection, ids: list[str]) -> Iterable[tuple[str, int]]:
    """The seqs the tasks `ids`, just inserted in this order, were given."""
    if isinstance(conn, sqlite3.Connection):
        # SQLite's one writer: AUTOINCREMENT gave the rows consecutive seqs.
        (last,) = conn.execute("SELECT last_insert_rowid()").fetchone()
        return zip(ids, range(last - len(ids) + 1, last + 1), strict=True)
    return ((task_id, row.seq) for task_id, row in _rows_by_id(conn, ids).items())


@dataclasses.dataclass(frozen=True, slots=True)
class _BoardRow:
    seq: int
    spec_digest: bytes
    state: TaskState
    create_ms: int
    finish_ms: int | None
    max_attempts: int
    lease_ms: int


def _rows_by_id(conn: sqlite3.Connection, ids: list[str], lock: str = "") -> dict[str, _BoardRow]:
    """The tasks among `ids` that are on the board, in one statement; `lock`: held in this
    mode (`row_lock`), taken in seq order."""
    if not ids:
        return {}
    statements = sql(conn)
    clause = statements.row_lock(f"{lock} OF t") if lock else ""  # '' on SQLite
    locking = f" ORDER BY t.seq{clause}" if clause else ""
    rows = conn.execute(statements.ROWS_BY_ID + locking, (json.dumps(ids),))
    return {
        task_id: _BoardRow(seq, digest, TaskState(state), *times_and_limits)
        for task_id, seq, digest, state, *times_and_limits in rows
    }


def _created(task_id: str, row: _BoardRow) -> CreatedTask:
    return CreatedTask(task_id, row.seq, row.state, row.create_ms, row.finish_ms, row.max_attempts, row.lease_ms)


def _refuse_changed_specs(specs: Sequence[TaskSpec], digests: Sequence[bytes], on_board: dict[str, _BoardRow]) -> None:
    """Refuses, naming every one, when an id of the batch is on the board with a different spec."""
    differing = [
        (index, spec.id)
        for index, (spec, digest) in enumerate(zip(specs, digests, strict=True))
        if spec.id in on_board and on_board[spec.id].spec_digest != digest
    ]
    if differing:
        shown = ", ".join(repr(task_id) for _, task_id in differing[:20])
        more = f" and {len(differing) - 20} more" if len(differing) > 20 else ""
        raise errors.AlreadyExists(
            f"task {shown}{more} exists with a different spec"
            if len(differing) == 1
            else f"tasks {shown}{more} exist with a different spec",
            field=f"tasks[{differing[0][0]}].id",
        )


def _unmet_deps(index: int, spec: TaskSpec, new_ids: set[str], outside: dict[str, _BoardRow]) -> int:
    """How many of the task's dependencies are not COMPLETED; refuses unknown or dead ones."""
    unmet = 0
    for dep in spec.depends_on:
        if dep in new_ids:
            unmet += 1
            continue
        row = outside.get(dep)
        if row is None:
            raise errors.InvalidArgument(f"tasks[{index}].depends_on", f"unknown dependency {dep!r}")
        if row.state in (TaskState.FAILED, TaskState.CANCELED):
            raise errors.InvalidArgument(f"tasks[{index}].depends_on", f"dependency {dep!r} is {row.state.name}")
        unmet += row.state != TaskState.COMPLETED
    return unmet


# ---------------------------------------------------------------- claims


def claim_next(
    tx: Txn, teammate: str, roles: Iterable[str], *, reclaimed: bool = False, busy: bool = False
) -> ClaimGrant | None:
    """Claims the first ready task this teammate may take, or returns None.

    Expired leases are reclaimed first, unless the caller just did (`reclaimed`).
    With `busy`, the teammate's status is stored busy already (a completion's
    handoff: it held the claim it just completed) and is not written again.
    """
    if not reclaimed:
        reclaim_expired(tx)
    open_due_gates(tx)
    token = secrets.token_urlsafe(24)  # 192 bits; UNIQUE in claims makes reuse impossible
    taken = _take_first_ready(tx, teammate, roles, token)
    if taken is None:
        return None
    task, fence, last_attempt = taken
    seq, attempt, lease_end = task.seq, task.attempt, task.lease_expire_ms
    assert lease_end is not None
    # A task claimed before (tasks.attempt is 0 until its first claim) carries
    # its latest ended claim; a first claim asks nothing more.
    previous = _previous_attempt(tx.conn, seq, fence) if last_attempt else None
    tx.wakes.deadline(lease_end)
    tx.leases.lowered_to(lease_end)
    tx.wakes.tally["claims"] += 1
    if task.concurrency_key:
        keys.taken(tx, task.concurrency_key)
    if not busy:
        mark_busy(tx, teammate)
    tx.wakes.note("claimed", task=task.id, teammate=teammate, attempt=attempt, fence=fence)
    results, omitted = dependency_results(tx.conn, task)
    return ClaimGrant(task, token, lease_end, attempt, fence, previous, results, omitted)


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimRef:
    """A live claim, without the task: enough to decide whether to re-send it."""

    task_seq: int
    token: str
    lease_expire_ms: int
    attempt: int
    fence: int


def _take_first_ready(tx: Txn, teammate: str, roles: Iterable[str], token: str) -> tuple[TaskRecord, int, int] | None:
    """Claims the first ready task for `teammate` under `token`: (the task as claimed, the
    claim's fence, the task's attempt before), or None when no task is ready for it. Writes
    the claim's row, the task's and its `task_changed` event."""
    statements = sql(tx.conn)
    ready, allowed = _ready_query(tx.conn, roles)
    now = tx.now_ms
    if fuses_statements(tx.conn):
        # One round trip: the pick, the claim's row, the task's and its event.
        row = tx.conn.execute(
            statements.claim_first_ready(ready), (*allowed, token, teammate, now, teammate, now, now, now, now)
        ).fetchone()
        if row is None:
            return None
        tx.wakes.events = True
        return _record(row[:-2]), row[-2], row[-1]
    picked = tx.conn.execute(ready, allowed).fetchone()
    if picked is None:
        return None
    seq, failures, last_attempt = picked
    (fence,) = tx.conn.execute(
        statements.TAKE_FIRST_READY,
        (token, seq, teammate, failures + 1, tx.now_ms),
    ).fetchone()
    claimed = tx.conn.execute(statements.CLAIM_TASK, (teammate, fence, now, now, now, seq)).fetchall()
    if len(claimed) != 1:
        raise RuntimeError(f"claim of task seq {seq} changed {len(claimed)} rows")
    task_changed(tx, seq)
    return _record(claimed[0]), fence, last_attempt


def _ready_query(conn: sqlite3.Connection, roles: Iterable[str]) -> tuple[str, list[str]]:
    """The query, and its parameters, for (seq, failures, last claim's attempt) of the first
    ready task a teammate with `roles` may take: in board order, passing over the tasks
    whose concurrency key is at its limit."""
    allowed = ["", *roles]
    return (
        f"SELECT seq, failures, attempt FROM tasks WHERE state = {PENDING} AND unmet_deps = 0"
        f" AND required_role IN ({sql(conn).marks(len(allowed))}){keys.FULL_KEYS} ORDER BY priority DESC, seq LIMIT 1"
    ), allowed


def _first_ready(conn: sqlite3.Connection, roles: Iterable[str]) -> tuple[int, int, int] | None:
    return conn.execute(*_ready_query(conn, roles)).fetchone()


def any_ready(conn: sqlite3.Connection, roles: Iterable[str]) -> bool:
    return _first_ready(conn, roles) is not None


def work_waited_for(conn: sqlite3.Connection, teammate: str, roles: Iterable[str], limit: int = 10) -> list[str]:
    """Up to `limit` unfinished tasks that `teammate` could still take, in board order.

    PENDING, ready or not (its dependencies may still complete), or IN_PROGRESS
    under another holder (that claim may end and the task come back), and
    open to this teammate's roles. While one remains the teammate is waiting
    for work, not idle, and its idle budget is not spent.
    """
    roles = list(roles)
    statements = sql(conn)
    p = statements.P
    role_test = f"required_role IN ('', {statements.marks(len(roles))})" if roles else "required_role = ''"
    rows = conn.execute(
        f"SELECT id FROM tasks WHERE (state = {PENDING} OR (state = {IN_PROGRESS} AND owner != {p})) AND {role_test}"
        f" ORDER BY seq LIMIT {p}",
        (teammate, *roles, limit),
    )
    return [task_id for (task_id,) in rows]


def any_lease_ended(conn: sqlite3.Connection, now_ms: int) -> bool:
    """Whether some claim's lease is over and awaits reclaiming."""
    return conn.execute(sql(conn).ANY_LEASE_ENDED, (now_ms,)).fetchone() is not None


def held_claim_refs(conn: sqlite3.Connection, teammate: str, now_ms: int) -> list[ClaimRef]:
    """The teammate's claims whose lease has not ended (a dead one awaits the reaper)."""
    rows = conn.execute(sql(conn).HELD_CLAIMS, (teammate, now_ms)).fetchall()
    return [ClaimRef(*row) for row in rows]


def grant(conn: sqlite3.Connection, ref: ClaimRef) -> ClaimGrant:
    """A held claim as it is sent again (a new stream): as it was first sent, its previous
    attempt and its dependencies' results included."""
    previous = _previous_attempt(conn, ref.task_seq, ref.fence)
    task = task_by_seq(conn, ref.task_seq)
    results, omitted = dependency_results(conn, task)
    return ClaimGrant(task, ref.token, ref.lease_expire_ms, ref.attempt, ref.fence, previous, results, omitted)


def dependency_results(
    conn: sqlite3.Connection, task: TaskRecord
) -> tuple[tuple[tuple[str, bytes], ...], tuple[str, ...]]:
    """The results of the task's dependencies in depends_on order while their running
    total stays within DEPENDENCY_RESULTS_MAX_BYTES, and the ids of the rest. One
    statement, and none for a task without dependencies; a result left out is never
    read (length() of a blob comes from its header)."""
    if not task.depends_on:
        return (), ()
    rows = conn.execute(
        sql(conn).DEPENDENCY_RESULTS,
        (DEPENDENCY_RESULTS_MAX_BYTES, task.seq),
    ).fetchall()
    kept = tuple((dep_id, bytes(result)) for dep_id, result in rows if result is not None)
    return kept, tuple(dep_id for dep_id, result in rows if result is None)


def _live_claim(
    tx: Txn, teammate: str, task_id: str, token: str, *, completed_ok: bool = False
) -> tuple[int, int, int, str]:
    """Returns (task seq, fence, lease ms, concurrency key) of the caller's live claim, or raises why not.

    With `completed_ok`, the token that completed the task returns fence 0
    instead of raising (a repeated CompleteTask is answered from the store).
    """
    # One statement for the task and the token's claim (if any): the writer
    # gives up the GIL on every statement and may wait to get it back.
    row = tx.conn.execute(
        sql(tx.conn).LIVE_CLAIM,
        (token, task_id),
    ).fetchone()
    if row is None:
        raise errors.TaskNotFound(f"no task {task_id!r}", id=task_id)
    seq, live_fence, lease_end, lease_ms, key, attempt_deadline, fence, claim_task, holder, outcome = row
    if fence is None or claim_task != seq or holder != teammate:
        raise errors.ClaimTokenMismatch(f"token is not your claim on task {task_id!r}", id=task_id)
    if outcome is None and fence == live_fence:
        if tx.now_ms >= lease_end:
            if attempt_deadline is not None and lease_end >= attempt_deadline:
                raise errors.AttemptTimedOut(f"attempt on task {task_id!r} ran past its attempt_timeout", id=task_id)
            raise errors.LeaseExpired(f"lease on task {task_id!r} ended", id=task_id)
        return seq, fence, lease_ms, key
    if outcome == ClaimOutcome.COMPLETED and completed_ok:
        return seq, 0, lease_ms, key
    if outcome == ClaimOutcome.EXPIRED:
        raise errors.LeaseExpired(f"lease on task {task_id!r} ended", id=task_id)
    if outcome == ClaimOutcome.CANCELED:
        raise errors.TaskCanceled(f"task {task_id!r} was canceled", id=task_id)
    if outcome == ClaimOutcome.REVOKED:
        raise errors.ClaimRevoked(f"claim on task {task_id!r} was revoked", id=task_id)
    if outcome == ClaimOutcome.TIMED_OUT:
        raise errors.AttemptTimedOut(f"attempt on task {task_id!r} ran past its attempt_timeout", id=task_id)
    raise errors.ClaimTokenMismatch(f"claim on task {task_id!r} already ended ({outcome})", id=task_id)


def _end_claim(tx: Txn, fence: int, outcome: ClaimOutcome, error: str = "", *, key: str) -> None:
    """Ends the live claim `fence` of a task whose concurrency key is `key` ('' for none)."""
    tx.conn.execute(sql(tx.conn).END_CLAIM, (outcome.value, tx.now_ms, error, fence))
    if key:
        keys.freed(tx, key)


# Watch hears of one task's progress at most once in this many milliseconds.
PROGRESS_EVENT_SPACING_MS = 1000


def renew(
    tx: Txn, teammate: str, task_id: str, token: str, progress: Progress | None = None, usage: Usage | None = None
) -> tuple[int, bool]:
    """Extends the lease to now + lease duration, storing `progress` and adding
    `usage` if given; also says if protocol messages wait.

    Progress goes to Watch when the task's last progress event is at least
    `PROGRESS_EVENT_SPACING_MS` old; otherwise it is only stored, and the first
    renewal after that spacing (with progress or without) sends the latest. Each
    UPDATE's RETURNING says whether an event is due, so a plain renewal costs
    the statements it always did.
    """
    seq, _, lease_ms, _ = _live_claim(tx, teammate, task_id, token)
    if usage is not None:
        spending.charge_teammate(tx, teammate, usage)
    statements = sql(tx.conn)
    sums, sum_params = spending.task_sums(tx.conn, usage)
    # Never past the attempt's time limit: the holder learns of it from the lease end.
    lease_end = tx.now_ms + lease_ms
    if progress is None:
        due, lease_end = tx.conn.execute(
            statements.renew_lease(sums),
            (lease_end, lease_end, *sum_params, seq, tx.now_ms, PROGRESS_EVENT_SPACING_MS),
        ).fetchone()
        if due:
            tx.conn.execute(statements.RENEW, (tx.now_ms, seq))
    else:
        due, lease_end = tx.conn.execute(
            statements.renew_with_progress(sums),
            (
                lease_end,
                lease_end,
                progress.text,
                progress.fraction,
                tx.now_ms,
                *sum_params,
                tx.now_ms,
                PROGRESS_EVENT_SPACING_MS,
                tx.now_ms,
                PROGRESS_EVENT_SPACING_MS,
                tx.now_ms,
                seq,
            ),
        ).fetchone()
    if due:
        tx.conn.execute(statements.TASK_PROGRESS, (tx.now_ms, seq))
        tx.wakes.events = True
    tx.wakes.deadline(lease_end)
    return lease_end, protocol_pending(tx.conn, teammate)


def complete(tx: Txn, teammate: str, task_id: str, token: str, result: bytes, usage: Usage | None = None) -> TaskRecord:
    return complete_claim(tx, teammate, task_id, token, result, usage=usage)[0]


def complete_claim(
    tx: Txn,
    teammate: str,
    task_id: str,
    token: str,
    result: bytes,
    *,
    status_after: bool = True,
    usage: Usage | None = None,
    beside: tuple[str, tuple] | None = None,
) -> tuple[TaskRecord, bool, tuple | None]:
    """Completes the task, adding `usage` to the sums; says whether this call ended
    the claim (False: it was completed before, by this token, and the stored task is
    returned, its usage already counted). Without `status_after` the teammate's
    status is left to the caller, which decides its next claim in the same job (a
    handoff keeps it busy, unless the usage closed its budget gate).

    `beside` is a query (SQL, parameters) read in the same statement when the
    completion is one (PostgreSQL, no usage, a live claim): its row is returned
    third, else None. It sees the board as it was before the completion, and
    `live.fence` names the claim the completion ends."""
    if usage is None and fuses_statements(tx.conn):
        # One round trip in the usual case: the check that the token holds a live
        # claim is part of the statement that completes the task; when it finds
        # none, the check below says why (or finds the task completed by this token).
        completed = _complete_if_live(tx, teammate, (task_id, token, result), beside)
        if completed is not None:
            task, key, dependents, read_beside = completed
            tx.wakes.events = True
            if key:
                keys.freed(tx, key)
            return _completed(tx, teammate, task_id, task, dependents, status_after), True, read_beside
    ops.write_pending_record(tx)
    seq, fence, _, key = _live_claim(tx, teammate, task_id, token, completed_ok=True)
    if not fence:
        return task_by_seq(tx.conn, seq), False, None  # completed once: the stored result
    if usage is not None:
        spending.charge_teammate(tx, teammate, usage)
    statements = sql(tx.conn)
    sums, sum_params = spending.task_sums(tx.conn, usage)
    done_params = (result, tx.now_ms, *sum_params, seq)
    if fuses_statements(tx.conn):
        # One round trip: the claim's end, the task's row, its dependents' counts and its event.
        row = tx.conn.execute(
            statements.complete_claim(sums),
            (ClaimOutcome.COMPLETED.value, tx.now_ms, "", fence, *done_params, seq, tx.now_ms),
        ).fetchone()
        tx.wakes.events = True
        if key:
            keys.freed(tx, key)
        task, dependents = _record(row[:-1]), row[-1] or []
    else:
        _end_claim(tx, fence, ClaimOutcome.COMPLETED, key=key)
        (row,) = tx.conn.execute(statements.complete_task(sums), done_params).fetchall()
        task = _record(row)
        dependents = tx.conn.execute(statements.FREE_DEPENDENTS, (seq,)).fetchall()
        task_changed(tx, seq)
    return _completed(tx, teammate, task_id, task, dependents, status_after), True, None


def _complete_if_live(
    tx: Txn, teammate: str, request: tuple[str, str, bytes], beside: tuple[str, tuple] | None
) -> tuple[TaskRecord, str, list, tuple | None] | None:
    """A completion without usage, checked and done in one statement (PostgreSQL): the
    task, its concurrency key, its dependents' new counts and what `beside` read; None
    if the token holds no live claim of the task (then nothing but a Session op's
    record is written). A Session op's record not written yet is written by the same
    statement, and the op is found to have run before if it is taken."""
    task_id, token, result = request
    record = tx.op_record if tx.op_record is not None and tx.op_record.seq is None else None
    if tx.ahead is not None:  # the writer ran this statement already, for a run of jobs (`complete_many`)
        assert record is not None and tx.ahead.request == (*record.params[:3], *request), "not this job's"
        row = tx.ahead.row
        if beside is None or not tx.ahead.fresh:
            row = row[: 1 + _COMPLETED_WIDTH]  # what it read beside is not the board's now
        tx.ahead = None  # taken (the writer checks)
    else:
        statement = sql(tx.conn).complete_if_live(record is not None, beside[0] if beside is not None else None)
        now = tx.now_ms
        params = (
            *(record.params if record is not None else ()),
            *(task_id, token, teammate, now),  # live
            *(ClaimOutcome.COMPLETED.value, now, ""),  # ended
            *(result, now),  # done
            now,  # logged
            *(beside[1] if beside is not None else ()),
        )
        row = tx.conn.execute(statement, params).fetchone()
    if record is not None:
        ops.record_written(tx, row[0] if row is not None else None)  # raises if the op ran before
    if row is None or row[1] is None:
        return None
    mine = row[1 : 1 + _COMPLETED_WIDTH]
    read = row[1 + _COMPLETED_WIDTH :] if beside is not None and len(row) > 1 + _COMPLETED_WIDTH else None
    return _record(mine[:-2]), mine[-2], mine[-1] or [], read


# The statement's columns after the op record's seq: the task's (one of them the
# dependency list), its key, its freed dependents.
_COMPLETED_WIDTH = _TASK_WIDTH + 2


# ---------------------------------------------------------------- completions run together
#
# A Session completion's statement (`_complete_if_live`) costs the server more to
# start and finish than to run, and a group commit holds many of them. The writer
# runs them together: one statement completes a run of queued completions, and
# each job then finds its row there (`Txn.ahead`) and goes on as if it had run
# its own statement. Its shape is that statement's, taken apart by `r_n`, the
# request's place in the run.


def complete_many(conn: sqlite3.Connection, now_ms: int, requests: Sequence[tuple], beside: str) -> list[tuple]:
    """`_complete_if_live` for each of `requests` (teammate, op id, digest, task id, token,
    result) at once, each writing its op's record: one row per request, in order, shaped
    as that statement's with `beside` (a query over `teammates AS t` that may name the
    request's teammate `r.r_teammate`, the claim it ends `live.l_fence`, and `:now`).
    The requests' teammates are distinct. PostgreSQL only."""
    columns = list(zip(*requests, strict=True))
    rows = conn.execute(
        sql(conn).complete_many(beside),
        {
            "teammates": list(columns[0]),
            "op_ids": list(columns[1]),
            "digests": list(columns[2]),
            "task_ids": list(columns[3]),
            "tokens": list(columns[4]),
            "results": list(columns[5]),
            "now": now_ms,
            "completed": ClaimOutcome.COMPLETED.value,
        },
    ).fetchall()
    assert [row[0] for row in rows] == list(range(1, len(requests) + 1)), "one row per request, in order"
    return [(op_seq, *rest) for _, op_seq, _done_n, *rest in rows]


def _completed(
    tx: Txn, teammate: str, task_id: str, task: TaskRecord, dependents: Iterable[Sequence], status_after: bool
) -> TaskRecord:
    """What a completion tells: the dependents it made ready, the freed slot, the note."""
    ready = [(dependent, role) for dependent, role, unmet, state in dependents if unmet == 0 and state == PENDING]
    tx.wakes.ready_roles.update(role for _, role in ready)
    tx.made_ready.update(dependent for dependent, _ in ready)
    tx.wakes.tally["completions"] += 1
    _slot_freed(tx, teammate, status_after=status_after)
    tx.wakes.note("completed", task=task_id, teammate=teammate)
    return task


def fail(
    tx: Txn, teammate: str, task_id: str, token: str, error: str, retryable: bool, usage: Usage | None = None
) -> TaskRecord:
    seq, fence, _, key = _live_claim(tx, teammate, task_id, token)
    if usage is not None:
        spending.charge(tx, teammate, seq, usage)
    _end_claim(tx, fence, ClaimOutcome.FAILED, error, key=key)
    tx.wakes.tally["failures"] += 1
    _count_failure(tx, seq, error, final=not retryable)
    _slot_freed(tx, teammate)
    task = task_by_seq(tx.conn, seq)
    tx.wakes.note("failed", task=task_id, teammate=teammate, final=task.state is TaskState.FAILED, error=error[:200])
    return task


def release(tx: Txn, teammate: str, task_id: str, token: str) -> TaskRecord:
    seq, fence, _, key = _live_claim(tx, teammate, task_id, token)
    _end_claim(tx, fence, ClaimOutcome.RELEASED, key=key)
    tx.wakes.tally["releases"] += 1
    _back_to_pending(tx, seq)
    _slot_freed(tx, teammate)
    tx.wakes.note("released", task=task_id, teammate=teammate)
    return task_by_seq(tx.conn, seq)


def _slot_freed(tx: Txn, teammate: str, *, status_after: bool = True) -> None:
    """A claim of this teammate ended: its stream may claim again now."""
    tx.wakes.teammates.add(teammate)
    tx.wakes.may_claim.add(teammate)
    if status_after:
        refresh_status(tx, teammate)


def release_all(
    tx: Txn, teammate: str, outcome: ClaimOutcome, error: str = "", *, notice: ClaimEndReason | None = None
) -> None:
    """Returns every live claim of a teammate to PENDING without using an attempt;
    `error` is what each claim's history says of it. With `notice`, the teammate's
    open stream is told each claim ended, and why."""
    rows = tx.conn.execute(
        sql(tx.conn).RELEASE_ALL,
        (teammate,),
    ).fetchall()
    for seq, fence, task_id, token, key in rows:
        _end_claim(tx, fence, outcome, error, key=key)
        _back_to_pending(tx, seq)
        if notice is not None:
            tx.wakes.claim_ended(teammate, ClaimEnd(task_id, token, notice, error))


def revoke(tx: Txn, task_id: str, reason: str) -> TaskRecord:
    """The Lead takes the task's live claim away: the claim ends REVOKED (an ended
    attempt in the history, not a failure: it uses up none of `max_attempts`), the task
    is PENDING and ready again, and its holder's open stream is told. A lease that ran
    out is reclaimed first: that claim is no longer live to revoke."""
    reclaim_expired(tx)
    row = tx.conn.execute(
        sql(tx.conn).REVOKE,
        (task_id,),
    ).fetchone()
    if row is None:
        raise errors.TaskNotFound(f"no task {task_id!r}", id=task_id)
    seq, state, owner, fence, token, key = row
    if state != IN_PROGRESS or fence is None:
        raise errors.FailedPrecondition(f"task {task_id!r} has no live claim ({TaskState(state).name})", id=task_id)
    why = reason or "revoked by the lead"
    _end_claim(tx, fence, ClaimOutcome.REVOKED, why, key=key)
    _back_to_pending(tx, seq)
    _slot_freed(tx, owner)
    tx.wakes.tally["revocations"] += 1
    tx.wakes.claim_ended(owner, ClaimEnd(task_id, token, ClaimEndReason.REVOKED, why))
    tx.wakes.note("revoked", task=task_id, teammate=owner, reason=why[:200])
    return task_by_seq(tx.conn, seq)


def _back_to_pending(tx: Txn, seq: int, wait_ms: int = 0) -> None:
    """The task is PENDING again: ready now, or, with a wait, once its gate opens."""
    if wait_ms <= 0:
        (role,) = tx.conn.execute(
            sql(tx.conn).BACK_TO_PENDING_UPDATE_TASKS,
            (seq,),
        ).fetchone()
        tx.wakes.ready_roles[role] += 1
    else:
        gate = tx.now_ms + wait_ms
        tx.conn.execute(
            sql(tx.conn).BACK_TO_PENDING_UPDATE_TASKS_2,
            (gate, seq),
        )
        _gate_shut(tx, gate)
    task_changed(tx, seq)


def _count_failure(tx: Txn, seq: int, error: str, *, final: bool) -> None:
    """One claim ended by failure or expiry: retry after its backoff while attempts remain, else FAILED."""
    failures, max_attempts, backoff_ms, backoff_max_ms = tx.conn.execute(
        sql(tx.conn).COUNT_FAILURE,
        (error, seq),
    ).fetchone()
    if final or failures >= max_attempts:
        _finish(tx, seq, TaskState.FAILED)
        _cancel_seqs(tx, _dependents(tx, seq, "failed"))
    else:
        _back_to_pending(tx, seq, retry_wait_ms(failures, backoff_ms, backoff_max_ms, random.random()))


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


# ---------------------------------------------------------------- time gates


def _gate_shut(tx: Txn, gate_ms: int) -> None:
    """A task's gate was shut until `gate_ms`: the reaper's timer opens it then."""
    tx.wakes.deadline(gate_ms)
    tx.gates.lowered_to(gate_ms)


def open_due_gates(tx: Txn) -> None:
    """Opens every time gate whose instant has come; a task it leaves with nothing
    unmet is ready. Asks nothing while `now` is before the earliest gate the writer
    knows of."""
    if tx.gates.none_due(tx.now_ms):
        return
    if fuses_statements(tx.conn):
        # One round trip: the gates opened, and the earliest gate left (every row carries it).
        rows = tx.conn.execute(sql(tx.conn).OPEN_GATES_AND_EARLIEST, (tx.now_ms, tx.now_ms)).fetchall()
        opened = [row[:4] for row in rows if row[0] is not None]
        earliest = rows[0][4]
    else:
        opened = tx.conn.execute(sql(tx.conn).OPEN_GATES, (tx.now_ms,)).fetchall()
        earliest = _earliest_gate(tx.conn)  # what follows writes events only
    for seq, role, unmet, state in opened:
        if state != PENDING:
            continue  # canceled while it waited
        if unmet == 0:
            tx.wakes.ready_roles[role] += 1
            tx.made_ready.add(seq)
        task_changed(tx, seq)
    tx.gates.learned(earliest)


def any_gate_due(conn: sqlite3.Connection, now_ms: int) -> bool:
    """Whether a shut time gate's instant has come (the writer opens it at the next claim or reap)."""
    return conn.execute(sql(conn).ANY_GATE_DUE, (now_ms,)).fetchone() is not None


def _earliest_gate(conn: sqlite3.Connection) -> int | None:
    return conn.execute(sql(conn).EARLIEST_GATE).fetchone()[0]


def _finish(tx: Txn, seq: int, state: TaskState) -> None:
    tx.conn.execute(
        sql(tx.conn).FINISH,
        (int(state), tx.now_ms, seq),
    )
    task_changed(tx, seq)


# ---------------------------------------------------------------- cancel and reclaim


def cancel(tx: Txn, task_ids: Sequence[str]) -> list[CanceledTask]:
    """Cancels the named tasks and, transitively, their unfinished dependents; returns
    every task this changed, the named ones first."""
    on_board = _rows_by_id(tx.conn, list(task_ids))
    for task_id in task_ids:
        if task_id not in on_board:
            raise errors.TaskNotFound(f"no task {task_id!r}", id=task_id)
    seqs = _cancel_seqs(tx, [(on_board[task_id].seq, "canceled by the lead") for task_id in task_ids])
    rows = tx.conn.execute(
        sql(tx.conn).CANCEL,
        (json.dumps(seqs),),
    )
    return [CanceledTask(*row) for row in rows]


def _dependents(tx: Txn, seq: int, how: str) -> list[tuple[int, str]]:
    """The dependents of task `seq`, each with the reason it is canceled: `seq` ended `how`."""
    (task_id,) = tx.conn.execute(sql(tx.conn).DEPENDENTS_SELECT, (seq,)).fetchone()
    why = f"dependency {task_id!r} {how}"
    return [(dep, why) for (dep,) in tx.conn.execute(sql(tx.conn).DEPENDENTS_SELECT_2, (seq,))]


def _cancel_seqs(tx: Txn, roots: list[tuple[int, str]]) -> list[int]:
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
        sql(conn).CANCEL_SEQS_WITH,
        (json.dumps(list(reasons)), PENDING, IN_PROGRESS, PENDING, IN_PROGRESS),
    ).fetchall()
    if not doomed:
        return []
    doomed_seqs = {seq for seq, *_ in doomed}
    named = [seq for seq in reasons if seq in doomed_seqs]
    others = [seq for seq, *_ in doomed if seq not in reasons]
    edges = conn.execute(
        sql(conn).CANCEL_SEQS_SELECT,
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
        sql(conn).CANCEL_SEQS_UPDATE_CLAIMS,
        [(ClaimOutcome.CANCELED.value, tx.now_ms, reasons[seq], fence) for seq, fence, _ in held],
    )
    conn.executemany(
        sql(conn).CANCEL_SEQS_UPDATE_TASKS,
        [(int(TaskState.CANCELED), tx.now_ms, reasons[seq], seq) for seq, *_ in doomed],
    )
    for _, fence, _, _, _, key in doomed:
        if fence is not None and key:
            keys.freed(tx, key)
    ordered = named + others
    _task_events(tx, ordered)
    tx.wakes.tally["cancellations"] += len(doomed)
    for owner in sorted({owner for _, _, owner in held}):
        _slot_freed(tx, owner)
    return ordered


# ---------------------------------------------------------------- retry

_CANCELED_BY_THE_LEAD = "canceled by the lead"


def retry(tx: Txn, task_ids: Sequence[str], reset_attempts: bool) -> list[int]:
    """Sends the named FAILED or CANCELED tasks back to PENDING, with their transitive
    dependents that were canceled because of a dependency (not by the lead) once
    every other dependency of theirs is COMPLETED or unfinished; returns the seqs
    changed, the named ones first. Refuses, writing nothing, a name that is not on
    the board or not FAILED or CANCELED, and a named task with a FAILED or CANCELED
    dependency that this call does not bring back (it would wait for it forever)."""
    on_board = _rows_by_id(tx.conn, list(task_ids))
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
        sql(tx.conn).RETRY,
        (json.dumps(roots), int(TaskState.CANCELED), _CANCELED_BY_THE_LEAD),
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
            if seq not in revived
            and all(state in (PENDING, IN_PROGRESS, COMPLETED) or dep in revived for dep, state in needs)
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
    _task_events(tx, ordered)
    tx.wakes.tally["retries"] += len(ordered)
    return ordered


def _revive(tx: Txn, seq: int, *, unmet: int, reset_attempts: bool) -> None:
    """One FAILED or CANCELED task PENDING again, behind its unmet dependencies and
    its not_before (if still ahead); its result and error are cleared."""
    (not_before, role) = tx.conn.execute(sql(tx.conn).REVIVE_SELECT, (seq,)).fetchone()
    shut = not_before is not None and not_before > tx.now_ms
    tx.conn.execute(
        sql(tx.conn).REVIVE_UPDATE_TASKS,
        (unmet + shut, int(shut), shut, not_before, tx.now_ms, reset_attempts, seq),
    )
    if shut:
        _gate_shut(tx, not_before)
    elif unmet == 0:
        tx.wakes.ready_roles[role] += 1


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
        sql(tx.conn).RECLAIM_EXPIRED_SELECT,
        (tx.now_ms, tx.now_ms),
    ).fetchall()
    earliest_left = rows[0][-1]
    expired: dict[str, int] = {}
    for seq, fence, owner, attempt, lease_end, task_id, token, key, timed_out, timeout_ms, _ in rows:
        if seq is None:
            continue  # none ended
        if timed_out:
            why = f"attempt timed out after {_seconds(timeout_ms)}"
            _end_claim(tx, fence, ClaimOutcome.TIMED_OUT, why, key=key)
            tx.wakes.tally["attempt_timeouts"] += 1
            tx.wakes.note("attempt_timed_out", task=task_id, teammate=owner, attempt=attempt)
            tx.wakes.claim_ended(owner, ClaimEnd(task_id, token, ClaimEndReason.ATTEMPT_TIMEOUT, why))
            _count_failure(tx, seq, why, final=False)
            _slot_freed(tx, owner)
            continue
        why = f"lease expired on attempt {attempt}"
        _end_claim(tx, fence, ClaimOutcome.EXPIRED, why, key=key)
        tx.wakes.tally["lease_expirations"] += 1
        tx.wakes.note("lease_expired", task=task_id, teammate=owner, attempt=attempt)
        tx.wakes.claim_ended(owner, ClaimEnd(task_id, token, ClaimEndReason.LEASE_EXPIRED, why))
        _count_failure(tx, seq, why, final=False)
        # Not woken like a freed slot: a frozen holder whose stream is still
        # open would only take the same task straight back (see delivery).
        tx.conn.execute(sql(tx.conn).RECLAIM_EXPIRED_UPDATE_TEAMMATES, (lease_end, owner))
        refresh_status(tx, owner)
        expired[owner] = max(expired.get(owner, 0), lease_end)
    # Each lease that ended left state 2, and reclaiming grants none.
    tx.leases.learned(earliest_left)
    return expired


def _seconds(ms: int) -> str:
    return f"{ms / 1000:g} s"


def note_clock(conn: sqlite3.Connection, now_ms: int) -> None:
    """Records how far the daemon clock got (the writer's epilogue calls it); never goes back."""
    conn.execute(sql(conn).NOTE_CLOCK, (now_ms,))


def clock_reached(conn: sqlite3.Connection) -> int:
    """The last instant a daemon on this board recorded (0 on a new board)."""
    (last_ms,) = conn.execute("SELECT value FROM meta WHERE key = 'clock_ms'").fetchone()
    return int(last_ms)


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


def _task_events(tx: Txn, seqs: list[int]) -> None:
    """The `task_changed` event of each task in `seqs`, in that order."""
    tx.conn.execute(sql(tx.conn).TASKS_CHANGED, (tx.now_ms, json.dumps(seqs)))
    tx.wakes.events = True


def task_changed(tx: Txn, seq: int) -> None:
    """The `task_changed` event of task `seq` as it stands now."""
    tx.conn.execute(sql(tx.conn).TASK_CHANGED, (tx.now_ms, seq))
    tx.wakes.events = True
