"""The dependency graph after creation: the Lead's AddDependencies, and the cycle check
every edge added to a task already on the board passes (AddDependencies, a split)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence

from ... import errors
from ...model import TaskRecord, TaskState
from ...txn import Txn
from ..dialect import insert_rows, sql, steps
from .rows import COMPLETED, rows_by_id, task_by_seq, task_changed

_EDITABLE = (TaskState.PENDING, TaskState.PROPOSED)


def add_dependencies(tx: Txn, task_id: str, depends_on: Sequence[str]) -> TaskRecord:
    """Makes a PENDING or PROPOSED task wait for `depends_on` too (those it waits for
    already are left as they are); refuses, writing nothing, an unknown id, a FAILED or
    CANCELED dependency, and an edge that would close a cycle."""
    conn = tx.conn
    statements = sql(conn)
    steps(conn).lock_graph(tx)
    row = conn.execute(statements.graph.GRAPH_NODE, (task_id,)).fetchone()
    if row is None:
        raise errors.TaskNotFound(f"no task {task_id!r}", id=task_id)
    seq, state = row
    if TaskState(state) not in _EDITABLE:
        raise errors.FailedPrecondition(
            f"task {task_id!r} is {TaskState(state).name}: only a PENDING or PROPOSED task gains dependencies",
            id=task_id,
        )
    wanted = list(dict.fromkeys(depends_on))
    # Held as read until this commits: a completion of one waits, then counts this task down too.
    found = rows_by_id(conn, wanted, lock="SHARE")
    for dep in wanted:
        if dep not in found:
            raise errors.TaskNotFound(f"no task {dep!r}", id=dep)
        if found[dep].state in (TaskState.FAILED, TaskState.CANCELED):
            raise errors.InvalidArgument("depends_on", f"dependency {dep!r} is {found[dep].state.name}")
    held = {dep_seq for (dep_seq,) in conn.execute(statements.graph.DEPENDENCY_SEQS, (seq,))}
    new = [dep for dep in wanted if found[dep].seq not in held]
    if not new:
        return task_by_seq(conn, seq)
    refuse_cycle(conn, seq, [found[dep].seq for dep in new], "depends_on")
    link(tx, seq, [found[dep].seq for dep in new])
    conn.execute(statements.graph.ADD_UNMET, (sum(found[dep].state != COMPLETED for dep in new), seq))
    task_changed(tx, seq)
    tx.wakes.note("dependencies_added", task=task_id, added=len(new))
    return task_by_seq(conn, seq)


def link(tx: Txn, seq: int, dep_seqs: Sequence[int]) -> None:
    """Adds the edges from task `seq` to the tasks `dep_seqs`, after its others in
    depends_on order; what it now waits for is the caller's to count."""
    (first,) = tx.conn.execute(sql(tx.conn).graph.NEXT_DEPENDENCY_POSITION, (seq,)).fetchone()
    insert_rows(
        tx.conn,
        "deps",
        ("task_seq", "dep_seq", "position"),
        [(seq, dep_seq, first + offset) for offset, dep_seq in enumerate(dep_seqs)],
    )


def refuse_cycle(
    conn: sqlite3.Connection, seq: int, new_deps: Sequence[int], field: str, via: Mapping[str, str] | None = None
) -> None:
    """Refuses edges from task `seq` to `new_deps` that would close a cycle, naming it
    (`a → c → b → a`: a would depend on c, which depends on b, which depends on a).
    `via`: for edges that reach `new_deps` through tasks not on the board yet (a split's
    proposals), the one to name before each of `new_deps`, by id."""
    path = dependency_path(conn, new_deps, seq)
    if path is None:
        return
    ids = dict(conn.execute(sql(conn).graph.IDS_OF, (json.dumps([seq, *path]),)).fetchall())
    named = [ids[seq], *([via[ids[path[0]]]] if via else []), *(ids[node] for node in path)]
    raise errors.InvalidArgument(field, f"dependency cycle: {' → '.join(named)}")


def dependency_path(conn: sqlite3.Connection, starts: Sequence[int], target: int) -> list[int] | None:
    """A chain of dependencies from one of `starts` to `target` (seqs, both ends
    included: each depends on the next), or None when there is none.

    Searched from both ends at once, a level at a time, always on the smaller side:
    up the dependencies of `starts` and down the dependents of `target`, over unfinished
    tasks only (all a COMPLETED task depends on is COMPLETED, so no chain to an
    unfinished task passes one). Only the two neighbourhoods are read, never the board.
    """
    if target in starts:
        return [target]
    up: dict[int, int | None] = dict.fromkeys(starts)  # node -> the node it was reached from
    down: dict[int, int | None] = {target: None}
    up_edge, down_edge = list(starts), [target]
    statements = sql(conn)
    while up_edge and down_edge:
        forward = len(up_edge) <= len(down_edge)
        frontier, seen, other = (up_edge, up, down) if forward else (down_edge, down, up)
        query = statements.graph.DEPENDENCIES_OF if forward else statements.graph.DEPENDENTS_OF
        following: list[int] = []
        for source, reached in conn.execute(query, (json.dumps(frontier),)).fetchall():
            if reached in seen:
                continue
            seen[reached] = source
            if reached in other:
                return _joined(up, down, reached)
            following.append(reached)
        if forward:
            up_edge = following
        else:
            down_edge = following
    return None


def _joined(up: dict[int, int | None], down: dict[int, int | None], meeting: int) -> list[int]:
    """The chain through `meeting`: back up to a start, then down to the target."""
    head: list[int] = []
    node: int | None = meeting
    while node is not None:
        head.append(node)
        node = up.get(node)
    head.reverse()
    node = down.get(meeting)
    while node is not None:
        head.append(node)
        node = down.get(node)
    return head
