"""Concurrency keys: at most a key's limit of its tasks IN_PROGRESS at once.

A key has a limit while it has a row in `concurrency_keys`; the row counts its
tasks IN_PROGRESS. The claim query leaves out the keys at their limit
(`FULL_KEYS`), and only a task with a key costs a statement here: taken when
it is claimed, freed when its claim ends, whatever ends it.
"""

from __future__ import annotations

import json
import sqlite3

from ..model import ConcurrencyLimit, TaskState
from ..txn import Txn
from .dialect import sql

_IN_PROGRESS = int(TaskState.IN_PROGRESS)
_IN_REVIEW = int(TaskState.IN_REVIEW)  # a review's claim holds the key as a work claim does

# The claim query's gate, a condition on `tasks`: a row of the ready index with a
# key costs one primary-key probe, and one without a key none. (A list of the
# full keys, built per claim, would cost as much as there are full keys.)
FULL_KEYS = (
    " AND (concurrency_key = '' OR NOT EXISTS (SELECT 1 FROM concurrency_keys AS k"
    " WHERE k.key = tasks.concurrency_key AND k.in_progress >= k.max_in_progress))"
)


def taken(tx: Txn, key: str) -> None:
    """A task of `key` was claimed."""
    tx.conn.execute(sql(tx.conn).TAKEN, (key,))


def freed(tx: Txn, key: str) -> None:
    """A claim of a task of `key` ended; if that opened the key, its ready tasks' takers are woken."""
    row = tx.conn.execute(
        sql(tx.conn).FREED,
        (key,),
    ).fetchone()
    if row is not None and row[0] == row[1] - 1:
        _wake_for_key(tx, key)


def _wake_for_key(tx: Txn, key: str) -> None:
    """One waiting stream per role among the key's ready tasks re-checks (a slot freed: one claim)."""
    roles = tx.conn.execute(
        sql(tx.conn).WAKE_FOR_KEY,
        (key,),
    ).fetchall()
    for (role,) in roles:
        tx.wakes.ready_roles[role] += 1


def full_among(conn: sqlite3.Connection, wanted: set[str]) -> set[str]:
    """The keys among `wanted` at their limit (no claim of them is made now)."""
    if not wanted:
        return set()
    rows = conn.execute(
        sql(conn).FULL_AMONG,
        (json.dumps(sorted(wanted)),),
    )
    return {key for (key,) in rows}


def _in_progress(conn: sqlite3.Connection, key: str) -> int:
    (count,) = conn.execute(sql(conn).IN_PROGRESS, (key,)).fetchone()
    return int(count)


def set_limit(tx: Txn, key: str, limit: int) -> ConcurrencyLimit:
    """Sets the key's limit (checked by the caller), or removes it with 0. A key
    that may take more claims than before wakes the takers of its ready tasks."""
    count = _in_progress(tx.conn, key)
    if limit == 0:
        tx.conn.execute(sql(tx.conn).DROP_LIMIT, (key,))
    else:
        tx.conn.execute(
            sql(tx.conn).SET_LIMIT,
            (key, limit, count),
        )
    if limit == 0 or count < limit:
        _wake_for_key(tx, key)
    return ConcurrencyLimit(key, limit, count)


def list_limits(conn: sqlite3.Connection) -> list[ConcurrencyLimit]:
    rows = conn.execute("SELECT key, max_in_progress, in_progress FROM concurrency_keys ORDER BY key")
    return [ConcurrencyLimit(*row) for row in rows]


def recount(tx: Txn) -> None:
    """Every limited key's count from the tasks themselves (a board's open)."""
    tx.conn.execute(
        "UPDATE concurrency_keys SET in_progress = (SELECT count(*) FROM tasks"
        " WHERE tasks.concurrency_key = concurrency_keys.key AND tasks.concurrency_key != ''"
        f" AND tasks.state IN ({_IN_PROGRESS}, {_IN_REVIEW}) AND tasks.live_fence IS NOT NULL)"
    )
