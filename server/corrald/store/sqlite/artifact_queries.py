"""The statements of artifacts (store/artifacts.py), in SQLite's dialect:
`dialect.sql(conn).artifacts.NAME` (kept apart from queries.py)."""

from __future__ import annotations

_COLUMNS = "a.name, a.media_type, a.size, a.sha256, a.attempt, a.create_ms"
# The row of a name that no later row of the same task and name supersedes.
_CURRENT = "a.seq = (SELECT max(b.seq) FROM artifacts AS b WHERE b.task_seq = a.task_seq AND b.name = a.name)"

CLAIM_ATTEMPT = "SELECT attempt FROM claims WHERE fence = ?"
# A content no artifact named before: its size is counted once, toward the quota.
ADD_CONTENT = "INSERT INTO artifact_contents (sha256, size) VALUES (?, ?) ON CONFLICT DO NOTHING RETURNING size"
# The board's stored bytes grow by a new content's size, unless that passes the quota.
GROW_STORE = "UPDATE meta SET value = value + ? WHERE key = 'artifact_bytes' AND value + ? <= ? RETURNING value"
STORED_BYTES = "SELECT value FROM meta WHERE key = 'artifact_bytes'"
INSERT = (
    "INSERT INTO artifacts (task_seq, attempt, name, media_type, size, sha256, create_ms, teammate)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
# The current artifacts of a page of tasks (a JSON array of their seqs), by task and name.
CURRENT_OF_TASKS = (
    f"SELECT a.task_seq, {_COLUMNS} FROM artifacts AS a"
    f" WHERE a.task_seq IN (SELECT CAST(value AS BIGINT) FROM json_each(?)) AND {_CURRENT}"
    " ORDER BY a.task_seq, a.name"
)
# The current artifacts of a task's direct dependencies, in depends_on order.
CURRENT_OF_DEPENDENCIES = (
    f"SELECT dep.id, {_COLUMNS} FROM deps AS d JOIN artifacts AS a ON a.task_seq = d.dep_seq"
    f" JOIN tasks AS dep ON dep.seq = d.dep_seq WHERE d.task_seq = ? AND {_CURRENT} ORDER BY d.position, a.name"
)
CURRENT_BY_NAME = (
    f"SELECT {_COLUMNS} FROM artifacts AS a WHERE a.task_seq = ? AND a.name = ? ORDER BY a.seq DESC LIMIT 1"
)
HISTORY = f"SELECT {_COLUMNS}, a.teammate FROM artifacts AS a WHERE a.task_seq = ? ORDER BY a.seq"
NAMED_CONTENTS = "SELECT sha256 FROM artifact_contents"
