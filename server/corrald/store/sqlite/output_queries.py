"""The statements of a task's live output (store/output.py), in SQLite's dialect:
`dialect.sql(conn).output.NAME` (kept apart from queries.py)."""

from __future__ import annotations

# An append to a live claim with room left, or nothing changes.
APPEND = (
    "UPDATE claims SET output_bytes = output_bytes + ? WHERE fence = ? AND outcome IS NULL"
    " AND output_bytes + ? <= ? RETURNING output_bytes, attempt"
)
CLAIM_OUTPUT = "SELECT output_bytes, outcome FROM claims WHERE fence = ?"
INSERT_CHUNK = "INSERT INTO output_chunks (fence, pos, data) VALUES (?, ?, ?)"
ATTEMPT_OF_TOKEN = "SELECT attempt FROM claims WHERE token = ?"
TASK_SEQ = "SELECT seq FROM tasks WHERE id = ?"
LATEST_CLAIM = "SELECT fence, attempt, output_bytes, outcome FROM claims WHERE task_seq = ? ORDER BY fence DESC LIMIT 1"
NUMBERED_CLAIM = (
    "SELECT fence, attempt, output_bytes, outcome FROM claims WHERE task_seq = ?"
    " AND attempt = ? ORDER BY fence DESC LIMIT 1"
)
CHUNKS = "SELECT pos, data FROM output_chunks WHERE fence = ? AND pos > ? AND pos < ? ORDER BY pos"
# A teammate's own task (one it holds or held), or a dependency of one.
MAY_TAIL = (
    "SELECT EXISTS (SELECT 1 FROM claims WHERE task_seq = ? AND teammate = ?)"
    " OR EXISTS (SELECT 1 FROM deps AS d JOIN claims AS c ON c.task_seq = d.task_seq"
    " WHERE d.dep_seq = ? AND c.teammate = ?)"
)
