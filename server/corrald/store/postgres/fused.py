"""The statements that do the work of several, which only this driver runs (steps.py).

Over a network each statement is a round trip, while SQLite's cost nothing but
their own work: here a claim, a completion, a run of completions, a teammate's
delivery view with its held claims, and the opening of time gates are one
statement each, of data-modifying WITH clauses, where SQLite's driver runs the
plain statements of its `queries.py` one after another.
"""

from __future__ import annotations

import functools

from ...model import TaskState
from .queries import (
    CLAIMED_SET,
    DONE,
    EARLIEST_GATE,
    END_CLAIM,
    FREE_DEPENDENTS,
    INSERT_OP,
    OPEN_GATES,
    TASK_COLUMNS,
    VIEW_COLUMNS,
    event_insert,
    free_dependents,
    held_claims,
)

_COMPLETED = int(TaskState.COMPLETED)
# A completion done in one statement: a work claim's, of a task without a review (a
# review's verdict, or a result that waits for one, takes the general path).
_PLAIN = f" AND t.state = {int(TaskState.IN_PROGRESS)} AND t.review_role IS NULL"

# A Session op's record as the first WITH clause of a body's statement: `op` has a row if it was written.
RECORD_CLAUSE = f"op AS ({INSERT_OP} RETURNING seq)"


def _held_claims_json(owner: str = "%s", now: str = "%s", leaving_out: str = "") -> str:
    """The held claims as a column of another query: a JSON list of ClaimRef fields, or
    NULL for none; without the claim `leaving_out` names, if it names one."""
    besides = f" WHERE h.fence <> {leaving_out}" if leaving_out else ""
    return (
        "(SELECT json_agg(json_build_array(h.seq, h.token, h.lease_expire_ms, h.attempt, h.fence) ORDER BY h.fence)"
        f" FROM ({held_claims(owner, now)}) AS h{besides})"
    )


# The delivery view and the held claims (parameters: now, the name twice... in order:
# the claims' owner, now, the teammate).
VIEW_WITH_CLAIMS = f"{VIEW_COLUMNS}, {_held_claims_json()} FROM teammates AS t WHERE name = %s"
# The same beside a completion (`steps.complete_if_live` with `view_after`), which reads the board
# before it: the claim the completion ends is left out.
VIEW_BESIDE_COMPLETION = (
    f"{VIEW_COLUMNS}, {_held_claims_json(leaving_out='(SELECT fence FROM live)')} FROM teammates AS t WHERE name = %s"
)
# The same beside each completion of `complete_many`, for its request's teammate.
VIEW_BESIDE_COMPLETIONS = (
    f"{VIEW_COLUMNS}, {_held_claims_json('r.r_teammate', '%(now)s', 'live.l_fence')}"
    " FROM teammates AS t WHERE name = r.r_teammate"
)


@functools.cache
def claim_first_ready(ready: str) -> str:
    """The pick (`ready`, a query of seq, failures, attempt, resources), the claim's row, the
    task's and its event; the pick is claimed only without resources (those take the scan of
    store/leases.py, then this again with READY_BY_SEQ). Returns the claimed task's row, its
    fence and the pick's last attempt; when the pick was not claimed, a row whose task and
    fence are NULL (no row: nothing ready).
    The pick passes over a ready task another transaction has locked (claiming it), as the
    job queues on PostgreSQL do: two claims never wait for one row."""
    claimed = CLAIMED_SET.replace("live_fence = %s", "live_fence = made.claim_fence")
    checked = "TRUE" if ready == READY_BY_SEQ else "pick.resources = ''"
    return (
        f"WITH pick AS ({ready} FOR UPDATE OF tasks SKIP LOCKED),"
        " made AS (INSERT INTO claims (token, task_seq, teammate, attempt, claim_ms)"
        f" SELECT %s, seq, %s, failures + 1, %s FROM pick WHERE {checked}"
        " RETURNING fence AS claim_fence, task_seq AS claim_seq),"
        f" claimed AS (UPDATE tasks SET {claimed} FROM made WHERE seq = made.claim_seq RETURNING {TASK_COLUMNS}),"
        f" logged AS ({event_insert('task_changed')} claimed AS t)"
        " SELECT claimed.*, made.claim_fence, pick.attempt FROM pick LEFT JOIN made ON TRUE LEFT JOIN claimed ON TRUE"
    )


# The pick of a task chosen by the scan of store/leases.py, in this transaction.
READY_BY_SEQ = (
    f"SELECT seq, failures, attempt, resources FROM tasks WHERE seq = %s AND state = {int(TaskState.PENDING)}"
)


_FREED_JSON = "(SELECT json_agg(json_build_array(seq, required_role, unmet_deps, state)) FROM freed)"


@functools.cache
def complete_claim(sums: str) -> str:
    """A live claim's completion: the claim's end, the task's row, its dependents' counts
    and its event."""
    return (
        f"WITH ended AS ({END_CLAIM}), done AS ({DONE}{sums} WHERE seq = %s RETURNING {TASK_COLUMNS}),"
        f" freed AS ({FREE_DEPENDENTS}), logged AS ({event_insert('task_changed')} done AS t)"
        f" SELECT done.*, {_FREED_JSON} FROM done"
    )


@functools.cache
def complete_if_live(recording: bool, beside: str | None) -> str:
    """A completion checked and done in one statement. `live` is the token's claim if it
    is the task's live one, held by the caller and within its lease; every write needs
    it. With `recording`, the first clause writes the op's record (`RECORD_CLAUSE`) and
    `live` needs that too. `beside` is read laterally. It returns a row only if it wrote
    something."""
    record, needs_record, record_seq, wrote = "", "", "NULL", "EXISTS (SELECT 1 FROM done)"
    if recording:
        record, needs_record = f"{RECORD_CLAUSE}, ", " AND EXISTS (SELECT 1 FROM op)"
        record_seq, wrote = "(SELECT seq FROM op)", f"EXISTS (SELECT 1 FROM op) OR {wrote}"
    read, join = (", beside.*", f" LEFT JOIN LATERAL ({beside}) AS beside ON true") if beside else ("", "")
    return (
        f"WITH {record}live AS (SELECT t.seq, t.live_fence AS fence, t.concurrency_key AS key FROM tasks AS t"
        " JOIN claims AS c ON c.fence = t.live_fence WHERE t.id = %s AND c.token = %s AND c.teammate = %s"
        f" AND c.outcome IS NULL AND t.lease_expire_ms > %s{_PLAIN}{needs_record}),"
        " ended AS (UPDATE claims SET outcome = %s, end_ms = %s, error = %s WHERE fence = (SELECT fence FROM live)),"
        f" done AS ({DONE} WHERE seq = (SELECT seq FROM live) RETURNING {TASK_COLUMNS}),"
        f" freed AS ({free_dependents('(SELECT seq FROM live)')}), logged AS ({event_insert('task_changed')} done AS t)"
        f" SELECT {record_seq}, done.*, (SELECT key FROM live), {_FREED_JSON}, (SELECT fence FROM live){read}"
        f" FROM (SELECT 1) AS one LEFT JOIN done ON true{join} WHERE {wrote}"
    )


@functools.cache
def complete_many(beside: str) -> str:
    """`complete_if_live` over a run of requests (named parameters: the requests' columns as
    arrays, `now`, `completed`); the dependents two completions free together lose one
    unmet dependency for each, and say so in the row of the later one (in the serial
    order, it made them ready)."""
    return (
        "WITH r AS (SELECT * FROM unnest(%(teammates)s::text[], %(op_ids)s::text[], %(digests)s::bytea[],"
        " %(task_ids)s::text[], %(tokens)s::text[], %(results)s::bytea[]) WITH ORDINALITY"
        " AS r(r_teammate, r_op_id, r_digest, r_task_id, r_token, r_result, r_n)),"
        " op AS (INSERT INTO session_ops (teammate, op_id, digest, done_ms)"
        " SELECT r_teammate, r_op_id, r_digest, %(now)s FROM r ORDER BY r_n ON CONFLICT DO NOTHING"
        " RETURNING seq AS op_seq, teammate AS op_teammate),"
        " live AS (SELECT r.r_n AS l_n, t.seq AS l_seq, t.live_fence AS l_fence, t.concurrency_key AS l_key"
        " FROM r JOIN op ON op.op_teammate = r.r_teammate JOIN tasks AS t ON t.id = r.r_task_id"
        " JOIN claims AS c ON c.fence = t.live_fence WHERE c.token = r.r_token AND c.teammate = r.r_teammate"
        f" AND c.outcome IS NULL AND t.lease_expire_ms > %(now)s{_PLAIN}),"
        " ended AS (UPDATE claims SET outcome = %(completed)s, end_ms = %(now)s, error = ''"
        " WHERE fence IN (SELECT l_fence FROM live)),"
        f" done AS (UPDATE tasks SET state = {_COMPLETED}, result = r_result, finish_ms = %(now)s, live_fence = NULL,"
        " lease_expire_ms = NULL FROM live JOIN r ON r.r_n = live.l_n WHERE seq = live.l_seq"
        f" RETURNING live.l_n AS done_n, {TASK_COLUMNS}),"
        " met AS (SELECT deps.task_seq AS met_seq, count(*) AS met_count, max(live.l_n) AS met_n FROM deps"
        " JOIN live ON deps.dep_seq = live.l_seq GROUP BY deps.task_seq),"
        " freed AS (UPDATE tasks SET unmet_deps = unmet_deps - met.met_count FROM met WHERE seq = met.met_seq"
        " RETURNING met.met_n AS freed_n, seq, required_role, unmet_deps, state),"
        f" logged AS ({event_insert('task_changed', '%(now)s')} done AS t ORDER BY t.done_n)"
        " SELECT r.r_n, op.op_seq, done.*, live.l_key, (SELECT json_agg(json_build_array(f.seq, f.required_role,"
        " f.unmet_deps, f.state)) FROM freed AS f WHERE f.freed_n = r.r_n), live.l_fence, beside.*"
        " FROM r LEFT JOIN op ON op.op_teammate = r.r_teammate LEFT JOIN live ON live.l_n = r.r_n"
        f" LEFT JOIN done ON done.done_n = r.r_n LEFT JOIN LATERAL ({beside}) AS beside ON true ORDER BY r.r_n"
    )


# The gates opened, and the earliest gate left (every row carries it). Parameters: now, twice.
OPEN_GATES_AND_EARLIEST = (
    f"WITH opened AS ({OPEN_GATES}) SELECT opened.*, ({EARLIEST_GATE} AND ready_ms > %s)"
    " FROM (SELECT 1) AS one LEFT JOIN opened ON true"
)
