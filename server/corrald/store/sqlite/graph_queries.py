"""The statements of discovered work (proposals, the Lead's policy and decisions) and of
edits to the dependency graph, in SQLite's dialect: `dialect.sql(conn).graph.NAME`
(kept apart from queries.py, whose statements every other verb uses)."""

from __future__ import annotations

from ...model import TaskState

_PENDING, _COMPLETED, _PROPOSED = int(TaskState.PENDING), int(TaskState.COMPLETED), int(TaskState.PROPOSED)

TASK_CREATION_OF = (
    "SELECT coalesce(task_creation, (SELECT value FROM meta WHERE key = 'task_creation')) FROM teammates WHERE name = ?"
)
SET_TASK_CREATION = "UPDATE teammates SET task_creation = ? WHERE name = ? AND removed = 0"
SET_DEFAULT_TASK_CREATION = "UPDATE meta SET value = ? WHERE key = 'task_creation'"
DEFAULT_TASK_CREATION = "SELECT value FROM meta WHERE key = 'task_creation'"
PROPOSALS_WAITING = f"SELECT count(*) FROM tasks WHERE proposed_by = ? AND state = {_PROPOSED}"
TASK_PRIORITY = "SELECT priority FROM tasks WHERE seq = ?"
NEXT_DEPENDENCY_POSITION = "SELECT coalesce(max(position) + 1, 0) FROM deps WHERE task_seq = ?"
DEPENDENCY_SEQS = "SELECT dep_seq FROM deps WHERE task_seq = ?"
# A split: the claimed task waits for the tasks it gained (its claim ended by the caller).
SPLIT_TASK = (
    f"UPDATE tasks SET state = {_PENDING}, owner = '', live_fence = NULL, lease_expire_ms = NULL,"
    " unmet_deps = unmet_deps + ? WHERE seq = ?"
)
ADD_UNMET = "UPDATE tasks SET unmet_deps = unmet_deps + ? WHERE seq = ?"
GRAPH_NODE = "SELECT seq, state FROM tasks WHERE id = ?"
PROPOSALS_BY_ID = (
    "SELECT t.id, t.seq, t.state, t.proposed_by, t.discovered_from FROM json_each(?) AS w"
    " JOIN tasks AS t ON t.id = w.value ORDER BY t.seq"
)
# The named proposals are decided: a retry of one the Lead rejected brings it back PENDING.
DECIDED = "UPDATE tasks SET undecided = 0 WHERE seq IN (SELECT CAST(value AS BIGINT) FROM json_each(?))"
APPROVE_PROPOSED = (
    f"UPDATE tasks SET state = {_PENDING} WHERE seq = ? AND state = {_PROPOSED} RETURNING required_role, unmet_deps"
)
# The edges from a split task to the proposals discovered from it, among `doomed` (seqs).
SPLIT_EDGES_AMONG = (
    "SELECT d.task_seq, d.dep_seq FROM json_each(?) AS w JOIN deps AS d ON d.dep_seq = CAST(w.value AS BIGINT)"
    " JOIN tasks AS p ON p.seq = d.dep_seq JOIN tasks AS s ON s.seq = d.task_seq"
    f" WHERE p.discovered_from = s.id AND s.state = {_PENDING}"
)
DROP_DEPENDENCY = "DELETE FROM deps WHERE task_seq = ? AND dep_seq = ?"
# What a task that lost a dependency waits for now (parameter: the seq, twice).
DEPENDENCY_DROPPED = "UPDATE tasks SET unmet_deps = unmet_deps - 1 WHERE seq = ? RETURNING required_role, unmet_deps"
SPLIT_REJECTED = (
    "UPDATE claims SET error = ? WHERE fence = (SELECT max(fence) FROM claims WHERE task_seq = ? AND outcome = 'split')"
)
# One level of a walk through the graph, over the unfinished tasks only (nothing a
# COMPLETED task depends on can be unfinished): the dependencies of `frontier`...
DEPENDENCIES_OF = (
    "SELECT d.task_seq, d.dep_seq FROM json_each(?) AS w JOIN deps AS d ON d.task_seq = CAST(w.value AS BIGINT)"
    f" JOIN tasks AS t ON t.seq = d.dep_seq WHERE t.state != {_COMPLETED}"
)
# ... and its dependents.
DEPENDENTS_OF = (
    "SELECT d.dep_seq, d.task_seq FROM json_each(?) AS w JOIN deps AS d ON d.dep_seq = CAST(w.value AS BIGINT)"
    f" JOIN tasks AS t ON t.seq = d.task_seq WHERE t.state != {_COMPLETED}"
)
IDS_OF = "SELECT seq, id FROM tasks WHERE seq IN (SELECT CAST(value AS BIGINT) FROM json_each(?))"
