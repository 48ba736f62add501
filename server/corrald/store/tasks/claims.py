"""A teammate's claims: what a delivery check reads of it (its delivery view: the
columns its gates need and the claims it holds), claiming the next ready task for it,
and renewing a claim."""

from __future__ import annotations

import functools
import itertools
import json
import secrets
import sqlite3
import types
from collections.abc import Iterable

from ... import errors
from ...config import DEPENDENCY_RESULTS_MAX_BYTES
from ...model import (
    AttemptRecord,
    ClaimGrant,
    ClaimRef,
    DeliveryView,
    Progress,
    QuestionAnswer,
    ReviewItem,
    TaskRecord,
    TaskState,
    TeammateView,
    Usage,
)
from ...txn import Txn
from .. import keys, leases
from .. import usage as spending
from ..dialect import sql, steps
from ..gates import protocol_pending
from ..status import mark_busy
from . import reviews
from .artifact_refs import current_of_dependencies, with_artifacts
from .ends import live_claim
from .reclaim import reclaim_expired
from .rows import IN_PROGRESS, IN_REVIEW, NEEDS_INPUT, PENDING, PROPOSED, answers_of, previous_attempt, task_by_seq
from .timegates import open_due_gates


def claim_next(
    tx: Txn, teammate: str, roles: Iterable[str], *, reclaimed: bool = False, busy: bool = False
) -> ClaimGrant | None:
    """Claims the first ready task this teammate may take, or returns None.

    Expired leases are reclaimed first, unless the caller just did (`reclaimed`).
    With `busy`, the teammate's status is stored busy already (a completion's
    handoff: it held the claim it just completed) and is not written again.
    """
    # Each look below is skipped where it has nothing to do: a lease or a time gate not
    # due yet by what the writer knows (`DeadlineWatch`), a review for a teammate holding
    # no role (a review needs one).
    if not reclaimed and not tx.leases.none_due(tx.now_ms):
        reclaim_expired(tx)
    if not tx.gates.none_due(tx.now_ms):
        open_due_gates(tx)
    token = secrets.token_urlsafe(24)  # 192 bits; UNIQUE in claims makes reuse impossible
    roles = tuple(roles)
    # A review before new work: it unblocks a result.
    review = reviews.claim_first(tx, teammate, roles, token) if roles else None
    if review is not None:
        task, fence, item = review
        return _granted(tx, teammate, task, token, fence, busy, review=item)
    taken = steps(tx.conn).claim_first_ready(tx, roles, token, teammate)
    if taken is None:
        return None
    task, fence, last_attempt = taken.task, taken.fence, taken.attempt_before
    if not last_attempt:  # a first claim asks nothing more
        return _granted(tx, teammate, task, token, fence, busy)
    # A task claimed before (tasks.attempt is 0 until its first claim) carries its
    # latest ended claim, every answer to its questions, and a rework the result the
    # review rejected.
    return _granted(
        tx,
        teammate,
        task,
        token,
        fence,
        busy,
        previous=previous_attempt(tx.conn, task.seq, fence),
        answers=answers_of(tx.conn, task.seq),
        rejected=reviews.rejected_result(tx.conn, task),
    )


def _granted(
    tx: Txn,
    teammate: str,
    task: TaskRecord,
    token: str,
    fence: int,
    busy: bool,
    *,
    previous: AttemptRecord | None = None,
    answers: tuple[QuestionAnswer, ...] = (),
    rejected: bytes = b"",
    review: ReviewItem | None = None,
) -> ClaimGrant:
    """A claim just written, told and counted: its lease's deadline, its key, its holder busy."""
    lease_end = task.lease_expire_ms
    assert lease_end is not None
    tx.wakes.deadline(lease_end)
    tx.leases.lowered_to(lease_end)
    tx.wakes.tally["claims"] += 1
    if task.concurrency_key:
        keys.taken(tx, task.concurrency_key)
    if review is None and (task.resources or task.shared_resources):
        leases.taken(tx, task)
    if not busy:
        mark_busy(tx, teammate)
    if review is None:
        tx.wakes.note("claimed", task=task.id, teammate=teammate, attempt=task.attempt, fence=fence)
    else:
        tx.wakes.note("review_claimed", task=task.id, teammate=teammate, round=review.round, fence=fence)
    if review is not None:
        return ClaimGrant(task, token, lease_end, task.attempt, fence, review=review)
    if previous is not None:  # a first claim has no artifacts yet: only a later one reads them
        task = with_artifacts(tx.conn, [task])[0]
    if not task.depends_on:  # nothing of dependencies to read
        return ClaimGrant(
            task, token, lease_end, task.attempt, fence, previous, answers=answers, rejected_result=rejected
        )
    results, omitted = dependency_results(tx.conn, task)
    return ClaimGrant(
        task,
        token,
        lease_end,
        task.attempt,
        fence,
        previous,
        results,
        omitted,
        answers,
        None,
        rejected,
        current_of_dependencies(tx.conn, task),
    )


def ready_query(
    conn: sqlite3.Connection, roles: Iterable[str], *, limit: int = 1, without_resources: bool = False
) -> tuple[str, list[str]]:
    """The query, and its parameters, for (seq, failures, last claim's attempt, resources)
    of the first `limit` ready tasks a teammate with `roles` may take: in board order,
    passing over the tasks whose concurrency key is at its limit (and, `without_resources`,
    those with resources)."""
    allowed = ["", *roles]
    return _ready_text(sql(conn), len(allowed), limit, without_resources), allowed


@functools.lru_cache(maxsize=256)
def _ready_text(statements: types.ModuleType, allowed: int, limit: int, without_resources: bool) -> str:
    """`ready_query`'s text, written once per driver and shape: every claim asks for it."""
    plain = " AND resources = ''" if without_resources else ""
    return (
        f"SELECT seq, failures, attempt, resources FROM tasks WHERE state = {PENDING} AND unmet_deps = 0"
        f" AND required_role IN ({statements.marks(allowed)}){keys.FULL_KEYS}{plain}"
        f" ORDER BY priority DESC, seq LIMIT {limit}"
    )


def pick_ready(
    conn: sqlite3.Connection, roles: Iterable[str], *, probe_first: bool = True
) -> tuple[int, int, int] | None:
    """(seq, failures, last claim's attempt) of the first ready task a teammate with `roles`
    may take now: its key not full, and its resources free (store/leases.py).

    With `probe_first`, the first ready task is read alone: when it has no resources
    (always, on a board without them) it is the pick, and the scan of store/leases.py runs
    only when it has. Without it the scan's first row is that probe, read the same way,
    so a driver passes False when the scan costs no more than that read (SQLite's cursor
    reads rows as they are asked for) or it has read it already."""
    roles = tuple(roles)
    if probe_first:
        first = conn.execute(*ready_query(conn, roles)).fetchone()
        if first is None or not first[3]:
            return None if first is None else (first[0], first[1], first[2])
    scan, allowed = ready_query(conn, roles, limit=leases.SCAN_BOUND)
    cursor = conn.execute(scan, allowed)
    rows: Iterable[tuple] = cursor
    if not probe_first:
        first = cursor.fetchone()
        if first is None or not first[3]:
            return None if first is None else (first[0], first[1], first[2])
        rows = itertools.chain((first,), cursor)
    picked, read = leases.first_free(conn, rows)
    if picked is None and read == leases.SCAN_BOUND:  # past the scan, what conflicts with nothing
        query, allowed = ready_query(conn, roles, without_resources=True)
        row = conn.execute(query, allowed).fetchone()
        picked = None if row is None else (row[0], row[1], row[2])
    return picked


def any_ready(conn: sqlite3.Connection, roles: Iterable[str], teammate: str = "") -> bool:
    """Whether a teammate with `roles` could claim now: a review it may take (never of
    `teammate`'s own result; '' for anyone's), or a ready task."""
    roles = tuple(roles)
    return reviews.any_for(conn, roles, teammate) or pick_ready(conn, roles) is not None


def work_waited_for(conn: sqlite3.Connection, teammate: str, roles: Iterable[str], limit: int = 10) -> list[str]:
    """Up to `limit` unfinished tasks that `teammate` could still take, in board order.

    PENDING, ready or not (its dependencies may still complete), NEEDS_INPUT (the
    Lead's answer brings it back), IN_REVIEW (a rejection does), PROPOSED (the
    Lead's approval does), or IN_PROGRESS
    under another holder (that claim may end and the task come back), and
    open to this teammate's roles. While one remains the teammate is waiting
    for work, not idle, and its idle budget is not spent.
    """
    roles = list(roles)
    statements = sql(conn)
    p = statements.P
    role_test = f"required_role IN ('', {statements.marks(len(roles))})" if roles else "required_role = ''"
    rows = conn.execute(
        f"SELECT id FROM tasks WHERE (state IN ({PENDING}, {NEEDS_INPUT}, {IN_REVIEW}, {PROPOSED})"
        f" OR (state = {IN_PROGRESS} AND owner != {p}))"
        f" AND {role_test}"
        f" ORDER BY seq LIMIT {p}",
        (teammate, *roles, limit),
    )
    return [task_id for (task_id,) in rows]


def any_lease_ended(conn: sqlite3.Connection, now_ms: int) -> bool:
    """Whether some claim's lease is over and awaits reclaiming."""
    return conn.execute(sql(conn).ANY_LEASE_ENDED, (now_ms,)).fetchone() is not None


def view_for_delivery(conn: sqlite3.Connection, name: str, now_ms: int) -> DeliveryView:
    """The teammate's delivery view; Unauthenticated once it is removed. One step of the
    driver's (`DriverSteps.view_for_delivery`): one statement where each is a round trip."""
    return steps(conn).view_for_delivery(conn, name, now_ms)


def delivery_view_with_claims(name: str, row: tuple | None) -> DeliveryView:
    """A delivery view from a row of the view's columns and, last, its held claims as a
    list of ClaimRef fields (a driver's step that reads both at once)."""
    view = delivery_view(name, row)  # raises for a teammate that is not there
    assert row is not None
    return DeliveryView(view, [ClaimRef(*held) for held in row[-1] or ()])


def delivery_view(name: str, row: tuple | None) -> TeammateView:
    """A teammate's view from a row of the drivers' `VIEW_COLUMNS`."""
    if row is None or row[2]:
        raise errors.Unauthenticated(f"teammate {name!r} was removed")
    roles, require_plan, _, acked, last, last_expiry, shutdown_pending, budget_spent, epoch = row[:9]
    return TeammateView(
        stored_roles(roles),
        bool(require_plan),
        acked,
        last,
        last_expiry,
        bool(shutdown_pending),
        bool(budget_spent),
        epoch,
    )


@functools.lru_cache(maxsize=1024)
def stored_roles(stored: str) -> tuple[str, ...]:
    """A teammate's roles from their stored JSON: every delivery check reads them, and
    a team has few distinct role lists."""
    return tuple(json.loads(stored))


def held_claim_refs(conn: sqlite3.Connection, teammate: str, now_ms: int) -> list[ClaimRef]:
    """The teammate's claims whose lease has not ended (a dead one awaits the reaper)."""
    rows = conn.execute(sql(conn).HELD_CLAIMS, (teammate, now_ms)).fetchall()
    return [ClaimRef(*row) for row in rows]


def grant(conn: sqlite3.Connection, ref: ClaimRef) -> ClaimGrant:
    """A held claim as it is sent again (a new stream): as it was first sent, its previous
    attempt and its dependencies' results included."""
    task = task_by_seq(conn, ref.task_seq)
    if task.state is TaskState.IN_REVIEW:  # a review's claim: what to review
        review = reviews.review_item(conn, task)
        return ClaimGrant(task, ref.token, ref.lease_expire_ms, ref.attempt, ref.fence, review=review)
    previous = previous_attempt(conn, ref.task_seq, ref.fence)
    results, omitted = dependency_results(conn, task)
    if previous is not None:
        task = with_artifacts(conn, [task])[0]
    answers = answers_of(conn, ref.task_seq) if previous is not None else ()
    rejected = reviews.rejected_result(conn, task)
    return ClaimGrant(
        task,
        ref.token,
        ref.lease_expire_ms,
        ref.attempt,
        ref.fence,
        previous,
        results,
        omitted,
        answers,
        None,
        rejected,
        current_of_dependencies(conn, task),
    )


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
    held = live_claim(tx, teammate, task_id, token)
    seq, lease_ms = held.seq, held.lease_ms
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
            tx.conn.execute(statements.PROGRESS_SENT, (tx.now_ms, seq))
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
