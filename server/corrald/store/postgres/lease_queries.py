"""The statements of path leases (store/leases.py), in PostgreSQL's dialect:
`dialect.sql(conn).leases.NAME` (kept apart from queries.py; store/sqlite/lease_queries.py
says what each does). Paths are compared byte by byte (COLLATE "C"), as SQLite does.
"""

from __future__ import annotations

from ...model import TaskState

_IN_PROGRESS = int(TaskState.IN_PROGRESS)
_PENDING = int(TaskState.PENDING)

TAKE = (
    "INSERT INTO held_resources (path, task_seq, exclusive)"
    " SELECT r.value, t.seq, 1 FROM tasks AS t, json_array_elements_text(t.resources::json -> 0) AS r"
    " WHERE t.seq = %s"
    " UNION ALL SELECT r.value, t.seq, 0 FROM tasks AS t, json_array_elements_text(t.resources::json -> 1) AS r"
    " WHERE t.seq = %s"
)
FREE_OF_CLAIM = (
    "DELETE FROM held_resources WHERE task_seq = (SELECT task_seq FROM claims WHERE fence = %s)"
    " RETURNING path, exclusive"
)
FREE_OF_TASK = "DELETE FROM held_resources WHERE task_seq = %s RETURNING path, exclusive"
_PROBES = "json_array_elements(%s::json) WITH ORDINALITY AS p(e, key)"
_OVERLAPPING = (
    ' JOIN held_resources AS h ON h.path >= (p.e ->> 1) COLLATE "C" AND h.path < (p.e ->> 2) COLLATE "C"'
    " AND ((p.e ->> 3)::int = 1 OR h.exclusive = 1)"
)
CONFLICTS = (
    f"SELECT p.e ->> 0, h.path, t.id, h.exclusive FROM {_PROBES}{_OVERLAPPING}"
    " JOIN tasks AS t ON t.seq = h.task_seq ORDER BY p.key LIMIT %s"
)
ANY_CONFLICT = f"SELECT 1 FROM {_PROBES}{_OVERLAPPING} LIMIT 1"
READY_LEASED = (
    f"SELECT required_role, resources FROM tasks WHERE state = {_PENDING}"
    " AND unmet_deps = 0 AND resources != '' ORDER BY priority DESC, seq LIMIT %s"
)
HELD = (
    "SELECT h.path, t.id, t.owner, h.exclusive FROM held_resources AS h JOIN tasks AS t ON t.seq = h.task_seq"
    " ORDER BY h.path, t.id LIMIT %s"
)
HELD_COUNT = "SELECT count(*) FROM held_resources"
FORGET_HELD = "DELETE FROM held_resources"
REBUILD_HELD = (
    "INSERT INTO held_resources (path, task_seq, exclusive)"
    " SELECT r.value, t.seq, 1 FROM tasks AS t, json_array_elements_text(t.resources::json -> 0) AS r"
    f" WHERE t.state = {_IN_PROGRESS} AND t.live_fence IS NOT NULL AND t.resources != ''"
    " UNION ALL SELECT r.value, t.seq, 0 FROM tasks AS t, json_array_elements_text(t.resources::json -> 1) AS r"
    f" WHERE t.state = {_IN_PROGRESS} AND t.live_fence IS NOT NULL AND t.resources != ''"
)
