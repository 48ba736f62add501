"""Path leases: a task's resources are held while it is IN_PROGRESS, and a claim passes
over a task whose resources conflict with held ones (server/DESIGN.md, "Path leases").

A claim reads the ready tasks in claim order, at most SCAN_BOUND of them. A task
without resources is taken at once (it conflicts with nothing), so a board without
resources pays nothing more than a column. A task with resources costs a check of
the driver's (`DriverSteps.held_conflict`): are any of them held in a conflicting way? If so it is passed over, and
it *reserves* its resources for the rest of the scan: a later task that would
conflict with it is passed over too. So a task waiting for a resource keeps its
place: once the holders finish, nothing behind it overlapping it starts first.

Holding is a row per resource in `held_resources`, written by the claim and deleted
by whatever ends the claim, in the same transaction; a freed resource wakes the
takers of the ready tasks it may let through (`_wake_for`), as a freed concurrency
key does.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Iterable, Sequence

from ..leasepaths import PathSet, WantedPath, overlap, probes
from ..model import HeldResource, ResourceWait, TaskRecord
from ..txn import Txn
from .dialect import sql, steps

# The ready tasks one claim reads at most. Past them, only a task without resources
# may be taken (one more query): it can conflict with no one, held or waiting.
SCAN_BOUND = 64
# The ready tasks a freed resource is checked against for wake-ups: a claim reads no
# further than SCAN_BOUND of those of its roles (taken as four times that of any role's).
WAKE_BOUND = 4 * SCAN_BOUND
# A task's conflicts shown in waiting_for; GetStats' held resources listed.
WAITS_SHOWN = 32
HELD_SHOWN = 1000

Wanted = Sequence[WantedPath]


def stored(exclusive: Sequence[str], shared: Sequence[str]) -> str:
    """`tasks.resources` for a spec's resources: '' for none."""
    if not exclusive and not shared:
        return ""
    return json.dumps([list(exclusive), list(shared)], separators=(",", ":"))


@functools.lru_cache(maxsize=4096)
def wanted(resources: str) -> tuple[WantedPath, ...]:
    """A task's resources, from `tasks.resources` (not ''). Cached: the same first ready
    tasks are read by claim after claim and by each freed resource's wake-up check."""
    exclusive, shared = json.loads(resources)
    return tuple(WantedPath(path, True) for path in exclusive) + tuple(WantedPath(path, False) for path in shared)


def first_free(conn: sqlite3.Connection, rows: Iterable[tuple]) -> tuple[tuple[int, int, int] | None, int]:
    """The first of `rows` (seq, failures, attempt, resources; in claim order) whose
    resources conflict with none held and none reserved by a task passed over before it,
    and how many rows were read."""
    reserved = PathSet()
    read = 0
    for seq, failures, attempt, resources in rows:
        read += 1
        if not resources:
            return (seq, failures, attempt), read
        wants = wanted(resources)
        if (reserved and reserved.conflicts_any(wants)) or steps(conn).held_conflict(conn, wants):
            reserved.add_all(wants)
            continue
        return (seq, failures, attempt), read
    return None, read


def conflicts(conn: sqlite3.Connection, resources: str) -> tuple[ResourceWait, ...]:
    """What a PENDING task's resources wait for: each conflicting held resource and its holder."""
    rows = conn.execute(
        sql(conn).leases.CONFLICTS,
        (json.dumps(probes(wanted(resources))), WAITS_SHOWN),
    ).fetchall()
    seen: set[str] = set()
    waits = []
    for resource, held, holder, exclusive in rows:
        if resource not in seen:  # one holder per resource
            seen.add(resource)
            waits.append(ResourceWait(resource, holder, held, bool(exclusive)))
    return tuple(waits)


def taken(tx: Txn, task: TaskRecord) -> None:
    """`task`, which has resources, was claimed: they are held (a row each; most tasks have one)."""
    hold = sql(tx.conn).leases.HOLD
    for path in task.resources:
        tx.conn.execute(hold, (path, task.seq, 1))
    for path in task.shared_resources:
        tx.conn.execute(hold, (path, task.seq, 0))


def freed_by_claim(tx: Txn, fence: int) -> None:
    """Claim `fence` ended: what its task held is free (nothing, for most tasks)."""
    _freed(tx, tx.conn.execute(sql(tx.conn).leases.FREE_OF_CLAIM, (fence, fence, fence)).fetchall())


def freed_by_task(tx: Txn, seq: int) -> None:
    """The live claim of task `seq` (with resources) ended."""
    _freed(tx, tx.conn.execute(sql(tx.conn).leases.FREE_OF_TASK, (seq, seq, seq)).fetchall())


def _freed(tx: Txn, rows: list[tuple]) -> None:
    if rows:
        _wake_for(tx, [WantedPath(path, bool(exclusive)) for path, exclusive in rows])


def _wake_for(tx: Txn, freed: Wanted) -> None:
    """One waiting stream of its role per ready task a freed resource may let through
    (one overlapping it, among the first WAKE_BOUND ready tasks): a check that finds it
    still held costs a read."""
    rows = tx.conn.execute(sql(tx.conn).leases.READY_LEASED, (WAKE_BOUND,)).fetchall()
    for role, resources in rows:
        if any(overlap(path, free) for path, _ in wanted(resources) for free, _ in freed):
            tx.wakes.ready_roles[role] += 1


def held(conn: sqlite3.Connection) -> tuple[list[HeldResource], int]:
    """The resources held now, by path then task (at most HELD_SHOWN), and their count."""
    rows = conn.execute(sql(conn).leases.HELD, (HELD_SHOWN,)).fetchall()
    (total,) = conn.execute(sql(conn).leases.HELD_COUNT).fetchone()
    return [HeldResource(path, task_id, owner, bool(exclusive)) for path, task_id, owner, exclusive in rows], total


def rebuild(tx: Txn) -> None:
    """What is held, from the tasks IN_PROGRESS (a board's open, as keys are recounted)."""
    tx.conn.execute(sql(tx.conn).leases.FORGET_HELD)
    tx.conn.execute(sql(tx.conn).leases.REBUILD_HELD)
