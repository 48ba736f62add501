"""The store's statements in PostgreSQL's dialect, by name: the same names as
`store/sqlite/queries.py`, with psycopg's `%s` (or `%(name)s`) parameters.

A JSON list read as a table is `json_array_elements_text(...) WITH ORDINALITY`,
a blob literal is `'\\x...'::bytea`, and the planner picks its own indexes (no
`INDEXED BY`). A literal % is written `%%`: every statement is sent with
parameters.
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
EMIT = "INSERT INTO events (time_ms, kind, data) VALUES (%s, %s, %s)"
READ_EVENTS = "SELECT seq, time_ms, kind, data FROM events WHERE seq > %s ORDER BY seq LIMIT %s"

# ---------------------------------------------------------------- gates
PLAN_APPROVED = "SELECT approve, decision_seq FROM plans WHERE author = %s ORDER BY plan_id DESC LIMIT 1"
PROTOCOL_PENDING = (
    "SELECT EXISTS (SELECT 1 FROM inbox               WHERE recipient = t.name AND seq > t.acked_seq AND "
    "kind != 'message') OR EXISTS (SELECT 1 FROM shutdowns WHERE teammate = t.name AND answered = 0) "
    "FROM teammates AS t WHERE t.name = %s"
)
PROTOCOL_UNACKED = "SELECT 1 FROM inbox WHERE recipient = %s AND seq > %s AND kind != 'message' LIMIT 1"

# ---------------------------------------------------------------- status
SET_WAITING = "UPDATE teammates SET status = %s WHERE name = %s AND status = %s"
MARK_BUSY = f"UPDATE teammates SET status = {_BUSY} WHERE name = %s AND status != {_BUSY}"
STORE_STATUS = "UPDATE teammates SET status = %s WHERE name = %s"

# ---------------------------------------------------------------- claim_ends
ENDED_CLAIMS = (
    "SELECT c.token, t.id, c.outcome, c.error, c.teammate, m.removed FROM "
    "json_array_elements_text(%s::json) WITH ORDINALITY AS w(value, key) JOIN claims AS c ON c.token = "
    "w.value JOIN tasks AS t ON t.seq = c.task_seq JOIN teammates AS m ON m.name = c.teammate WHERE "
    "c.outcome IS NOT NULL ORDER BY c.fence"
)
REMOVED_AMONG = (
    "SELECT m.name FROM json_array_elements_text(%s::json) WITH ORDINALITY AS w(value, key) JOIN "
    "teammates AS m ON m.name = w.value WHERE m.removed = 1"
)

# ---------------------------------------------------------------- keys
TAKEN = "UPDATE concurrency_keys SET in_progress = in_progress + 1 WHERE key = %s"
FREED = (
    "UPDATE concurrency_keys SET in_progress = in_progress - 1 WHERE key = %s RETURNING in_progress, max_in_progress"
)
WAKE_FOR_KEY = (
    "SELECT DISTINCT required_role FROM tasks WHERE concurrency_key = %s AND concurrency_key != '' AND "
    f"state = {_PENDING} AND unmet_deps = 0"
)
FULL_AMONG = (
    "SELECT key FROM concurrency_keys WHERE key IN (SELECT value FROM json_array_elements_text(%s::json) "
    "AS listed(value)) AND in_progress >= max_in_progress"
)
IN_PROGRESS = (
    f"SELECT count(*) FROM tasks WHERE concurrency_key = %s AND concurrency_key != '' AND state IN {_HELD}"
    " AND live_fence IS NOT NULL"
)
DROP_LIMIT = "DELETE FROM concurrency_keys WHERE key = %s"
SET_LIMIT = (
    "INSERT INTO concurrency_keys (key, max_in_progress, in_progress) VALUES (%s, %s, %s) ON CONFLICT "
    "(key) DO UPDATE SET max_in_progress = excluded.max_in_progress, in_progress = excluded.in_progress"
)

# ---------------------------------------------------------------- tasks
UNMET_DEPENDENCIES = (
    "SELECT d.task_seq, dep.id FROM json_array_elements_text(%s::json) WITH ORDINALITY AS w(value, key) "
    "JOIN deps AS d ON d.task_seq = CAST(w.value AS BIGINT) JOIN tasks AS dep ON dep.seq = d.dep_seq "
    f"WHERE dep.state != {_COMPLETED} ORDER BY d.task_seq, d.position"
)
SHUT_GATES = (
    "SELECT t.seq, t.ready_ms FROM json_array_elements_text(%s::json) WITH ORDINALITY AS w(value, key) "
    "JOIN tasks AS t ON t.seq = CAST(w.value AS BIGINT) WHERE t.gate_shut = 1"
)
EARLIEST_LEASE = f"SELECT min(lease_expire_ms) FROM tasks WHERE state IN {_HELD}"
EARLIEST_GRACE = "SELECT min(deadline_ms) FROM shutdowns WHERE answered = 0"
CREATE_REQUEST = "SELECT digest, task_ids FROM create_requests WHERE request_id = %s"
INSERT_CREATE_REQUEST = "INSERT INTO create_requests (request_id, digest, task_ids) VALUES (%s, %s, %s)"
INSERT_CLAIM = (
    "INSERT INTO claims (token, task_seq, teammate, attempt, claim_ms) VALUES (%s, %s, %s, %s, %s) RETURNING fence"
)
DEPENDENCY_RESULTS = (
    "SELECT dep.id, CASE WHEN sum(coalesce(length(dep.result), 0)) OVER (ORDER BY d.position) <= %s THEN "
    "coalesce(dep.result, '\\x'::bytea) END FROM deps AS d JOIN tasks AS dep ON dep.seq = d.dep_seq WHERE "
    "d.task_seq = %s ORDER BY d.position"
)
LIVE_CLAIM = (
    "SELECT t.seq, t.live_fence, t.lease_expire_ms, t.lease_ms, t.concurrency_key, "
    "t.attempt_deadline_ms, c.fence, c.task_seq, c.teammate, c.outcome, t.state, t.review_role FROM tasks AS t"
    " LEFT JOIN claims "
    "AS c ON c.token = %s WHERE t.id = %s"
)
PROGRESS_SENT = "UPDATE tasks SET progress_event_ms = %s, progress_unsent = 0 WHERE seq = %s"
HELD_CLAIMS_OF = (
    "SELECT t.seq, t.live_fence, t.id, c.token, t.concurrency_key FROM tasks AS t JOIN claims AS c ON "
    f"c.fence = t.live_fence WHERE t.owner = %s AND t.state IN {_HELD}"
)
LIVE_CLAIM_OF_TASK = (
    "SELECT t.seq, t.state, t.owner, t.live_fence, c.token, t.concurrency_key FROM tasks AS t LEFT JOIN "
    "claims AS c ON c.fence = t.live_fence WHERE t.id = %s"
)
# A claim given back: a work claim's task is PENDING again, a review's is IN_REVIEW
# (offered again); the role returned is the one that may take it now.
BACK_TO_PENDING = (
    f"UPDATE tasks SET state = CASE WHEN state = {_IN_REVIEW} THEN {_IN_REVIEW} ELSE {_PENDING} END, owner = '',"
    f" live_fence = NULL, lease_expire_ms = NULL WHERE seq = %s"
    f" RETURNING CASE WHEN state = {_IN_REVIEW} THEN review_role ELSE required_role END"
)
# A holder's question: its claim ended (ASKED), the task waits for the Lead's answer.
ASK_QUESTION = (
    f"UPDATE tasks SET state = {_NEEDS_INPUT}, owner = '', live_fence = NULL, lease_expire_ms = NULL, question = %s"
    " WHERE seq = %s"
)
QUESTIONS_ASKED = "SELECT count(*) FROM questions WHERE task_seq = %s"
INSERT_QUESTION = "INSERT INTO questions (task_seq, fence, asked_by, question, ask_ms) VALUES (%s, %s, %s, %s, %s)"
QUESTION_OF_TASK = "SELECT seq, state, question FROM tasks WHERE id = %s"
ANSWER_QUESTION = "UPDATE questions SET answer = %s, answer_ms = %s WHERE task_seq = %s AND answer IS NULL"
# The answer puts the task back in line, ready (it held a claim, so no dependency or gate is unmet).
ANSWERED = f"UPDATE tasks SET state = {_PENDING}, question = '' WHERE seq = %s RETURNING required_role"
ANSWERS = "SELECT question, asked_by, ask_ms, answer, answer_ms FROM questions WHERE task_seq = %s ORDER BY seq"
BACK_TO_PENDING_GATED = (
    f"UPDATE tasks SET state = {_PENDING}, owner = '', live_fence = NULL, lease_expire_ms = NULL, ready_ms = %s, "
    "gate_shut = 1, unmet_deps = unmet_deps + 1 WHERE seq = %s"
)
COUNT_FAILURE = (
    "UPDATE tasks SET failures = failures + 1, error = %s WHERE seq = %s RETURNING failures, "
    "max_attempts, retry_backoff_ms, retry_backoff_max_ms"
)
FINISH = "UPDATE tasks SET state = %s, finish_ms = %s, live_fence = NULL, lease_expire_ms = NULL WHERE seq = %s"
CANCEL_TARGETS = (
    "SELECT t.id, t.seq, t.error, t.finish_ms FROM json_array_elements_text(%s::json) WITH ORDINALITY AS "
    "w(value, key) JOIN tasks AS t ON t.seq = CAST(w.value AS BIGINT) ORDER BY w.key"
)
TASK_ID = "SELECT id FROM tasks WHERE seq = %s"
DEPENDENT_SEQS = "SELECT task_seq FROM deps WHERE dep_seq = %s"
DOOMED = (
    "WITH RECURSIVE doomed(seq) AS ( SELECT t.seq FROM json_array_elements_text(%s::json) WITH "
    "ORDINALITY AS r(value, key) JOIN tasks AS t ON t.seq = CAST(r.value AS BIGINT) WHERE t.state IN "
    f"{_UNFINISHED} UNION SELECT d.task_seq FROM doomed JOIN deps AS d ON d.dep_seq = doomed.seq JOIN tasks AS "
    f"t ON t.seq = d.task_seq WHERE t.state IN {_UNFINISHED}) SELECT t.seq, t.live_fence, t.owner, t.id, "
    "c.token, t.concurrency_key FROM doomed JOIN tasks AS t ON t.seq = doomed.seq LEFT JOIN claims AS c "
    "ON c.fence = t.live_fence ORDER BY t.seq"
)
DOOMED_DEPENDENCIES = (
    "SELECT d.task_seq, d.dep_seq, p.id FROM json_array_elements_text(%s::json) WITH ORDINALITY AS "
    "w(value, key) JOIN deps AS d ON d.task_seq = CAST(w.value AS BIGINT) JOIN tasks AS p ON p.seq = "
    "d.dep_seq ORDER BY d.task_seq, d.position"
)
END_DOOMED_CLAIM = "UPDATE claims SET outcome = %s, end_ms = %s, error = %s WHERE fence = %s"
FINISH_DOOMED = (
    "UPDATE tasks SET state = %s, finish_ms = %s, live_fence = NULL, lease_expire_ms = NULL, error = %s, question = ''"
    " WHERE seq = %s"
)
RETRY_TARGETS = (
    "WITH RECURSIVE down(seq) AS (SELECT CAST(value AS BIGINT) FROM json_array_elements_text(%s::json) "
    "AS listed(value) UNION SELECT d.task_seq FROM down JOIN deps AS d ON "
    "d.dep_seq = down.seq JOIN tasks AS t ON t.seq = d.task_seq"
    " WHERE t.state = %s AND t.error != %s AND t.error NOT LIKE %s) "
    "SELECT down.seq, d.dep_seq, dep.state, dep.id FROM down LEFT JOIN deps AS d ON d.task_seq = "
    "down.seq LEFT JOIN tasks AS dep ON dep.seq = d.dep_seq ORDER BY down.seq, d.position"
)
REVIVED_GATE = "SELECT not_before_ms, required_role, undecided FROM tasks WHERE seq = %s"
REVIVE = (
    # A proposal the Lead has not decided comes back PROPOSED (sqlite/schema.py's migration 22).
    f"UPDATE tasks SET state = CASE WHEN undecided = 1 THEN {_PROPOSED} ELSE {_PENDING} END, owner = '', error = '',"
    " result = NULL, finish_ms = NULL, live_fence = NULL, lease_expire_ms = NULL, unmet_deps = %s, gate_shut = %s,"
    " ready_ms = CASE WHEN %s = 1 THEN %s "
    "WHEN ready_ms > %s THEN NULL ELSE ready_ms END, failures = CASE WHEN %s = 1 THEN 0 ELSE failures "
    "END, review_rounds = CASE WHEN %s = 1 THEN 0 ELSE review_rounds END WHERE seq = %s"
)
EXPIRED_LEASES = (
    f"SELECT e.*, (SELECT min(lease_expire_ms) FROM tasks WHERE state IN {_HELD} AND lease_expire_ms > %s) FROM "
    "(SELECT 1) AS one LEFT JOIN (SELECT t.seq, t.live_fence, t.owner, t.attempt, t.lease_expire_ms, "
    "t.id, c.token, t.concurrency_key, t.state, t.attempt_deadline_ms IS NOT NULL AND t.lease_expire_ms >= "
    "t.attempt_deadline_ms, t.attempt_timeout_ms FROM tasks AS t JOIN claims AS c ON c.fence = "
    f"t.live_fence WHERE t.state IN {_HELD} AND t.lease_expire_ms <= %s) AS e ON 1 = 1"
    # Reclaimed, and their notices told, in the order the leases ended.
    " ORDER BY e.lease_expire_ms, e.seq"
)
NOTE_EXPIRY = "UPDATE teammates SET last_expiry_ms = GREATEST(last_expiry_ms, %s) WHERE name = %s"
NOTE_CLOCK = "UPDATE meta SET value = GREATEST(value, %s) WHERE key = 'clock_ms'"
EXTEND_LIVE_LEASES = (
    "UPDATE tasks SET lease_expire_ms = CASE WHEN attempt_deadline_ms < %s + lease_ms THEN "
    f"attempt_deadline_ms ELSE %s + lease_ms END WHERE state IN {_HELD} AND live_fence IS NOT NULL"
)

# ---------------------------------------------------------------- team
TEAMMATE_EXISTS = "SELECT 1 FROM teammates WHERE name = %s"
INSERT_TEAMMATE = (
    "INSERT INTO teammates (name, token_hash, roles, require_plan, status, created_ms) VALUES (%s, %s, %s, %s, %s, %s)"
)
ROTATE_TEAMMATE_TOKEN = "UPDATE teammates SET token_hash = %s WHERE name = %s AND removed = 0"
SERVED_BY = "SELECT served_by FROM teammates WHERE name = %s"
HELD_TASK_IDS = f"SELECT id FROM tasks WHERE owner = %s AND state IN {_HELD} ORDER BY seq"
CREDENTIAL = "SELECT name FROM teammates WHERE token_hash = %s AND removed = 0"
REMOVE_TEAMMATE = "UPDATE teammates SET removed = 1, online = 0 WHERE name = %s"
ANSWER_SHUTDOWNS_OF = "UPDATE shutdowns SET answered = 1 WHERE teammate = %s AND answered = 0"
SET_ONLINE = (
    "UPDATE teammates SET online = %s, served_by = %s, stream_epoch = stream_epoch + %s WHERE name = %s "
    "RETURNING stream_epoch"
)

# ---------------------------------------------------------------- viewers
VIEWER_EXISTS = "SELECT 1 FROM viewers WHERE name = %s"
INSERT_VIEWER = "INSERT INTO viewers (name, token_hash, created_ms) VALUES (%s, %s, %s)"
ROTATE_VIEWER_TOKEN = "UPDATE viewers SET token_hash = %s WHERE name = %s"
REMOVE_VIEWER = "DELETE FROM viewers WHERE name = %s"
VIEWER_CREDENTIAL = "SELECT name FROM viewers WHERE token_hash = %s"

# ---------------------------------------------------------------- overview
LAST_EVENT_SEQ = "SELECT coalesce(max(seq), 0) FROM events"
RECENT_CLAIMS = (
    "SELECT c.fence, t.id, c.teammate, c.attempt, c.claim_ms, c.end_ms, coalesce(c.outcome, '') FROM "
    "claims AS c JOIN tasks AS t ON t.seq = c.task_seq ORDER BY c.fence DESC LIMIT %s"
)
LAST_ACTIVITY = (
    "SELECT who, max(at) FROM ( SELECT teammate AS who, CASE WHEN end_ms > claim_ms THEN end_ms ELSE "
    "claim_ms END AS at FROM claims UNION ALL SELECT owner, progress_ms FROM tasks WHERE owner != '' AND "
    "progress_ms IS NOT NULL) AS activity GROUP BY who"
)
OPEN_PLANS = (
    "SELECT plan_id, author, substr(body, 1, 16384), submit_ms FROM plans AS p WHERE approve IS NULL AND "
    "plan_id = (SELECT max(plan_id) FROM plans WHERE author = p.author) ORDER BY plan_id LIMIT %s"
)

# ---------------------------------------------------------------- inbox
SET_LAST_SEQ = "UPDATE teammates SET last_seq = %s WHERE name = %s"
INSERT_INBOX_ITEM = (
    "INSERT INTO inbox (recipient, seq, kind, send_ms, sender, body, ref, approve, deadline_ms) VALUES "
    "(%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
INBOX_AFTER = (
    "SELECT seq, kind, send_ms, sender, body, ref, approve, deadline_ms FROM inbox WHERE recipient = %s "
    "AND seq > %s ORDER BY seq LIMIT %s"
)
ACK = "UPDATE teammates SET acked_seq = %s WHERE name = %s"

# ---------------------------------------------------------------- protocol
SUBMIT_PLAN = "INSERT INTO plans (author, body, submit_ms) VALUES (%s, %s, %s) RETURNING plan_id"
PLAN = "SELECT author, approve FROM plans WHERE plan_id = %s"
DECIDE_PLAN = "UPDATE plans SET approve = %s, feedback = %s, decision_seq = %s WHERE plan_id = %s"
REQUEST_SHUTDOWN = (
    "INSERT INTO shutdowns (teammate, reason, request_ms, deadline_ms) VALUES (%s, %s, %s, %s) RETURNING request_id"
)
SHUTDOWN_ANSWERED = "SELECT answered FROM shutdowns WHERE request_id = %s AND teammate = %s"
APPROVE_SHUTDOWNS = (
    "UPDATE shutdowns SET answered = 1, approve = 1, answer_reason = %s WHERE teammate = %s AND answered = 0"
)
REFUSE_SHUTDOWN = "UPDATE shutdowns SET answered = 1, approve = 0, answer_reason = %s WHERE request_id = %s"
EXPIRE_SHUTDOWNS = "SELECT DISTINCT teammate FROM shutdowns WHERE answered = 0 AND deadline_ms <= %s"

# ---------------------------------------------------------------- ops
STORE_OUTCOME = (
    "UPDATE session_ops SET value = %s, flag = %s, error_kind = %s, error_message = %s, error_metadata = "
    "%s, response = %s WHERE seq = %s"
)
RECORDED = (
    "SELECT digest, value, flag, error_kind, error_message, error_metadata, response FROM session_ops "
    "WHERE teammate = %s AND op_id = %s"
)
PRUNE_OPS_BEFORE = (
    "DELETE FROM session_ops WHERE seq < coalesce((SELECT seq FROM session_ops WHERE done_ms >= %s ORDER "
    "BY seq LIMIT 1), (SELECT max(seq) + 1 FROM session_ops))"
)
PRUNE_OPS_BEYOND = (
    "DELETE FROM session_ops WHERE teammate = %s AND seq <= (SELECT seq FROM session_ops WHERE teammate "
    "= %s ORDER BY seq DESC LIMIT 1 OFFSET %s)"
)


# ---------------------------------------------------------------- composed per call
P = "%s"  # a parameter, for the statements built per call (a list of roles, a filter)


def marks(count: int) -> str:
    """`count` parameters, comma-separated (an IN list)."""
    return ",".join(["%s"] * count)


def row_lock(mode: str = "UPDATE") -> str:
    """A locking clause for a SELECT of the rows a transaction is about to act on (`FOR
    UPDATE`, `FOR SHARE`): other daemons' writers may run at once. The locks follow the
    ordering rules of docs/postgres.md: a teammate's row before task rows, task rows by seq."""
    return f" FOR {mode}"


# ---------------------------------------------------------------- events
@functools.cache
def event_object(pairs: int) -> None:
    """None: json_build_object cannot tell the type of a bare parameter, so an event's
    data is sent as JSON text (`EMIT`)."""
    return None


# ---------------------------------------------------------------- tasks
# A task's dependencies' ids, in spec order, joined by newlines (which ids cannot
# hold), for a query whose row is `tasks`.
DEPENDENCY_IDS = (
    "(SELECT string_agg(dep.id, chr(10) ORDER BY deps.position) FROM deps"
    " JOIN tasks AS dep ON dep.seq = deps.dep_seq WHERE deps.task_seq = tasks.seq)"
)
TASK_COLUMNS = (
    "seq, id, title, description, payload, priority, required_role, max_attempts, lease_ms,"
    " state, owner, attempt, result, error, create_ms, lease_expire_ms, finish_ms,"
    " not_before_ms, retry_backoff_ms, retry_backoff_max_ms, ready_ms,"
    " progress, progress_fraction, progress_ms, trace_parent, concurrency_key,"
    " input_tokens, output_tokens, cost_micros, model, attempt_timeout_ms, failures, question,"
    " review_role, review_max_rounds, review_rounds, proposed_by, discovered_from, resources, " + DEPENDENCY_IDS
)


def event_insert(kind: str, now: str = "%s") -> str:
    """The start of an INSERT of task events of `kind` (the mutable part of each task),
    built by SQL from the task's row: no Python round trip per event."""
    return (
        f"INSERT INTO events (time_ms, kind, data) SELECT {now}, '{kind}', json_build_object('id', t.id,"
        " 'state', t.state, 'owner', t.owner, 'attempt', t.attempt, 'error', t.error,"
        " 'lease_expire_ms', t.lease_expire_ms, 'finish_ms', t.finish_ms, 'progress', t.progress,"
        " 'progress_fraction', t.progress_fraction, 'progress_ms', t.progress_ms, 'ready_ms', t.ready_ms,"
        " 'input_tokens', t.input_tokens, 'output_tokens', t.output_tokens, 'cost_micros', t.cost_micros,"
        " 'model', t.model, 'failures', t.failures, 'question', t.question, 'review_rounds', t.review_rounds) FROM "
    )


TASK_CHANGED = event_insert("task_changed") + "tasks AS t WHERE t.seq = %s"
TASKS_CHANGED = (
    event_insert("task_changed") + "json_array_elements_text(%s::json) WITH ORDINALITY AS w(value, key)"
    " JOIN tasks AS t ON t.seq = CAST(w.value AS BIGINT) ORDER BY w.key"
)
TASK_PROGRESS = event_insert("task_progress") + "tasks AS t WHERE t.seq = %s"
TASK_BY_SEQ = f"SELECT {TASK_COLUMNS} FROM tasks WHERE seq = %s"
TASK_BY_ID = f"SELECT {TASK_COLUMNS} FROM tasks WHERE id = %s"
TASKS_BY_SEQ = (
    f"SELECT {TASK_COLUMNS} FROM tasks"
    " WHERE seq IN (SELECT CAST(value AS BIGINT) FROM json_array_elements_text(%s::json))"
)
_ATTEMPT_COLUMNS = "attempt, teammate, fence, claim_ms, end_ms, outcome, error, review_round, feedback"
TASK_ATTEMPTS = f"SELECT {_ATTEMPT_COLUMNS} FROM claims WHERE task_seq = %s ORDER BY fence DESC LIMIT %s"
PREVIOUS_ATTEMPT = (
    f"SELECT {_ATTEMPT_COLUMNS} FROM claims WHERE task_seq = %s AND fence < %s AND outcome IS NOT NULL"
    " ORDER BY fence DESC LIMIT 1"
)
# An upper bound on a task's size on the wire, read without loading its payload or
# result; text columns are measured in bytes. 320 bytes cover the tags, length
# prefixes, numbers, timestamps and durations, and 4 bytes each dependency's.
WIRE_BYTES = (
    "320 + octet_length(tasks.id) + octet_length(tasks.title)"
    " + octet_length(tasks.description) + length(tasks.payload) + coalesce(length(tasks.result), 0)"
    " + octet_length(tasks.error) + octet_length(tasks.owner)"
    " + octet_length(tasks.required_role) + octet_length(tasks.progress)"
    " + octet_length(tasks.trace_parent)"
    " + octet_length(tasks.concurrency_key)"
    " + octet_length(tasks.model) + octet_length(tasks.question)"
    " + coalesce(octet_length(tasks.review_role), 0)"
    " + octet_length(tasks.proposed_by) + octet_length(tasks.discovered_from)"
    " + (SELECT coalesce(sum(octet_length(dep.id) + 4), 0)"
    " FROM deps d JOIN tasks dep ON dep.seq = d.dep_seq WHERE d.task_seq = tasks.seq)"
)
WIRE_BYTES_BY_ID = (
    f"SELECT tasks.id, {WIRE_BYTES} FROM json_array_elements_text(%s::json) AS wanted(value)"
    " JOIN tasks ON tasks.id = wanted.value"
)
ROWS_BY_ID = (
    "SELECT t.id, t.seq, t.spec_digest, t.state, t.create_ms, t.finish_ms, t.max_attempts, t.lease_ms"
    " FROM json_array_elements_text(%s::json) AS wanted(value) JOIN tasks AS t ON t.id = wanted.value"
)
# The trace contexts stored with the tasks among the ids that have one: an earlier
# version counted it in the spec's digest (store/tasks/create.py, `changed_specs`).
TRACE_PARENTS_BY_ID = (
    "SELECT t.id, t.trace_parent FROM json_array_elements_text(%s::json) AS wanted(value)"
    " JOIN tasks AS t ON t.id = wanted.value WHERE t.trace_parent <> ''"
)
# Claiming the first ready task: the task's new state, from the row as it was (the
# lease never outlives the attempt: its end is where the time limit bites, and
# the progress notes belonged to the previous attempt). Parameters: the owner,
# the claim's fence, now (four times).
CLAIMED_SET = (
    f"state = {_IN_PROGRESS}, owner = %s, attempt = failures + 1, live_fence = %s,"
    " lease_expire_ms = CASE WHEN attempt_timeout_ms < lease_ms THEN %s + attempt_timeout_ms ELSE %s + lease_ms END,"
    " progress = '', progress_fraction = NULL, progress_ms = NULL, progress_unsent = 0,"
    " attempt_deadline_ms = %s + attempt_timeout_ms"
)
CLAIM_TASK = (
    f"UPDATE tasks SET {CLAIMED_SET} WHERE seq = %s AND state = {_PENDING} AND unmet_deps = 0 RETURNING {TASK_COLUMNS}"
)
ANY_LEASE_ENDED = f"SELECT 1 FROM tasks WHERE state IN {_HELD} AND lease_expire_ms <= %s LIMIT 1"
ANY_GATE_DUE = "SELECT 1 FROM tasks WHERE gate_shut = 1 AND ready_ms <= %s LIMIT 1"


def held_claims(owner: str = "%s", now: str = "%s") -> str:
    return (
        "SELECT t.seq, c.token, t.lease_expire_ms, c.attempt, c.fence FROM tasks t JOIN claims c"
        f" ON c.fence = t.live_fence WHERE t.owner = {owner} AND t.state IN {_HELD} AND t.lease_expire_ms > {now}"
    )


HELD_CLAIMS = held_claims() + " ORDER BY c.fence"
END_CLAIM = "UPDATE claims SET outcome = %s, end_ms = %s, error = %s WHERE fence = %s"
END_CLAIM_LEASED = END_CLAIM + " RETURNING (SELECT t.resources <> '' FROM tasks AS t WHERE t.seq = claims.task_seq)"
# A renewal's lease, never past the attempt's time limit (parameter: the new end, twice).
_RENEWED = "lease_expire_ms = CASE WHEN attempt_deadline_ms < %s THEN attempt_deadline_ms ELSE %s END"


@functools.cache
def renew_lease(sums: str) -> str:
    """A renewal without progress, adding a usage report's `sums` (`USAGE_SUMS` or '');
    it returns whether a progress event is due, and the new lease end."""
    return (
        f"UPDATE tasks SET {_RENEWED}{sums} WHERE seq = %s"
        " RETURNING progress_unsent = 1 AND %s - progress_event_ms >= %s, lease_expire_ms"
    )


@functools.cache
def renew_with_progress(sums: str) -> str:
    """A renewal storing progress: SET reads the row as it was, so both CASEs ask whether
    the last event is old enough, and the one UPDATE marks the event sent when it is due."""
    due = "progress_event_ms IS NULL OR %s - progress_event_ms >= %s"
    return (
        f"UPDATE tasks SET {_RENEWED}, progress = %s, progress_fraction = %s, progress_ms = %s{sums},"
        f" progress_unsent = CASE WHEN {due} THEN 0 ELSE 1 END,"
        f" progress_event_ms = CASE WHEN {due} THEN %s ELSE progress_event_ms END"
        " WHERE seq = %s RETURNING progress_unsent = 0, lease_expire_ms"
    )


DONE = f"UPDATE tasks SET state = {_COMPLETED}, result = %s, finish_ms = %s, live_fence = NULL, lease_expire_ms = NULL"


@functools.cache
def complete_task(sums: str) -> str:
    """A task completed: its result and finish, a usage report's `sums` added."""
    return f"{DONE}{sums} WHERE seq = %s RETURNING {TASK_COLUMNS}"


def free_dependents(dep_seq: str) -> str:
    return (
        "UPDATE tasks SET unmet_deps = unmet_deps - 1"
        f" WHERE seq IN (SELECT task_seq FROM deps WHERE dep_seq = {dep_seq})"
        " RETURNING seq, required_role, unmet_deps, state"
    )


FREE_DEPENDENTS = free_dependents("%s")
OPEN_GATES = (
    "UPDATE tasks SET gate_shut = 0, unmet_deps = unmet_deps - 1 WHERE gate_shut = 1 AND ready_ms <= %s"
    " RETURNING seq, required_role, unmet_deps, state"
)
EARLIEST_GATE = "SELECT min(ready_ms) FROM tasks WHERE gate_shut = 1"


# ---------------------------------------------------------------- team
VIEW_COLUMNS = (
    "SELECT roles, require_plan, removed, acked_seq, last_seq, last_expiry_ms,"
    " EXISTS (SELECT 1 FROM shutdowns WHERE teammate = t.name AND answered = 0),"
    f" {GATE_CLOSED}, stream_epoch"
)
VIEW_FOR_DELIVERY = f"{VIEW_COLUMNS} FROM teammates AS t WHERE name = %s"
TEAMMATE_ROW = "SELECT roles, require_plan, removed, online, status, acked_seq, last_seq FROM teammates WHERE name = %s"
TEAMMATES_AFTER = "SELECT rowid, name FROM teammates WHERE rowid > %s ORDER BY rowid"
TEAMMATES_AFTER_LIMIT = "SELECT rowid, name FROM teammates WHERE rowid > %s ORDER BY rowid LIMIT %s"


# ---------------------------------------------------------------- status
STATUS = (
    "SELECT removed, online, require_plan, acked_seq, status,"
    " EXISTS (SELECT 1 FROM shutdowns WHERE teammate = %(name)s AND answered = 0),"
    f" EXISTS (SELECT 1 FROM tasks WHERE owner = %(name)s AND state IN {_HELD})"
    " FROM teammates WHERE name = %(name)s"
)


# ---------------------------------------------------------------- inbox
_EVERYONE_ELSE = "removed = 0 AND name != %s"
BROADCAST_FULL = (
    f"SELECT name FROM teammates WHERE {_EVERYONE_ELSE} AND last_seq - acked_seq >= %s ORDER BY name LIMIT 1"
)
BROADCAST_COUNT = f"UPDATE teammates SET last_seq = last_seq + 1 WHERE {_EVERYONE_ELSE} RETURNING name"
BROADCAST_INSERT = (
    "INSERT INTO inbox (recipient, seq, kind, send_ms, sender, body)"
    f" SELECT name, last_seq, 'message', %s, %s, %s FROM teammates WHERE {_EVERYONE_ELSE}"
)


# ---------------------------------------------------------------- overview
# A task as the board draws it: no description, payload or result (the detail has them).
_ROW = (
    "seq, id, title, state, owner, attempt, max_attempts, priority, required_role, unmet_deps,"
    " lease_expire_ms, finish_ms, ready_ms, create_ms, substr(error, 1, 1024), progress, progress_fraction, "
    + DEPENDENCY_IDS
)
TASK_ROWS = f"SELECT {_ROW} FROM tasks WHERE seq > %s ORDER BY seq LIMIT %s"
FRONTIER_ROWS = (
    f"SELECT {_ROW} FROM tasks WHERE seq IN ("
    " SELECT seq FROM tasks WHERE state NOT IN (%s, %s, %s)"
    " UNION SELECT deps.dep_seq FROM deps JOIN tasks AS open ON open.seq = deps.task_seq"
    "  WHERE open.state NOT IN (%s, %s, %s)"
    ") ORDER BY seq LIMIT %s"
)
PROBLEM_ROWS = f"SELECT {_ROW} FROM tasks WHERE state IN (%s, %s) ORDER BY finish_ms DESC, seq DESC LIMIT %s"


# ---------------------------------------------------------------- ops
INSERT_OP = "INSERT INTO session_ops (teammate, op_id, digest, done_ms) VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING"
RECORD_OP = f"{INSERT_OP} RETURNING seq"


# ---------------------------------------------------------------- reviews
# The first review this teammate may take: its role, not its own result, in board order.
# A teammate that released this round's review ("not mine") is not offered it again.
REVIEW_READY = (
    f"SELECT seq, attempt, author, review_rounds FROM tasks WHERE state = {_IN_REVIEW} AND live_fence IS NULL"
    " AND review_role IN ({roles}) AND author != %s{full_keys} AND NOT EXISTS (SELECT 1 FROM claims AS p"
    " WHERE p.task_seq = tasks.seq AND p.teammate = %s AND p.review_round = tasks.review_rounds + 1"
    " AND p.outcome = 'released') ORDER BY priority DESC, seq LIMIT 1"
)
INSERT_REVIEW_CLAIM = (
    "INSERT INTO claims (token, task_seq, teammate, attempt, claim_ms, review_round) VALUES (%s, %s, %s, %s, %s, %s)"
    " RETURNING fence"
)
CLAIM_REVIEW = (
    f"UPDATE tasks SET owner = %s, live_fence = %s, lease_expire_ms = %s + lease_ms, attempt_deadline_ms = NULL"
    f" WHERE seq = %s AND state = {_IN_REVIEW} AND live_fence IS NULL RETURNING {TASK_COLUMNS}"
)
REVIEW_OF_TASK = "SELECT author, review_rounds, rejected_result FROM tasks WHERE seq = %s"


# A work claim's completion of a task that needs a review: the result waits IN_REVIEW
# (`sums`: a usage report's, as complete_task's).
@functools.cache
def submit_for_review(sums: str) -> str:
    return (
        f"UPDATE tasks SET state = {_IN_REVIEW}, result = %s, author = %s, owner = '', live_fence = NULL,"
        f" lease_expire_ms = NULL, attempt_deadline_ms = NULL{sums} WHERE seq = %s"
        f" RETURNING review_role, {TASK_COLUMNS}"
    )


REVIEW_STATE = "SELECT seq, state, live_fence, review_rounds, attempt, concurrency_key FROM tasks WHERE id = %s"
REVIEW_POLICY = "SELECT id, review_rounds, review_max_rounds, author FROM tasks WHERE seq = %s"
REVIEW_HOLDER = "SELECT teammate, token FROM claims WHERE fence = %s"
END_REVIEW_CLAIM = "UPDATE claims SET outcome = %s, end_ms = %s, feedback = %s WHERE fence = %s"
LEAD_REVIEW = (
    "INSERT INTO claims (token, task_seq, teammate, attempt, claim_ms, review_round, end_ms, outcome, feedback)"
    " VALUES (%s, %s, 'lead', %s, %s, %s, %s, %s, %s)"
)
APPROVE = (
    f"UPDATE tasks SET state = {_COMPLETED}, owner = author, finish_ms = %s, live_fence = NULL, lease_expire_ms = NULL"
    f" WHERE seq = %s RETURNING {TASK_COLUMNS}"
)
REJECT = (
    f"UPDATE tasks SET state = {_PENDING}, owner = '', live_fence = NULL, lease_expire_ms = NULL, review_rounds = %s,"
    " rejected_result = result, result = NULL WHERE seq = %s RETURNING required_role"
)
REJECT_FINALLY = (
    "UPDATE tasks SET state = %s, owner = '', live_fence = NULL, lease_expire_ms = NULL, review_rounds = %s,"
    " finish_ms = %s, error = %s WHERE seq = %s"
)
