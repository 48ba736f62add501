"""The statements of path leases (store/leases.py), in PostgreSQL's dialect:
`dialect.sql(conn).leases.NAME` (kept apart from queries.py; store/sqlite/lease_queries.py
says what each does). Paths are compared byte by byte (COLLATE "C"), as SQLite does.
"""

from __future__ import annotations

from ...model import TaskState

_IN_PROGRESS = int(TaskState.IN_PROGRESS)
_PENDING = int(TaskState.PENDING)

_TASK_PATHS = (
    "SELECT r.value FROM tasks AS t, json_array_elements_text(nullif(t.resources, '')::json -> 0) AS r"
    " WHERE t.seq = {seq} UNION ALL SELECT r.value FROM tasks AS t,"
    " json_array_elements_text(nullif(t.resources, '')::json -> 1) AS r WHERE t.seq = {seq}"
)
_OF_CLAIM = "(SELECT task_seq FROM claims WHERE fence = %s)"
FREE_OF_CLAIM = (
    f"DELETE FROM held_resources WHERE path IN ({_TASK_PATHS.format(seq=_OF_CLAIM)}) AND task_seq = {_OF_CLAIM}"
    " RETURNING path, exclusive"
)
FREE_OF_TASK = (
    f"DELETE FROM held_resources WHERE path IN ({_TASK_PATHS.format(seq='%s')}) AND task_seq = %s"
    " RETURNING path, exclusive"
)
_PROBES = "json_array_elements(%s::json) WITH ORDINALITY AS p(e, key)"
_OVERLAPPING = (
    ' JOIN held_resources AS h ON h.path >= (p.e ->> 1) COLLATE "C" AND h.path < (p.e ->> 2) COLLATE "C"'
    " AND ((p.e ->> 3)::int = 1 OR h.exclusive = 1)"
)
CONFLICTS = (
    f"SELECT p.e ->> 0, h.path, t.id, h.exclusive FROM {_PROBES}{_OVERLAPPING}"
    " JOIN tasks AS t ON t.seq = h.task_seq ORDER BY p.key LIMIT %s"
)
HELD_OVER_OR_UNDER = (
    "SELECT 1 FROM held_resources WHERE (path IN ({paths}) OR (path > %s AND path < %s))"
    " AND (exclusive = 1 OR %s) LIMIT 1"
)
HOLD = "INSERT INTO held_resources (path, task_seq, exclusive) VALUES (%s, %s, %s)"
ANY_CONFLICT = f"SELECT 1 FROM {_PROBES}{_OVERLAPPING} LIMIT 1"
# The first ready tasks (any role's), in claim order, of which those with resources are
# what a freed resource may let through: a claim reads no further (leases.SCAN_BOUND).
READY_LEASED = (
    "SELECT required_role, resources FROM (SELECT required_role, resources FROM tasks"
    f" WHERE state = {_PENDING} AND unmet_deps = 0 ORDER BY priority DESC, seq LIMIT %s) AS r"
    " WHERE resources != ''"
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
