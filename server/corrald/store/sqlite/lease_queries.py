"""The statements of path leases (store/leases.py), in SQLite's dialect:
`dialect.sql(conn).leases.NAME` (kept apart from queries.py).

`tasks.resources` is '' for a task without resources, else the JSON list
[exclusive paths, shared paths]; `held_resources` has a row per resource of each
task IN_PROGRESS, its primary key ordered by path.
"""

from __future__ import annotations

from ...model import TaskState

_IN_PROGRESS = int(TaskState.IN_PROGRESS)
_PENDING = int(TaskState.PENDING)

# A claim's end frees what its task held: by the claim's fence, or by the task.
# Each a primary-key lookup per resource, found on the task's row (`_TASK_PATHS`).
_TASK_PATHS = (
    "SELECT r.value FROM tasks AS t, json_each(nullif(t.resources, ''), '$[0]') AS r WHERE t.seq = {seq}"
    " UNION ALL SELECT r.value FROM tasks AS t, json_each(nullif(t.resources, ''), '$[1]') AS r WHERE t.seq = {seq}"
)
_OF_CLAIM = "(SELECT task_seq FROM claims WHERE fence = ?)"
FREE_OF_CLAIM = (
    f"DELETE FROM held_resources WHERE path IN ({_TASK_PATHS.format(seq=_OF_CLAIM)}) AND task_seq = {_OF_CLAIM}"
    " RETURNING path, exclusive"
)
FREE_OF_TASK = (
    f"DELETE FROM held_resources WHERE path IN ({_TASK_PATHS.format(seq='?')}) AND task_seq = ?"
    " RETURNING path, exclusive"
)
# The held resources that conflict with wanted ones, given as probes ([wanted path, low,
# high, wanted exclusive]: a held path in [low, high) overlaps it; leasepaths.probes), each
# with its holder: one index range per probe.
CONFLICTS = (
    "SELECT p.value ->> 0, h.path, t.id, h.exclusive FROM json_each(?) AS p"
    " JOIN held_resources AS h ON h.path >= p.value ->> 1 AND h.path < p.value ->> 2"
    " AND (p.value ->> 3 = 1 OR h.exclusive = 1) JOIN tasks AS t ON t.seq = h.task_seq"
    " ORDER BY p.key LIMIT ?"
)
HELD_OVER_OR_UNDER = (
    "SELECT 1 FROM held_resources WHERE (path IN ({paths}) OR (path > ? AND path < ?)) AND (exclusive = 1 OR ?) LIMIT 1"
)
# One held resource of a task just claimed (its resources are in hand).
HOLD = "INSERT INTO held_resources (path, task_seq, exclusive) VALUES (?, ?, ?)"
ANY_CONFLICT = (
    "SELECT 1 FROM json_each(?) AS p JOIN held_resources AS h ON h.path >= p.value ->> 1"
    " AND h.path < p.value ->> 2 AND (p.value ->> 3 = 1 OR h.exclusive = 1) LIMIT 1"
)
# The first ready tasks (any role's), in claim order, of which those with resources are
# what a freed resource may let through: a claim reads no further (leases.SCAN_BOUND).
READY_LEASED = (
    "SELECT required_role, resources FROM (SELECT required_role, resources FROM tasks"
    f" WHERE state = {_PENDING} AND unmet_deps = 0 ORDER BY priority DESC, seq LIMIT ?) AS r"
    " WHERE resources != ''"
)
HELD = (
    "SELECT h.path, t.id, t.owner, h.exclusive FROM held_resources AS h JOIN tasks AS t ON t.seq = h.task_seq"
    " ORDER BY h.path, t.id LIMIT ?"
)
HELD_COUNT = "SELECT count(*) FROM held_resources"
# A board's open: what is held, from the tasks IN_PROGRESS themselves.
FORGET_HELD = "DELETE FROM held_resources"
REBUILD_HELD = (
    "INSERT INTO held_resources (path, task_seq, exclusive)"
    " SELECT r.value, t.seq, 1 FROM tasks AS t, json_each(t.resources, '$[0]') AS r"
    f" WHERE t.state = {_IN_PROGRESS} AND t.live_fence IS NOT NULL AND t.resources != ''"
    " UNION ALL SELECT r.value, t.seq, 0 FROM tasks AS t, json_each(t.resources, '$[1]') AS r"
    f" WHERE t.state = {_IN_PROGRESS} AND t.live_fence IS NOT NULL AND t.resources != ''"
)
