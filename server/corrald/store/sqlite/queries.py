"""The store's statements in SQLite's dialect, by name (the PostgreSQL driver's
`store/postgres/queries.py` has the same names in its own).

The store's functions take each statement from their connection's driver
(`dialect.sql(conn)`); a statement spelled alike in both (no parameter, no
function only one of them has) stays beside the function that runs it.
Parameters are `?` (or `:name`); state numbers come from `model.TaskState`.
"""

from __future__ import annotations

import functools

from ...model import TaskState, TeammateStatus
from . import artifact_queries as artifacts  # noqa: F401 (artifacts: sql(conn).artifacts.NAME)
from . import graph_queries as graph  # noqa: F401 (discovered work, the graph's edits: sql(conn).graph.NAME)
from . import lease_queries as leases  # noqa: F401 (path leases: sql(conn).leases.NAME)
from . import output_queries as output  # noqa: F401 (live output: sql(conn).output.NAME)
from . import usage_queries as usage  # noqa: F401 (spending and budgets: sql(conn).usage.NAME)
from .usage_queries import GATE_CLOSED

# The states in statements, from the enums (the numbers are the wire's).
_PENDING, _IN_PROGRESS, _COMPLETED = int(TaskState.PENDING), int(TaskState.IN_PROGRESS), int(TaskState.COMPLETED)
_NEEDS_INPUT = int(TaskState.NEEDS_INPUT)
# The states of a task with a live claim: a work claim's, or a review's.
_HELD = f"({_IN_PROGRESS}, {int(TaskState.IN_REVIEW)})"
_IN_REVIEW = int(TaskState.IN_REVIEW)
_PROPOSED = int(TaskState.PROPOSED)
# The states a cancel or a failed dependency still ends (every state but the final ones).
_UNFINISHED = "(" + ", ".join(str(int(s)) for s in TaskState if not s.is_final) + ")"
_BUSY = int(TeammateStatus.BUSY)

# ---------------------------------------------------------------- events
EMIT = "INSERT INTO events (time_ms, kind, data) VALUES (?, ?, ?)"
READ_EVENTS = "SELECT seq, time_ms, kind, data FROM events WHERE seq > ? ORDER BY seq LIMIT ?"

# ---------------------------------------------------------------- gates
PLAN_APPROVED = "SELECT approve, decision_seq FROM plans WHERE author = ? ORDER BY plan_id DESC LIMIT 1"
PROTOCOL_PENDING = (
    "SELECT EXISTS (SELECT 1 FROM inbox INDEXED BY inbox_protocol"
    "               WHERE recipient = t.name AND seq > t.acked_seq AND kind != 'message')"
    " OR EXISTS (SELECT 1 FROM shutdowns WHERE teammate = t.name AND answered = 0)"
    " FROM teammates AS t WHERE t.name = ?"
)
PROTOCOL_UNACKED = (
    "SELECT 1 FROM inbox INDEXED BY inbox_protocol WHERE recipient = ? AND seq > ? AND kind != 'message' LIMIT 1"
)

# ---------------------------------------------------------------- status
SET_WAITING = "UPDATE teammates SET status = ? WHERE name = ? AND status = ?"
MARK_BUSY = f"UPDATE teammates SET status = {_BUSY} WHERE name = ? AND status != {_BUSY}"
STORE_STATUS = "UPDATE teammates SET status = ? WHERE name = ?"

# ---------------------------------------------------------------- claim_ends
ENDED_CLAIMS = (
    "SELECT c.token, t.id, c.outcome, c.error, c.teammate, m.removed FROM json_each(?) AS w"
    " JOIN claims AS c ON c.token = w.value JOIN tasks AS t ON t.seq = c.task_seq"
    " JOIN teammates AS m ON m.name = c.teammate WHERE c.outcome IS NOT NULL ORDER BY c.fence"
)
REMOVED_AMONG = "SELECT m.name FROM json_each(?) AS w JOIN teammates AS m ON m.name = w.value WHERE m.removed = 1"

# ---------------------------------------------------------------- keys
TAKEN = "UPDATE concurrency_keys SET in_progress = in_progress + 1 WHERE key = ?"
FREED = "UPDATE concurrency_keys SET in_progress = in_progress - 1 WHERE key = ? RETURNING in_progress, max_in_progress"
WAKE_FOR_KEY = (
    "SELECT DISTINCT required_role FROM tasks WHERE concurrency_key = ? AND concurrency_key != ''"
    f" AND state = {_PENDING} AND unmet_deps = 0"
)
FULL_AMONG = (
    "SELECT key FROM concurrency_keys WHERE key IN (SELECT value FROM json_each(?)) AND in_progress >= max_in_progress"
)
IN_PROGRESS = (
    f"SELECT count(*) FROM tasks WHERE concurrency_key = ? AND concurrency_key != '' AND state IN {_HELD}"
    " AND live_fence IS NOT NULL"
)
DROP_LIMIT = "DELETE FROM concurrency_keys WHERE key = ?"
SET_LIMIT = (
    "INSERT INTO concurrency_keys (key, max_in_progress, in_progress) VALUES (?, ?, ?)"
    " ON CONFLICT (key) DO UPDATE SET max_in_progress = excluded.max_in_progress,"
    " in_progress = excluded.in_progress"
)

# ---------------------------------------------------------------- tasks
UNMET_DEPENDENCIES = (
    "SELECT d.task_seq, dep.id FROM json_each(?) AS w JOIN deps AS d ON d.task_seq = CAST(w.value AS BIGINT)"
    f" JOIN tasks AS dep ON dep.seq = d.dep_seq WHERE dep.state != {_COMPLETED} ORDER BY d.task_seq, d.position"
)
SHUT_GATES = (
    "SELECT t.seq, t.ready_ms FROM json_each(?) AS w JOIN tasks AS t ON t.seq = CAST(w.value AS BIGINT)"
    " WHERE t.gate_shut = 1"
)
EARLIEST_LEASE = f"SELECT min(lease_expire_ms) FROM tasks WHERE state IN {_HELD}"
EARLIEST_GRACE = "SELECT min(deadline_ms) FROM shutdowns WHERE answered = 0"
CREATE_REQUEST = "SELECT digest, task_ids FROM create_requests WHERE request_id = ?"
INSERT_CREATE_REQUEST = "INSERT INTO create_requests (request_id, digest, task_ids) VALUES (?, ?, ?)"
# Without RETURNING, which costs SQLite as much again as the insert: the fence is the
# cursor's lastrowid (as the op record's seq is, below).
INSERT_CLAIM = "INSERT INTO claims (token, task_seq, teammate, attempt, claim_ms) VALUES (?, ?, ?, ?, ?)"
DEPENDENCY_RESULTS = (
    "SELECT dep.id, CASE WHEN sum(coalesce(length(dep.result), 0)) OVER (ORDER BY d.position) <= ?"
    " THEN coalesce(dep.result, x'') END FROM deps AS d JOIN tasks AS dep ON dep.seq = d.dep_seq"
    " WHERE d.task_seq = ? ORDER BY d.position"
)
LIVE_CLAIM = (
    "SELECT t.seq, t.live_fence, t.lease_expire_ms, t.lease_ms, t.concurrency_key, t.attempt_deadline_ms,"
    " c.fence, c.task_seq, c.teammate, c.outcome, t.state, t.review_role"
    " FROM tasks AS t LEFT JOIN claims AS c ON c.token = ? WHERE t.id = ?"
)
PROGRESS_SENT = "UPDATE tasks SET progress_event_ms = ?, progress_unsent = 0 WHERE seq = ?"
HELD_CLAIMS_OF = (
    "SELECT t.seq, t.live_fence, t.id, c.token, t.concurrency_key FROM tasks AS t"
    f" JOIN claims AS c ON c.fence = t.live_fence WHERE t.owner = ? AND t.state IN {_HELD}"
)
LIVE_CLAIM_OF_TASK = (
    "SELECT t.seq, t.state, t.owner, t.live_fence, c.token, t.concurrency_key FROM tasks AS t"
    " LEFT JOIN claims AS c ON c.fence = t.live_fence WHERE t.id = ?"
)
# A claim given back: a work claim's task is PENDING again, a review's is IN_REVIEW
# (offered again); the role returned is the one that may take it now.
BACK_TO_PENDING = (
    f"UPDATE tasks SET state = CASE WHEN state = {_IN_REVIEW} THEN {_IN_REVIEW} ELSE {_PENDING} END, owner = '',"
    f" live_fence = NULL, lease_expire_ms = NULL WHERE seq = ?"
    f" RETURNING CASE WHEN state = {_IN_REVIEW} THEN review_role ELSE required_role END"
)
# A holder's question: its claim ended (ASKED), the task waits for the Lead's answer.
ASK_QUESTION = (
    f"UPDATE tasks SET state = {_NEEDS_INPUT}, owner = '', live_fence = NULL, lease_expire_ms = NULL, question = ?"
    " WHERE seq = ?"
)
QUESTIONS_ASKED = "SELECT count(*) FROM questions WHERE task_seq = ?"
INSERT_QUESTION = "INSERT INTO questions (task_seq, fence, asked_by, question, ask_ms) VALUES (?, ?, ?, ?, ?)"
QUESTION_OF_TASK = "SELECT seq, state, question FROM tasks WHERE id = ?"
ANSWER_QUESTION = "UPDATE questions SET answer = ?, answer_ms = ? WHERE task_seq = ? AND answer IS NULL"
# The answer puts the task back in line, ready (it held a claim, so no dependency or gate is unmet).
ANSWERED = f"UPDATE tasks SET state = {_PENDING}, question = '' WHERE seq = ? RETURNING required_role"
ANSWERS = "SELECT question, asked_by, ask_ms, answer, answer_ms FROM questions WHERE task_seq = ? ORDER BY seq"
BACK_TO_PENDING_GATED = (
    f"UPDATE tasks SET state = {_PENDING}, owner = '', live_fence = NULL, lease_expire_ms = NULL,"
    " ready_ms = ?, gate_shut = 1, unmet_deps = unmet_deps + 1 WHERE seq = ?"
)
COUNT_FAILURE = (
    "UPDATE tasks SET failures = failures + 1, error = ? WHERE seq = ?"
    " RETURNING failures, max_attempts, retry_backoff_ms, retry_backoff_max_ms"
)
FINISH = "UPDATE tasks SET state = ?, finish_ms = ?, live_fence = NULL, lease_expire_ms = NULL WHERE seq = ?"
CANCEL_TARGETS = (
    "SELECT t.id, t.seq, t.error, t.finish_ms FROM json_each(?) AS w"
    " JOIN tasks AS t ON t.seq = CAST(w.value AS BIGINT) ORDER BY w.key"
)
TASK_ID = "SELECT id FROM tasks WHERE seq = ?"
DEPENDENT_SEQS = "SELECT task_seq FROM deps WHERE dep_seq = ?"
DOOMED = (
    "WITH RECURSIVE doomed(seq) AS ("
    " SELECT t.seq FROM json_each(?) AS r JOIN tasks AS t ON t.seq = CAST(r.value AS BIGINT)"
    f" WHERE t.state IN {_UNFINISHED}"
    " UNION SELECT d.task_seq FROM doomed JOIN deps AS d ON d.dep_seq = doomed.seq"
    f" JOIN tasks AS t ON t.seq = d.task_seq WHERE t.state IN {_UNFINISHED})"
    " SELECT t.seq, t.live_fence, t.owner, t.id, c.token, t.concurrency_key FROM doomed"
    " JOIN tasks AS t ON t.seq = doomed.seq LEFT JOIN claims AS c ON c.fence = t.live_fence ORDER BY t.seq"
)
DOOMED_DEPENDENCIES = (
    "SELECT d.task_seq, d.dep_seq, p.id FROM json_each(?) AS w"
    " JOIN deps AS d ON d.task_seq = CAST(w.value AS BIGINT)"
    " JOIN tasks AS p ON p.seq = d.dep_seq ORDER BY d.task_seq, d.position"
)
END_DOOMED_CLAIM = "UPDATE claims SET outcome = ?, end_ms = ?, error = ? WHERE fence = ?"
FINISH_DOOMED = (
    "UPDATE tasks SET state = ?, finish_ms = ?, live_fence = NULL, lease_expire_ms = NULL, error = ?, question = ''"
    " WHERE seq = ?"
)
RETRY_TARGETS = (
    "WITH RECURSIVE down(seq) AS (SELECT CAST(value AS BIGINT) FROM json_each(?)"
    " UNION SELECT d.task_seq FROM down JOIN deps AS d ON d.dep_seq = down.seq"
    " JOIN tasks AS t ON t.seq = d.task_seq WHERE t.state = ? AND t.error != ? AND t.error NOT LIKE ?)"
    " SELECT down.seq, d.dep_seq, dep.state, dep.id FROM down LEFT JOIN deps AS d ON d.task_seq = down.seq"
    " LEFT JOIN tasks AS dep ON dep.seq = d.dep_seq ORDER BY down.seq, d.position"
)
REVIVED_GATE = "SELECT not_before_ms, required_role, undecided FROM tasks WHERE seq = ?"
# A proposal the Lead has not decided comes back PROPOSED (schema migration 22).
REVIVE = (
    f"UPDATE tasks SET state = CASE WHEN undecided = 1 THEN {_PROPOSED} ELSE {_PENDING} END, owner = '', error = '',"
    " result = NULL, finish_ms = NULL, live_fence = NULL, lease_expire_ms = NULL, unmet_deps = ?, gate_shut = ?,"
    # A retry skips what is left of a backoff: a gate still ahead is dropped.
    " ready_ms = CASE WHEN ? = 1 THEN ? WHEN ready_ms > ? THEN NULL ELSE ready_ms END,"
    " failures = CASE WHEN ? = 1 THEN 0 ELSE failures END,"
    " review_rounds = CASE WHEN ? = 1 THEN 0 ELSE review_rounds END WHERE seq = ?"
)
EXPIRED_LEASES = (
    f"SELECT e.*, (SELECT min(lease_expire_ms) FROM tasks INDEXED BY tasks_lease WHERE state IN {_HELD}"
    " AND lease_expire_ms > ?) FROM (SELECT 1) AS one LEFT JOIN (SELECT t.seq, t.live_fence, t.owner,"
    " t.attempt, t.lease_expire_ms, t.id, c.token, t.concurrency_key, t.state, t.attempt_deadline_ms IS NOT NULL"
    " AND t.lease_expire_ms >= t.attempt_deadline_ms, t.attempt_timeout_ms FROM tasks AS t JOIN claims AS c"
    f" ON c.fence = t.live_fence WHERE t.state IN {_HELD} AND t.lease_expire_ms <= ?) AS e ON 1 = 1"
    # Reclaimed, and their notices told, in the order the leases ended.
    " ORDER BY e.lease_expire_ms, e.seq"
)
NOTE_EXPIRY = "UPDATE teammates SET last_expiry_ms = max(last_expiry_ms, ?) WHERE name = ?"
NOTE_CLOCK = "UPDATE meta SET value = max(value, ?) WHERE key = 'clock_ms'"
EXTEND_LIVE_LEASES = (
    "UPDATE tasks SET lease_expire_ms ="
    " CASE WHEN attempt_deadline_ms < ? + lease_ms THEN attempt_deadline_ms ELSE ? + lease_ms END"
    f" WHERE state IN {_HELD} AND live_fence IS NOT NULL"
)

# ---------------------------------------------------------------- team
TEAMMATE_EXISTS = "SELECT 1 FROM teammates WHERE name = ?"
INSERT_TEAMMATE = (
    "INSERT INTO teammates (name, token_hash, roles, require_plan, status, created_ms) VALUES (?, ?, ?, ?, ?, ?)"
)
ROTATE_TEAMMATE_TOKEN = "UPDATE teammates SET token_hash = ? WHERE name = ? AND removed = 0"
SERVED_BY = "SELECT served_by FROM teammates WHERE name = ?"
HELD_TASK_IDS = f"SELECT id FROM tasks WHERE owner = ? AND state IN {_HELD} ORDER BY seq"
CREDENTIAL = "SELECT name FROM teammates WHERE token_hash = ? AND removed = 0"
REMOVE_TEAMMATE = "UPDATE teammates SET removed = 1, online = 0 WHERE name = ?"
ANSWER_SHUTDOWNS_OF = "UPDATE shutdowns SET answered = 1 WHERE teammate = ? AND answered = 0"
SET_ONLINE = (
    "UPDATE teammates SET online = ?, served_by = ?, stream_epoch = stream_epoch + ? WHERE name = ?"
    " RETURNING stream_epoch"
)

# ---------------------------------------------------------------- viewers
VIEWER_EXISTS = "SELECT 1 FROM viewers WHERE name = ?"
INSERT_VIEWER = "INSERT INTO viewers (name, token_hash, created_ms) VALUES (?, ?, ?)"
ROTATE_VIEWER_TOKEN = "UPDATE viewers SET token_hash = ? WHERE name = ?"
REMOVE_VIEWER = "DELETE FROM viewers WHERE name = ?"
VIEWER_CREDENTIAL = "SELECT name FROM viewers WHERE token_hash = ?"

# ---------------------------------------------------------------- overview
LAST_EVENT_SEQ = "SELECT coalesce(max(seq), 0) FROM events"
RECENT_CLAIMS = (
    "SELECT c.fence, t.id, c.teammate, c.attempt, c.claim_ms, c.end_ms, coalesce(c.outcome, '')"
    " FROM claims AS c JOIN tasks AS t ON t.seq = c.task_seq ORDER BY c.fence DESC LIMIT ?"
)
LAST_ACTIVITY = (
    "SELECT who, max(at) FROM ("
    " SELECT teammate AS who, CASE WHEN end_ms > claim_ms THEN end_ms ELSE claim_ms END AS at FROM claims"
    " UNION ALL SELECT owner, progress_ms FROM tasks WHERE owner != '' AND progress_ms IS NOT NULL"
    ") AS activity GROUP BY who"
)
OPEN_PLANS = (
    "SELECT plan_id, author, substr(body, 1, 16384), submit_ms FROM plans AS p WHERE approve IS NULL"
    " AND plan_id = (SELECT max(plan_id) FROM plans WHERE author = p.author) ORDER BY plan_id LIMIT ?"
)

# ---------------------------------------------------------------- inbox
SET_LAST_SEQ = "UPDATE teammates SET last_seq = ? WHERE name = ?"
INSERT_INBOX_ITEM = (
    "INSERT INTO inbox (recipient, seq, kind, send_ms, sender, body, ref, approve, deadline_ms)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INBOX_AFTER = (
    "SELECT seq, kind, send_ms, sender, body, ref, approve, deadline_ms FROM inbox"
    " WHERE recipient = ? AND seq > ? ORDER BY seq LIMIT ?"
)
ACK = "UPDATE teammates SET acked_seq = ? WHERE name = ?"

# ---------------------------------------------------------------- protocol
SUBMIT_PLAN = "INSERT INTO plans (author, body, submit_ms) VALUES (?, ?, ?) RETURNING plan_id"
PLAN = "SELECT author, approve FROM plans WHERE plan_id = ?"
DECIDE_PLAN = "UPDATE plans SET approve = ?, feedback = ?, decision_seq = ? WHERE plan_id = ?"
REQUEST_SHUTDOWN = (
    "INSERT INTO shutdowns (teammate, reason, request_ms, deadline_ms) VALUES (?, ?, ?, ?) RETURNING request_id"
)
SHUTDOWN_ANSWERED = "SELECT answered FROM shutdowns WHERE request_id = ? AND teammate = ?"
APPROVE_SHUTDOWNS = (
    "UPDATE shutdowns SET answered = 1, approve = 1, answer_reason = ? WHERE teammate = ? AND answered = 0"
)
REFUSE_SHUTDOWN = "UPDATE shutdowns SET answered = 1, approve = 0, answer_reason = ? WHERE request_id = ?"
EXPIRE_SHUTDOWNS = "SELECT DISTINCT teammate FROM shutdowns WHERE answered = 0 AND deadline_ms <= ?"

# ---------------------------------------------------------------- ops
STORE_OUTCOME = (
    "UPDATE session_ops SET value = ?, flag = ?, error_kind = ?, error_message = ?, error_metadata = ?,"
    " response = ? WHERE seq = ?"
)
RECORDED = (
    "SELECT digest, value, flag, error_kind, error_message, error_metadata, response FROM session_ops"
    " WHERE teammate = ? AND op_id = ?"
)
PRUNE_OPS_BEFORE = (
    "DELETE FROM session_ops WHERE seq < coalesce((SELECT seq FROM session_ops WHERE done_ms >= ?"
    " ORDER BY seq LIMIT 1), (SELECT max(seq) + 1 FROM session_ops))"
)
PRUNE_OPS_BEYOND = (
    "DELETE FROM session_ops WHERE teammate = ? AND seq <= (SELECT seq FROM session_ops WHERE teammate = ?"
    " ORDER BY seq DESC LIMIT 1 OFFSET ?)"
)


# ---------------------------------------------------------------- composed per call
P = "?"  # a parameter, for the statements built per call (a list of roles, a filter)


def marks(count: int) -> str:
    """`count` parameters, comma-separated (an IN list)."""
    return ",".join("?" * count)


def row_lock(mode: str = "UPDATE") -> str:
    """No locking clause: the board's one writer is alone."""
    return ""


# ---------------------------------------------------------------- events, as SQLite writes them
@functools.cache
def event_object(pairs: int) -> str:
    """An event whose data SQLite writes itself (json_object) from `pairs` key-value
    parameters: cheaper on the writer than json.dumps."""
    pairs_of = ", ".join("?, ?" for _ in range(pairs))
    return f"INSERT INTO events (time_ms, kind, data) VALUES (?, ?, json_object({pairs_of}))"


# ---------------------------------------------------------------- tasks
# A task's dependencies' ids, in spec order, joined by newlines (which ids cannot
# hold), for a query whose row is `tasks`.
DEPENDENCY_IDS = (
    "(SELECT group_concat(id, char(10)) FROM (SELECT dep.id FROM deps JOIN tasks AS dep ON dep.seq = deps.dep_seq"
    " WHERE deps.task_seq = tasks.seq ORDER BY deps.position) AS dep_ids)"
)
# A task's record in one statement, its dependencies' ids included: also in
# RETURNING, so a claim or a completion reads no second statement for them.
TASK_COLUMNS = (
    "seq, id, title, description, payload, priority, required_role, max_attempts, lease_ms,"
    " state, owner, attempt, result, error, create_ms, lease_expire_ms, finish_ms,"
    " not_before_ms, retry_backoff_ms, retry_backoff_max_ms, ready_ms,"
    " progress, progress_fraction, progress_ms, trace_parent, concurrency_key,"
    " input_tokens, output_tokens, cost_micros, model, attempt_timeout_ms, failures, question,"
    " review_role, review_max_rounds, review_rounds, proposed_by, discovered_from, resources, " + DEPENDENCY_IDS
)


def _event(kind: str) -> str:
    """The start of an INSERT of task events of `kind` (the mutable part of each task),
    built by SQL from the task's row: no Python round trip per event."""
    return (
        f"INSERT INTO events (time_ms, kind, data) SELECT ?, '{kind}', json_object('id', t.id, 'state', t.state,"
        " 'owner', t.owner, 'attempt', t.attempt, 'error', t.error, 'lease_expire_ms', t.lease_expire_ms,"
        " 'finish_ms', t.finish_ms, 'progress', t.progress, 'progress_fraction', t.progress_fraction,"
        " 'progress_ms', t.progress_ms, 'ready_ms', t.ready_ms, 'input_tokens', t.input_tokens,"
        " 'output_tokens', t.output_tokens, 'cost_micros', t.cost_micros, 'model', t.model,"
        " 'failures', t.failures, 'question', t.question, 'review_rounds', t.review_rounds) FROM "
    )


TASK_CHANGED = _event("task_changed") + "tasks AS t WHERE t.seq = ?"
TASKS_CHANGED = (
    _event("task_changed") + "json_each(?) AS w JOIN tasks AS t ON t.seq = CAST(w.value AS BIGINT) ORDER BY w.key"
)
TASK_PROGRESS = _event("task_progress") + "tasks AS t WHERE t.seq = ?"
TASK_BY_SEQ = f"SELECT {TASK_COLUMNS} FROM tasks WHERE seq = ?"
TASK_BY_ID = f"SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?"
TASKS_BY_SEQ = f"SELECT {TASK_COLUMNS} FROM tasks WHERE seq IN (SELECT CAST(value AS BIGINT) FROM json_each(?))"
_ATTEMPT_COLUMNS = "attempt, teammate, fence, claim_ms, end_ms, outcome, error, review_round, feedback"
TASK_ATTEMPTS = f"SELECT {_ATTEMPT_COLUMNS} FROM claims WHERE task_seq = ? ORDER BY fence DESC LIMIT ?"
PREVIOUS_ATTEMPT = (
    f"SELECT {_ATTEMPT_COLUMNS} FROM claims WHERE task_seq = ? AND fence < ? AND outcome IS NOT NULL"
    " ORDER BY fence DESC LIMIT 1"
)
# An upper bound on a task's size on the wire, read without loading its
# payload or result: SQLite answers length() of a blob from the record header.
# Text columns are measured in bytes (CAST AS BLOB); 320 bytes cover the tags,
# length prefixes, numbers, timestamps and durations, and 4 bytes each dependency's.
WIRE_BYTES = (
    "320 + length(CAST(tasks.id AS BLOB)) + length(CAST(tasks.title AS BLOB))"
    " + length(CAST(tasks.description AS BLOB)) + length(tasks.payload) + coalesce(length(tasks.result), 0)"
    " + length(CAST(tasks.error AS BLOB)) + length(CAST(tasks.owner AS BLOB))"
    " + length(CAST(tasks.required_role AS BLOB)) + length(CAST(tasks.progress AS BLOB))"
    " + length(CAST(tasks.trace_parent AS BLOB))"
    " + length(CAST(tasks.concurrency_key AS BLOB))"
    " + length(CAST(tasks.model AS BLOB)) + length(CAST(tasks.question AS BLOB))"
    " + coalesce(length(CAST(tasks.review_role AS BLOB)), 0)"
    " + length(CAST(tasks.proposed_by AS BLOB)) + length(CAST(tasks.discovered_from AS BLOB))"
    " + (SELECT coalesce(sum(length(CAST(dep.id AS BLOB)) + 4), 0)"
    " FROM deps d JOIN tasks dep ON dep.seq = d.dep_seq WHERE d.task_seq = tasks.seq)"
)
WIRE_BYTES_BY_ID = f"SELECT tasks.id, {WIRE_BYTES} FROM json_each(?) AS wanted JOIN tasks ON tasks.id = wanted.value"
ROWS_BY_ID = (
    "SELECT t.id, t.seq, t.spec_digest, t.state, t.create_ms, t.finish_ms, t.max_attempts, t.lease_ms"
    " FROM json_each(?) AS wanted JOIN tasks AS t ON t.id = wanted.value"
)
# The trace contexts stored with the tasks among the ids that have one: an earlier
# version counted it in the spec's digest (store/tasks/create.py, `changed_specs`).
TRACE_PARENTS_BY_ID = (
    "SELECT t.id, t.trace_parent FROM json_each(?) AS wanted JOIN tasks AS t ON t.id = wanted.value"
    " WHERE t.trace_parent <> ''"
)
# Claiming the first ready task: the task's new state, from the row as it was (the
# lease never outlives the attempt: its end is where the time limit bites, and
# the progress notes belonged to the previous attempt). Parameters: the owner,
# the claim's fence, now (four times).
CLAIMED_SET = (
    f"state = {_IN_PROGRESS}, owner = ?, attempt = failures + 1, live_fence = ?,"
    " lease_expire_ms = CASE WHEN attempt_timeout_ms < lease_ms THEN ? + attempt_timeout_ms ELSE ? + lease_ms END,"
    " progress = '', progress_fraction = NULL, progress_ms = NULL, progress_unsent = 0,"
    " attempt_deadline_ms = ? + attempt_timeout_ms"
)
CLAIM_TASK = (
    f"UPDATE tasks SET {CLAIMED_SET} WHERE seq = ? AND state = {_PENDING} AND unmet_deps = 0 RETURNING {TASK_COLUMNS}"
)
ANY_LEASE_ENDED = f"SELECT 1 FROM tasks INDEXED BY tasks_lease WHERE state IN {_HELD} AND lease_expire_ms <= ? LIMIT 1"
ANY_GATE_DUE = "SELECT 1 FROM tasks INDEXED BY tasks_gate WHERE gate_shut = 1 AND ready_ms <= ? LIMIT 1"
HELD_CLAIMS = (
    "SELECT t.seq, c.token, t.lease_expire_ms, c.attempt, c.fence FROM tasks t JOIN claims c"
    f" ON c.fence = t.live_fence WHERE t.owner = ? AND t.state IN {_HELD} AND t.lease_expire_ms > ?"
    " ORDER BY c.fence"
)
END_CLAIM = "UPDATE claims SET outcome = ?, end_ms = ?, error = ? WHERE fence = ?"
# A claim's end by itself, saying whether its task has resources: only then did the claim
# hold any (store/leases.py), so only then is a statement run to free them.
END_CLAIM_LEASED = END_CLAIM + " RETURNING (SELECT t.resources != '' FROM tasks AS t WHERE t.seq = claims.task_seq)"
# A renewal's lease, never past the attempt's time limit (parameter: the new end, twice).
_RENEWED = "lease_expire_ms = CASE WHEN attempt_deadline_ms < ? THEN attempt_deadline_ms ELSE ? END"


@functools.cache
def renew_lease(sums: str) -> str:
    """A renewal without progress, adding a usage report's `sums` (`USAGE_SUMS` or '');
    it returns whether a progress event is due, and the new lease end."""
    return (
        f"UPDATE tasks SET {_RENEWED}{sums} WHERE seq = ?"
        " RETURNING progress_unsent = 1 AND ? - progress_event_ms >= ?, lease_expire_ms"
    )


@functools.cache
def renew_with_progress(sums: str) -> str:
    """A renewal storing progress: SET reads the row as it was, so both CASEs ask whether
    the last event is old enough, and the one UPDATE marks the event sent when it is due."""
    due = "progress_event_ms IS NULL OR ? - progress_event_ms >= ?"
    return (
        f"UPDATE tasks SET {_RENEWED}, progress = ?, progress_fraction = ?, progress_ms = ?{sums},"
        f" progress_unsent = CASE WHEN {due} THEN 0 ELSE 1 END,"
        f" progress_event_ms = CASE WHEN {due} THEN ? ELSE progress_event_ms END"
        " WHERE seq = ? RETURNING progress_unsent = 0, lease_expire_ms"
    )


@functools.cache
def complete_task(sums: str) -> str:
    """A task completed: its result and finish, a usage report's `sums` added. It returns
    the task's row and, after it, whether any task depends on it: most tasks are leaves,
    and a leaf's completion then runs no FREE_DEPENDENTS."""
    return (
        f"UPDATE tasks SET state = {_COMPLETED}, result = ?, finish_ms = ?, live_fence = NULL, lease_expire_ms = NULL"
        f"{sums} WHERE seq = ? RETURNING {TASK_COLUMNS}, EXISTS (SELECT 1 FROM deps WHERE deps.dep_seq = tasks.seq)"
    )


FREE_DEPENDENTS = (
    "UPDATE tasks SET unmet_deps = unmet_deps - 1 FROM deps WHERE deps.dep_seq = ? AND tasks.seq = deps.task_seq"
    " RETURNING tasks.seq, required_role, unmet_deps, state"
)
OPEN_GATES = (
    "UPDATE tasks SET gate_shut = 0, unmet_deps = unmet_deps - 1 WHERE gate_shut = 1 AND ready_ms <= ?"
    " RETURNING seq, required_role, unmet_deps, state"
)
EARLIEST_GATE = "SELECT min(ready_ms) FROM tasks INDEXED BY tasks_gate WHERE gate_shut = 1"


# ---------------------------------------------------------------- team
# What the delivery decision needs of a teammate, over `teammates AS t`.
VIEW_FOR_DELIVERY = (
    "SELECT roles, require_plan, removed, acked_seq, last_seq, last_expiry_ms,"
    " EXISTS (SELECT 1 FROM shutdowns WHERE teammate = t.name AND answered = 0),"
    f" {GATE_CLOSED}, stream_epoch FROM teammates AS t WHERE name = ?"
)
TEAMMATE_ROW = "SELECT roles, require_plan, removed, online, status, acked_seq, last_seq FROM teammates WHERE name = ?"
TEAMMATES_AFTER = "SELECT rowid, name FROM teammates WHERE rowid > ? ORDER BY rowid"
TEAMMATES_AFTER_LIMIT = "SELECT rowid, name FROM teammates WHERE rowid > ? ORDER BY rowid LIMIT ?"


# ---------------------------------------------------------------- status
STATUS = (
    "SELECT removed, online, require_plan, acked_seq, status,"
    " EXISTS (SELECT 1 FROM shutdowns WHERE teammate = :name AND answered = 0),"
    f" EXISTS (SELECT 1 FROM tasks WHERE owner = :name AND state IN {_HELD})"
    " FROM teammates WHERE name = :name"
)


# ---------------------------------------------------------------- inbox
_EVERYONE_ELSE = "removed = 0 AND name != ?"
BROADCAST_FULL = (
    f"SELECT name FROM teammates WHERE {_EVERYONE_ELSE} AND last_seq - acked_seq >= ? ORDER BY name LIMIT 1"
)
BROADCAST_COUNT = f"UPDATE teammates SET last_seq = last_seq + 1 WHERE {_EVERYONE_ELSE} RETURNING name"
BROADCAST_INSERT = (
    "INSERT INTO inbox (recipient, seq, kind, send_ms, sender, body)"
    f" SELECT name, last_seq, 'message', ?, ?, ? FROM teammates WHERE {_EVERYONE_ELSE}"
)


# ---------------------------------------------------------------- overview
# A task as the board draws it: no description, payload or result (the detail has them).
_ROW = (
    "seq, id, title, state, owner, attempt, max_attempts, priority, required_role, unmet_deps,"
    " lease_expire_ms, finish_ms, ready_ms, create_ms, substr(error, 1, 1024), progress, progress_fraction, "
    + DEPENDENCY_IDS
)
TASK_ROWS = f"SELECT {_ROW} FROM tasks WHERE seq > ? ORDER BY seq LIMIT ?"
FRONTIER_ROWS = (
    f"SELECT {_ROW} FROM tasks WHERE seq IN ("
    " SELECT seq FROM tasks WHERE state NOT IN (?, ?, ?)"
    " UNION SELECT deps.dep_seq FROM deps JOIN tasks AS open ON open.seq = deps.task_seq"
    "  WHERE open.state NOT IN (?, ?, ?)"
    ") ORDER BY seq LIMIT ?"
)
PROBLEM_ROWS = f"SELECT {_ROW} FROM tasks WHERE state IN (?, ?) ORDER BY finish_ms DESC, seq DESC LIMIT ?"


# ---------------------------------------------------------------- ops
RECORD_OP = "INSERT INTO session_ops (teammate, op_id, digest, done_ms) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING"


# ---------------------------------------------------------------- reviews
# The first review this teammate may take: its role, not its own result, in board order.
# A teammate that released this round's review ("not mine") is not offered it again.
REVIEW_READY = (
    f"SELECT seq, attempt, author, review_rounds FROM tasks WHERE state = {_IN_REVIEW} AND live_fence IS NULL"
    " AND review_role IN ({roles}) AND author != ?{full_keys} AND NOT EXISTS (SELECT 1 FROM claims AS p"
    " WHERE p.task_seq = tasks.seq AND p.teammate = ? AND p.review_round = tasks.review_rounds + 1"
    " AND p.outcome = 'released') ORDER BY priority DESC, seq LIMIT 1"
)
INSERT_REVIEW_CLAIM = (
    "INSERT INTO claims (token, task_seq, teammate, attempt, claim_ms, review_round) VALUES (?, ?, ?, ?, ?, ?)"
    " RETURNING fence"
)
CLAIM_REVIEW = (
    f"UPDATE tasks SET owner = ?, live_fence = ?, lease_expire_ms = ? + lease_ms, attempt_deadline_ms = NULL"
    f" WHERE seq = ? AND state = {_IN_REVIEW} AND live_fence IS NULL RETURNING {TASK_COLUMNS}"
)
REVIEW_OF_TASK = "SELECT author, review_rounds, rejected_result FROM tasks WHERE seq = ?"


# A work claim's completion of a task that needs a review: the result waits IN_REVIEW
# (`sums`: a usage report's, as complete_task's).
@functools.cache
def submit_for_review(sums: str) -> str:
    return (
        f"UPDATE tasks SET state = {_IN_REVIEW}, result = ?, author = ?, owner = '', live_fence = NULL,"
        f" lease_expire_ms = NULL, attempt_deadline_ms = NULL{sums} WHERE seq = ?"
        f" RETURNING review_role, {TASK_COLUMNS}"
    )


REVIEW_STATE = "SELECT seq, state, live_fence, review_rounds, attempt, concurrency_key FROM tasks WHERE id = ?"
REVIEW_POLICY = "SELECT id, review_rounds, review_max_rounds, author FROM tasks WHERE seq = ?"
REVIEW_HOLDER = "SELECT teammate, token FROM claims WHERE fence = ?"
END_REVIEW_CLAIM = "UPDATE claims SET outcome = ?, end_ms = ?, feedback = ? WHERE fence = ?"
LEAD_REVIEW = (
    "INSERT INTO claims (token, task_seq, teammate, attempt, claim_ms, review_round, end_ms, outcome, feedback)"
    " VALUES (?, ?, 'lead', ?, ?, ?, ?, ?, ?)"
)
APPROVE = (
    f"UPDATE tasks SET state = {_COMPLETED}, owner = author, finish_ms = ?, live_fence = NULL, lease_expire_ms = NULL"
    f" WHERE seq = ? RETURNING {TASK_COLUMNS}"
)
REJECT = (
    f"UPDATE tasks SET state = {_PENDING}, owner = '', live_fence = NULL, lease_expire_ms = NULL, review_rounds = ?,"
    " rejected_result = result, result = NULL WHERE seq = ? RETURNING required_role"
)
REJECT_FINALLY = (
    "UPDATE tasks SET state = ?, owner = '', live_fence = NULL, lease_expire_ms = NULL, review_rounds = ?,"
    " finish_ms = ?, error = ? WHERE seq = ?"
)
