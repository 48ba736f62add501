"""Tasks: create, claim, renew, complete, fail, release, cancel, reclaim."""

from __future__ import annotations

import dataclasses
import json
import secrets
import sqlite3
from collections.abc import Iterable, Sequence

from .. import errors
from ..model import (
    CanceledTask,
    ClaimGrant,
    ClaimOutcome,
    CreatedBatch,
    CreatedTask,
    TaskPage,
    TaskRecord,
    TaskSpec,
    TaskState,
    Txn,
)
from ..validate import PreparedBatch
from .gates import protocol_pending
from .status import mark_busy, refresh_status

_COLUMNS = (
    "seq, id, title, description, payload, priority, required_role, max_attempts, lease_ms,"
    " state, owner, attempt, result, error, create_ms, lease_expire_ms, finish_ms"
)
PENDING, IN_PROGRESS = int(TaskState.PENDING), int(TaskState.IN_PROGRESS)


# ---------------------------------------------------------------- reads


def _depends_on(conn: sqlite3.Connection, seq: int) -> tuple[str, ...]:
    rows = conn.execute(
        "SELECT t.id FROM deps d JOIN tasks t ON t.seq = d.dep_seq WHERE d.task_seq = ? ORDER BY d.position", (seq,)
    )
    return tuple(row[0] for row in rows)


def _record(conn: sqlite3.Connection, row: tuple) -> TaskRecord:
    (
        seq,
        task_id,
        title,
        description,
        payload,
        priority,
        required_role,
        max_attempts,
        lease_ms,
        state,
        owner,
        attempt,
        result,
        error,
        create_ms,
        lease_expire_ms,
        finish_ms,
    ) = row
    return TaskRecord(
        seq=seq,
        id=task_id,
        title=title,
        description=description,
        payload=payload,
        depends_on=_depends_on(conn, seq),
        priority=priority,
        required_role=required_role,
        max_attempts=max_attempts,
        lease_ms=lease_ms,
        state=TaskState(state),
        owner=owner,
        attempt=attempt,
        result=result or b"",
        error=error,
        create_ms=create_ms,
        lease_expire_ms=lease_expire_ms,
        finish_ms=finish_ms,
    )


def task_by_seq(conn: sqlite3.Connection, seq: int) -> TaskRecord:
    return _record(conn, conn.execute(f"SELECT {_COLUMNS} FROM tasks WHERE seq = ?", (seq,)).fetchone())


def get_task(conn: sqlite3.Connection, task_id: str) -> TaskRecord:
    row = conn.execute(f"SELECT {_COLUMNS} FROM tasks WHERE id = ?", (task_id,)).fetchone()
    if row is None:
        raise errors.TaskNotFound(f"no task {task_id!r}", id=task_id)
    return _record(conn, row)


# An upper bound on a task's size on the wire, read without loading its
# payload or result: SQLite answers length() of a blob from the record header.
# Text columns are measured in bytes (CAST AS BLOB); 256 bytes cover the tags,
# length prefixes, numbers and timestamps, and 4 bytes each dependency's.
_WIRE_BYTES = (
    "256 + length(CAST(tasks.id AS BLOB)) + length(CAST(tasks.title AS BLOB))"
    " + length(CAST(tasks.description AS BLOB)) + length(tasks.payload) + coalesce(length(tasks.result), 0)"
    " + length(CAST(tasks.error AS BLOB)) + length(CAST(tasks.owner AS BLOB))"
    " + length(CAST(tasks.required_role AS BLOB))"
    " + (SELECT coalesce(sum(length(CAST(dep.id AS BLOB)) + 4), 0)"
    " FROM deps d JOIN tasks dep ON dep.seq = d.dep_seq WHERE d.task_seq = tasks.seq)"
)


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
    where: list[str] = ["seq > ?"]
    params: list[object] = [after_seq]
    if states:
        where.append(f"state IN ({','.join('?' * len(states))})")
        params.extend(int(s) for s in states)
    if owner:
        where.append("owner = ?")
        params.append(owner)
    sized = conn.execute(
        f"SELECT seq, {_WIRE_BYTES} FROM tasks WHERE {' AND '.join(where)} ORDER BY seq LIMIT ?",
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
        f"SELECT {_COLUMNS} FROM tasks WHERE {' AND '.join(where)} AND seq <= ? ORDER BY seq LIMIT ?",
        (*params, last, count),
    ).fetchall()
    return TaskPage([_record(conn, row) for row in rows], more=len(sized) > count)


def wire_bytes_by_id(conn: sqlite3.Connection, task_ids: Iterable[str]) -> dict[str, int]:
    """Each task's size on the wire (the bound `list_tasks` uses), without loading any payload."""
    rows = conn.execute(
        f"SELECT tasks.id, {_WIRE_BYTES} FROM json_each(?) AS wanted JOIN tasks ON tasks.id = wanted.value",
        (json.dumps(sorted(set(task_ids))),),
    )
    return dict(rows)


def count_by_state(conn: sqlite3.Connection) -> dict[TaskState, int]:
    rows = conn.execute("SELECT state, count(*) FROM tasks GROUP BY state")
    return {TaskState(state): count for state, count in rows}


def next_deadline(conn: sqlite3.Connection) -> int | None:
    """The earliest instant at which a lease ends or a shutdown grace runs out."""
    lease = conn.execute("SELECT min(lease_expire_ms) FROM tasks WHERE state = 2").fetchone()[0]
    grace = conn.execute("SELECT min(deadline_ms) FROM shutdowns WHERE answered = 0").fetchone()[0]
    candidates = [t for t in (lease, grace) if t is not None]
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
        row = conn.execute(
            "SELECT digest, task_ids FROM create_requests WHERE request_id = ?", (request_id,)
        ).fetchone()
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
    outside = _rows_by_id(conn, list({dep for _, spec in new_specs for dep in spec.depends_on if dep not in new_ids}))
    unmet = [_unmet_deps(index, spec, new_ids, outside) for index, spec in new_specs]
    seq_of: dict[str, int] = {}
    if new_specs:
        conn.executemany(
            "INSERT INTO tasks (id, title, description, payload, priority, required_role, max_attempts,"
            " lease_ms, spec_digest, state, unmet_deps, create_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
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
                )
                for (index, spec), count in zip(new_specs, unmet, strict=True)
            ],
        )
        # One writer, one transaction: AUTOINCREMENT gave the rows consecutive seqs.
        (last,) = conn.execute("SELECT last_insert_rowid()").fetchone()
        first = last - len(new_specs) + 1
        seq_of.update((spec.id, first + offset) for offset, (_, spec) in enumerate(new_specs))
        seq_of.update((task_id, row.seq) for task_id, row in outside.items())
        conn.executemany(
            "INSERT INTO deps (task_seq, dep_seq, position) VALUES (?, ?, ?)",
            [
                (seq_of[spec.id], seq_of[dep], position)
                for _, spec in new_specs
                for position, dep in enumerate(spec.depends_on)
            ],
        )
        _task_events(tx, list(range(first, last + 1)))
        for (_, spec), count in zip(new_specs, unmet, strict=True):
            if count == 0:
                tx.wakes.ready_roles[spec.required_role] += 1
    if request_id:
        conn.execute(
            "INSERT INTO create_requests (request_id, digest, task_ids) VALUES (?, ?, ?)",
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


@dataclasses.dataclass(frozen=True, slots=True)
class _BoardRow:
    seq: int
    spec_digest: bytes
    state: TaskState
    create_ms: int
    finish_ms: int | None
    max_attempts: int
    lease_ms: int


def _rows_by_id(conn: sqlite3.Connection, ids: list[str]) -> dict[str, _BoardRow]:
    """The tasks among `ids` that are on the board, in one statement."""
    if not ids:
        return {}
    rows = conn.execute(
        "SELECT t.id, t.seq, t.spec_digest, t.state, t.create_ms, t.finish_ms, t.max_attempts, t.lease_ms"
        " FROM json_each(?) AS wanted JOIN tasks AS t ON t.id = wanted.value",
        (json.dumps(ids),),
    )
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


def claim_next(tx: Txn, teammate: str, roles: Iterable[str], *, reclaimed: bool = False) -> ClaimGrant | None:
    """Claims the first ready task this teammate may take, or returns None.

    Expired leases are reclaimed first, unless the caller just did (`reclaimed`).
    """
    if not reclaimed:
        reclaim_expired(tx)
    row = _first_ready(tx.conn, roles)
    if row is None:
        return None
    seq, failures, lease_ms = row
    attempt, lease_end = failures + 1, tx.now_ms + lease_ms
    token = secrets.token_urlsafe(24)  # 192 bits; UNIQUE in claims makes reuse impossible
    fence = tx.conn.execute(
        "INSERT INTO claims (token, task_seq, teammate, attempt, claim_ms) VALUES (?, ?, ?, ?, ?)",
        (token, seq, teammate, attempt, tx.now_ms),
    ).lastrowid
    assert fence is not None  # an INSERT into a rowid table always sets it
    claimed = tx.conn.execute(
        "UPDATE tasks SET state = 2, owner = ?, attempt = ?, live_fence = ?, lease_expire_ms = ?"
        f" WHERE seq = ? AND state = 1 AND unmet_deps = 0 RETURNING {_COLUMNS}",
        (teammate, attempt, fence, lease_end, seq),
    ).fetchall()
    if len(claimed) != 1:
        raise RuntimeError(f"claim of task seq {seq} changed {len(claimed)} rows")
    tx.wakes.deadline(lease_end)
    tx.wakes.tally["claims"] += 1
    task = _record(tx.conn, claimed[0])
    task_changed(tx, seq)
    mark_busy(tx, teammate)
    tx.wakes.note("claimed", task=task.id, teammate=teammate, attempt=attempt, fence=fence)
    return ClaimGrant(task=task, token=token, lease_expire_ms=lease_end, attempt=attempt, fence=fence)


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimRef:
    """A live claim, without the task: enough to decide whether to re-send it."""

    task_seq: int
    token: str
    lease_expire_ms: int
    attempt: int
    fence: int


def _first_ready(conn: sqlite3.Connection, roles: Iterable[str]) -> tuple[int, int, int] | None:
    """(seq, failures, lease ms) of the first ready task a teammate with `roles` may take."""
    allowed = ["", *roles]
    return conn.execute(
        "SELECT seq, failures, lease_ms FROM tasks WHERE state = 1 AND unmet_deps = 0"
        f" AND required_role IN ({','.join('?' * len(allowed))}) ORDER BY priority DESC, seq LIMIT 1",
        allowed,
    ).fetchone()


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
    marks = ",".join("?" * len(roles))
    role_test = f"required_role IN ('', {marks})" if roles else "required_role = ''"
    rows = conn.execute(
        f"SELECT id FROM tasks WHERE (state = 1 OR (state = 2 AND owner != ?)) AND {role_test} ORDER BY seq LIMIT ?",
        (teammate, *roles, limit),
    )
    return [task_id for (task_id,) in rows]


def any_lease_ended(conn: sqlite3.Connection, now_ms: int) -> bool:
    """Whether some claim's lease is over and awaits reclaiming."""
    return (
        conn.execute(
            "SELECT 1 FROM tasks INDEXED BY tasks_lease WHERE state = 2 AND lease_expire_ms <= ? LIMIT 1", (now_ms,)
        ).fetchone()
        is not None
    )


def held_claim_refs(conn: sqlite3.Connection, teammate: str, now_ms: int) -> list[ClaimRef]:
    """The teammate's claims whose lease has not ended (a dead one awaits the reaper)."""
    rows = conn.execute(
        "SELECT t.seq, c.token, t.lease_expire_ms, c.attempt, c.fence FROM tasks t"
        " JOIN claims c ON c.fence = t.live_fence WHERE t.owner = ? AND t.state = 2 AND t.lease_expire_ms > ?"
        " ORDER BY c.fence",
        (teammate, now_ms),
    ).fetchall()
    return [ClaimRef(*row) for row in rows]


def grant(conn: sqlite3.Connection, ref: ClaimRef) -> ClaimGrant:
    return ClaimGrant(task_by_seq(conn, ref.task_seq), ref.token, ref.lease_expire_ms, ref.attempt, ref.fence)


def _live_claim(
    tx: Txn, teammate: str, task_id: str, token: str, *, completed_ok: bool = False
) -> tuple[int, int, int]:
    """Returns (task seq, fence, lease ms) of the caller's live claim, or raises why not.

    With `completed_ok`, the token that completed the task returns fence 0
    instead of raising (a repeated CompleteTask is answered from the store).
    """
    # One statement for the task and the token's claim (if any): the writer
    # gives up the GIL on every statement and may wait to get it back.
    row = tx.conn.execute(
        "SELECT t.seq, t.live_fence, t.lease_expire_ms, t.lease_ms, c.fence, c.task_seq, c.teammate, c.outcome"
        " FROM tasks AS t LEFT JOIN claims AS c ON c.token = ? WHERE t.id = ?",
        (token, task_id),
    ).fetchone()
    if row is None:
        raise errors.TaskNotFound(f"no task {task_id!r}", id=task_id)
    seq, live_fence, lease_end, lease_ms, fence, claim_task, holder, outcome = row
    if fence is None or claim_task != seq or holder != teammate:
        raise errors.ClaimTokenMismatch(f"token is not your claim on task {task_id!r}", id=task_id)
    if outcome is None and fence == live_fence:
        if tx.now_ms >= lease_end:
            raise errors.LeaseExpired(f"lease on task {task_id!r} ended", id=task_id)
        return seq, fence, lease_ms
    if outcome == ClaimOutcome.COMPLETED and completed_ok:
        return seq, 0, lease_ms
    if outcome == ClaimOutcome.EXPIRED:
        raise errors.LeaseExpired(f"lease on task {task_id!r} ended", id=task_id)
    if outcome == ClaimOutcome.CANCELED:
        raise errors.TaskCanceled(f"task {task_id!r} was canceled", id=task_id)
    raise errors.ClaimTokenMismatch(f"claim on task {task_id!r} already ended ({outcome})", id=task_id)


def _end_claim(tx: Txn, fence: int, outcome: ClaimOutcome) -> None:
    tx.conn.execute("UPDATE claims SET outcome = ?, end_ms = ? WHERE fence = ?", (outcome.value, tx.now_ms, fence))


def renew(tx: Txn, teammate: str, task_id: str, token: str) -> tuple[int, bool]:
    """Extends the lease to now + lease duration; also says if protocol messages wait."""
    seq, _, lease_ms = _live_claim(tx, teammate, task_id, token)
    lease_end = tx.now_ms + lease_ms
    tx.conn.execute("UPDATE tasks SET lease_expire_ms = ? WHERE seq = ?", (lease_end, seq))
    tx.wakes.deadline(lease_end)
    return lease_end, protocol_pending(tx.conn, teammate)


def complete(tx: Txn, teammate: str, task_id: str, token: str, result: bytes) -> TaskRecord:
    seq, fence, _ = _live_claim(tx, teammate, task_id, token, completed_ok=True)
    if not fence:
        return task_by_seq(tx.conn, seq)  # completed once: the stored result
    _end_claim(tx, fence, ClaimOutcome.COMPLETED)
    (row,) = tx.conn.execute(
        "UPDATE tasks SET state = 3, result = ?, finish_ms = ?, live_fence = NULL, lease_expire_ms = NULL"
        f" WHERE seq = ? RETURNING {_COLUMNS}",
        (result, tx.now_ms, seq),
    ).fetchall()
    task = _record(tx.conn, row)
    dependents = tx.conn.execute(
        "UPDATE tasks SET unmet_deps = unmet_deps - 1 WHERE seq IN (SELECT task_seq FROM deps WHERE dep_seq = ?)"
        " RETURNING required_role, unmet_deps, state",
        (seq,),
    ).fetchall()
    tx.wakes.ready_roles.update(role for role, unmet, state in dependents if unmet == 0 and state == PENDING)
    tx.wakes.tally["completions"] += 1
    task_changed(tx, seq)
    _slot_freed(tx, teammate)
    tx.wakes.note("completed", task=task_id, teammate=teammate)
    return task


def fail(tx: Txn, teammate: str, task_id: str, token: str, error: str, retryable: bool) -> TaskRecord:
    seq, fence, _ = _live_claim(tx, teammate, task_id, token)
    _end_claim(tx, fence, ClaimOutcome.FAILED)
    tx.wakes.tally["failures"] += 1
    _count_failure(tx, seq, error, final=not retryable)
    _slot_freed(tx, teammate)
    task = task_by_seq(tx.conn, seq)
    tx.wakes.note("failed", task=task_id, teammate=teammate, final=task.state is TaskState.FAILED, error=error[:200])
    return task


def release(tx: Txn, teammate: str, task_id: str, token: str) -> TaskRecord:
    seq, fence, _ = _live_claim(tx, teammate, task_id, token)
    _end_claim(tx, fence, ClaimOutcome.RELEASED)
    tx.wakes.tally["releases"] += 1
    _back_to_pending(tx, seq)
    _slot_freed(tx, teammate)
    tx.wakes.note("released", task=task_id, teammate=teammate)
    return task_by_seq(tx.conn, seq)


def _slot_freed(tx: Txn, teammate: str) -> None:
    """A claim of this teammate ended: its stream may claim again now."""
    tx.wakes.teammates.add(teammate)
    tx.wakes.may_claim.add(teammate)
    refresh_status(tx, teammate)


def release_all(tx: Txn, teammate: str, outcome: ClaimOutcome) -> None:
    """Returns every live claim of a teammate to PENDING without using an attempt."""
    rows = tx.conn.execute("SELECT seq, live_fence FROM tasks WHERE owner = ? AND state = 2", (teammate,)).fetchall()
    for seq, fence in rows:
        _end_claim(tx, fence, outcome)
        _back_to_pending(tx, seq)


def _back_to_pending(tx: Txn, seq: int) -> None:
    (role,) = tx.conn.execute(
        "UPDATE tasks SET state = 1, owner = '', live_fence = NULL, lease_expire_ms = NULL WHERE seq = ?"
        " RETURNING required_role",
        (seq,),
    ).fetchone()
    tx.wakes.ready_roles[role] += 1
    task_changed(tx, seq)


def _count_failure(tx: Txn, seq: int, error: str, *, final: bool) -> None:
    """One claim ended by failure or expiry: retry while attempts remain, else FAILED."""
    failures, max_attempts = tx.conn.execute(
        "UPDATE tasks SET failures = failures + 1, error = ? WHERE seq = ? RETURNING failures, max_attempts",
        (error, seq),
    ).fetchone()
    if final or failures >= max_attempts:
        _finish(tx, seq, TaskState.FAILED)
        _cancel_seqs(tx, _dependents(tx, seq, "failed"))
    else:
        _back_to_pending(tx, seq)


def _finish(tx: Txn, seq: int, state: TaskState) -> None:
    tx.conn.execute(
        "UPDATE tasks SET state = ?, finish_ms = ?, live_fence = NULL, lease_expire_ms = NULL WHERE seq = ?",
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
        "SELECT t.id, t.seq, t.error, t.finish_ms FROM json_each(?) AS w JOIN tasks AS t ON t.seq = w.value"
        " ORDER BY w.key",
        (json.dumps(seqs),),
    )
    return [CanceledTask(*row) for row in rows]


def _dependents(tx: Txn, seq: int, how: str) -> list[tuple[int, str]]:
    """The dependents of task `seq`, each with the reason it is canceled: `seq` ended `how`."""
    (task_id,) = tx.conn.execute("SELECT id FROM tasks WHERE seq = ?", (seq,)).fetchone()
    why = f"dependency {task_id!r} {how}"
    return [(dep, why) for (dep,) in tx.conn.execute("SELECT task_seq FROM deps WHERE dep_seq = ?", (seq,))]


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
        "WITH RECURSIVE doomed(seq) AS ("
        " SELECT t.seq FROM json_each(?) AS r JOIN tasks AS t ON t.seq = r.value WHERE t.state IN (?, ?)"
        " UNION SELECT d.task_seq FROM doomed JOIN deps AS d ON d.dep_seq = doomed.seq"
        " JOIN tasks AS t ON t.seq = d.task_seq WHERE t.state IN (?, ?))"
        " SELECT t.seq, t.live_fence, t.owner FROM doomed JOIN tasks AS t ON t.seq = doomed.seq ORDER BY t.seq",
        (json.dumps(list(reasons)), PENDING, IN_PROGRESS, PENDING, IN_PROGRESS),
    ).fetchall()
    if not doomed:
        return []
    doomed_seqs = {seq for seq, _, _ in doomed}
    named = [seq for seq in reasons if seq in doomed_seqs]
    others = [seq for seq, _, _ in doomed if seq not in reasons]
    edges = conn.execute(
        "SELECT d.task_seq, d.dep_seq, p.id FROM json_each(?) AS w JOIN deps AS d ON d.task_seq = w.value"
        " JOIN tasks AS p ON p.seq = d.dep_seq ORDER BY d.task_seq, d.position",
        (json.dumps(others),),
    )
    for seq, dep_seq, dep_id in edges:
        if seq not in reasons and dep_seq in doomed_seqs:
            reasons[seq] = f"dependency {dep_id!r} was canceled"
    held = [(fence, owner) for _, fence, owner in doomed if fence is not None]
    conn.executemany(
        "UPDATE claims SET outcome = ?, end_ms = ? WHERE fence = ?",
        [(ClaimOutcome.CANCELED.value, tx.now_ms, fence) for fence, _ in held],
    )
    conn.executemany(
        "UPDATE tasks SET state = ?, finish_ms = ?, live_fence = NULL, lease_expire_ms = NULL, error = ? WHERE seq = ?",
        [(int(TaskState.CANCELED), tx.now_ms, reasons[seq], seq) for seq, _, _ in doomed],
    )
    ordered = named + others
    _task_events(tx, ordered)
    tx.wakes.tally["cancellations"] += len(doomed)
    for owner in sorted({owner for _, owner in held}):
        _slot_freed(tx, owner)
    return ordered


def reclaim_expired(tx: Txn) -> dict[str, int]:
    """Ends every claim whose lease is over (half-open: at the end instant it is dead).

    Returns each former holder with the latest lease end reclaimed from it.
    """
    rows = tx.conn.execute(
        "SELECT seq, live_fence, owner, attempt, lease_expire_ms, id FROM tasks"
        " WHERE state = 2 AND lease_expire_ms <= ?",
        (tx.now_ms,),
    ).fetchall()
    for seq, fence, owner, attempt, lease_end, task_id in rows:
        _end_claim(tx, fence, ClaimOutcome.EXPIRED)
        tx.wakes.tally["lease_expirations"] += 1
        tx.wakes.note("lease_expired", task=task_id, teammate=owner, attempt=attempt)
        _count_failure(tx, seq, f"lease expired on attempt {attempt}", final=False)
        # Not woken like a freed slot: a frozen holder whose stream is still
        # open would only take the same task straight back (see delivery).
        tx.conn.execute(
            "UPDATE teammates SET last_expiry_ms = max(last_expiry_ms, ?) WHERE name = ?", (lease_end, owner)
        )
        refresh_status(tx, owner)
    return {owner: max(row[4] for row in rows if row[2] == owner) for _, _, owner, _, _, _ in rows}


def note_clock(conn: sqlite3.Connection, now_ms: int) -> None:
    """Records how far the daemon clock got (the writer's epilogue calls it); never goes back."""
    conn.execute("UPDATE meta SET value = max(value, ?) WHERE key = 'clock_ms'", (now_ms,))


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
    count = tx.conn.execute("UPDATE tasks SET lease_expire_ms = ? + lease_ms WHERE state = 2", (tx.now_ms,)).rowcount
    tx.wakes.deadline(tx.now_ms)
    return count


# The data of a `task_changed` event, built by SQL from the task's row: no
# Python round trip (a record, a dict, json.dumps) per event.
_TASK_EVENT = (
    "INSERT INTO events (time_ms, kind, data) SELECT ?, 'task_changed', json_object('id', t.id, 'state', t.state,"
    " 'owner', t.owner, 'attempt', t.attempt, 'error', t.error, 'lease_expire_ms', t.lease_expire_ms,"
    " 'finish_ms', t.finish_ms) FROM "
)


def _task_events(tx: Txn, seqs: list[int]) -> None:
    """The `task_changed` event of each task in `seqs`, in that order."""
    tx.conn.execute(
        _TASK_EVENT + "json_each(?) AS w JOIN tasks AS t ON t.seq = w.value ORDER BY w.key",
        (tx.now_ms, json.dumps(seqs)),
    )
    tx.wakes.events = True


def task_changed(tx: Txn, seq: int) -> None:
    """The `task_changed` event of task `seq` as it stands now."""
    tx.conn.execute(_TASK_EVENT + "tasks AS t WHERE t.seq = ?", (tx.now_ms, seq))
    tx.wakes.events = True
