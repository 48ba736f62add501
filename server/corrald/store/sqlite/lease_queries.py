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

# A claimed task's resources become held (parameters: its seq, twice).
TAKE = (
    "INSERT INTO held_resources (path, task_seq, exclusive)"
    " SELECT r.value, t.seq, 1 FROM tasks AS t, json_each(t.resources, '$[0]') AS r WHERE t.seq = ?"
    " UNION ALL SELECT r.value, t.seq, 0 FROM tasks AS t, json_each(t.resources, '$[1]') AS r WHERE t.seq = ?"
)
# A claim's end frees what its task held: by the claim's fence, or by the task.
FREE_OF_CLAIM = (
    "DELETE FROM held_resources WHERE task_seq = (SELECT task_seq FROM claims WHERE fence = ?)"
    " RETURNING path, exclusive"
)
FREE_OF_TASK = "DELETE FROM held_resources WHERE task_seq = ? RETURNING path, exclusive"
# The held resources that conflict with wanted ones, given as probes ([wanted path, low,
# high, wanted exclusive]: a held path in [low, high) overlaps it; leasepaths.probes), each
# with its holder: one index range per probe.
CONFLICTS = (
    "SELECT p.value ->> 0, h.path, t.id, h.exclusive FROM json_each(?) AS p"
    " JOIN held_resources AS h ON h.path >= p.value ->> 1 AND h.path < p.value ->> 2"
    " AND (p.value ->> 3 = 1 OR h.exclusive = 1) JOIN tasks AS t ON t.seq = h.task_seq"
    " ORDER BY p.key LIMIT ?"
)
ANY_CONFLICT = (
    "SELECT 1 FROM json_each(?) AS p JOIN held_resources AS h ON h.path >= p.value ->> 1"
    " AND h.path < p.value ->> 2 AND (p.value ->> 3 = 1 OR h.exclusive = 1) LIMIT 1"
)
# The first ready tasks with resources, in claim order (its partial index): those a freed
# resource may let through are among them.
READY_LEASED = (
    f"SELECT required_role, resources FROM tasks INDEXED BY tasks_leased_ready WHERE state = {_PENDING}"
    " AND unmet_deps = 0 AND resources != '' ORDER BY priority DESC, seq LIMIT ?"
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
