"""The SQLite board's schema and its ordered migrations.

`PRAGMA user_version` records how many migrations ran.
"""

from __future__ import annotations

import sqlite3

MIGRATIONS: tuple[str, ...] = (
    # 1: the board.
    """
    CREATE TABLE tasks (
        seq             INTEGER PRIMARY KEY AUTOINCREMENT,
        id              TEXT    NOT NULL UNIQUE,
        title           TEXT    NOT NULL,
        description     TEXT    NOT NULL,
        payload         BLOB    NOT NULL,
        priority        INTEGER NOT NULL,
        required_role   TEXT    NOT NULL,
        max_attempts    INTEGER NOT NULL,
        lease_ms        INTEGER NOT NULL,
        spec_digest     BLOB    NOT NULL,
        state           INTEGER NOT NULL,
        unmet_deps      INTEGER NOT NULL,
        owner           TEXT    NOT NULL DEFAULT '',
        attempt         INTEGER NOT NULL DEFAULT 0,
        failures        INTEGER NOT NULL DEFAULT 0,
        live_fence      INTEGER,
        result          BLOB,
        error           TEXT    NOT NULL DEFAULT '',
        create_ms       INTEGER NOT NULL,
        lease_expire_ms INTEGER,
        finish_ms       INTEGER
    );
    -- The claim query: equality on state and unmet_deps, then the order.
    CREATE INDEX tasks_ready ON tasks (state, unmet_deps, priority DESC, seq);
    CREATE INDEX tasks_lease ON tasks (lease_expire_ms) WHERE state = 2;
    CREATE INDEX tasks_owner ON tasks (owner, state);

    CREATE TABLE deps (
        task_seq INTEGER NOT NULL REFERENCES tasks (seq),
        dep_seq  INTEGER NOT NULL REFERENCES tasks (seq),
        position INTEGER NOT NULL,  -- order in the spec's depends_on
        PRIMARY KEY (task_seq, dep_seq)
    ) WITHOUT ROWID;
    CREATE INDEX deps_by_dep ON deps (dep_seq, task_seq);

    -- Every claim ever made. The fence is the claim's own strictly increasing
    -- number (AUTOINCREMENT never reuses one); the token is unique for life.
    CREATE TABLE claims (
        fence    INTEGER PRIMARY KEY AUTOINCREMENT,
        token    TEXT    NOT NULL UNIQUE,
        task_seq INTEGER NOT NULL REFERENCES tasks (seq),
        teammate TEXT    NOT NULL,
        attempt  INTEGER NOT NULL,
        claim_ms INTEGER NOT NULL,
        end_ms   INTEGER,
        outcome  TEXT
    );
    CREATE INDEX claims_by_task ON claims (task_seq);

    CREATE TABLE create_requests (
        request_id TEXT PRIMARY KEY,
        digest     BLOB NOT NULL,
        task_ids   TEXT NOT NULL
    );

    CREATE TABLE teammates (
        name          TEXT    PRIMARY KEY,
        token_hash    BLOB    NOT NULL UNIQUE,
        roles         TEXT    NOT NULL,
        require_plan  INTEGER NOT NULL,
        removed       INTEGER NOT NULL DEFAULT 0,
        online        INTEGER NOT NULL DEFAULT 0,
        status        INTEGER NOT NULL,
        acked_seq     INTEGER NOT NULL DEFAULT 0,
        last_seq      INTEGER NOT NULL DEFAULT 0,
        created_ms    INTEGER NOT NULL
    );

    CREATE TABLE inbox (
        recipient   TEXT    NOT NULL REFERENCES teammates (name),
        seq         INTEGER NOT NULL,
        kind        TEXT    NOT NULL,
        send_ms     INTEGER NOT NULL,
        sender      TEXT    NOT NULL DEFAULT '',
        body        TEXT    NOT NULL DEFAULT '',
        ref         TEXT    NOT NULL DEFAULT '',
        approve     INTEGER NOT NULL DEFAULT 0,
        deadline_ms INTEGER,
        PRIMARY KEY (recipient, seq)
    ) WITHOUT ROWID;

    CREATE TABLE plans (
        plan_id     INTEGER PRIMARY KEY AUTOINCREMENT,
        author      TEXT    NOT NULL REFERENCES teammates (name),
        body        TEXT    NOT NULL,
        submit_ms   INTEGER NOT NULL,
        approve     INTEGER,
        feedback    TEXT    NOT NULL DEFAULT '',
        decision_seq INTEGER
    );
    CREATE INDEX plans_by_author ON plans (author, plan_id);

    CREATE TABLE shutdowns (
        request_id    INTEGER PRIMARY KEY AUTOINCREMENT,
        teammate      TEXT    NOT NULL REFERENCES teammates (name),
        reason        TEXT    NOT NULL,
        request_ms    INTEGER NOT NULL,
        deadline_ms   INTEGER NOT NULL,
        answered      INTEGER NOT NULL DEFAULT 0,
        approve       INTEGER,
        answer_reason TEXT    NOT NULL DEFAULT ''
    );
    CREATE INDEX shutdowns_open ON shutdowns (teammate) WHERE answered = 0;
    CREATE INDEX shutdowns_deadline ON shutdowns (deadline_ms) WHERE answered = 0;

    -- Append-only: every state change, in order; the Watch feed.
    CREATE TABLE events (
        seq     INTEGER PRIMARY KEY AUTOINCREMENT,
        time_ms INTEGER NOT NULL,
        kind    TEXT    NOT NULL,
        data    TEXT    NOT NULL
    );
    """,
    # 2: the daemon clock's high-water mark, so a restart can tell leases that
    # ended while the daemon was up (and may have been reported expired) from
    # leases that ran out during the downtime; and each teammate's last expiry.
    """
    CREATE TABLE meta (
        key   TEXT    PRIMARY KEY,
        value INTEGER NOT NULL
    );
    INSERT INTO meta (key, value) VALUES ('clock_ms', 0);
    -- The end of this teammate's latest lease that ran out: until it shows
    -- life after that instant it may be frozen, and gets no new claim.
    ALTER TABLE teammates ADD COLUMN last_expiry_ms INTEGER NOT NULL DEFAULT 0;
    """,
    # 3: "is a protocol message waiting?" is asked on every claim and renew; a
    # teammate with thousands of unread chat messages must not make it a scan.
    """
    CREATE INDEX inbox_protocol ON inbox (recipient, seq) WHERE kind != 'message';
    """,
    # 4: the outcome of each Session op, by the op id its teammate chose, so an
    # op sent again after a broken stream is answered without running twice.
    # `value` is the op's number (a lease end, a task seq, an acknowledged seq);
    # an op that failed keeps its error's kind, message and metadata (JSON).
    """
    CREATE TABLE session_ops (
        seq            INTEGER PRIMARY KEY,
        teammate       TEXT    NOT NULL,
        op_id          TEXT    NOT NULL,
        digest         BLOB    NOT NULL,
        done_ms        INTEGER NOT NULL,
        value          INTEGER,
        flag           INTEGER NOT NULL DEFAULT 0,
        error_kind     TEXT,
        error_message  TEXT,
        error_metadata TEXT
    );
    CREATE UNIQUE INDEX session_ops_id ON session_ops (teammate, op_id);
    CREATE INDEX session_ops_by_teammate ON session_ops (teammate, seq);
    """,
    # 5: why each claim ended (FailTask's error, the expiry, the cancel's
    # reason), so a task's attempt history and a retry's claim can tell.
    """
    ALTER TABLE claims ADD COLUMN error TEXT NOT NULL DEFAULT '';
    """,
    # 6: time gates. A task waits for `ready_ms` (its not_before, or the end of a
    # retry's backoff) while `gate_shut` is 1, and the shut gate counts as one
    # more unmet dependency: the claim query and its index stay as they are, and
    # a board full of delayed tasks costs a claim nothing. Tasks from before
    # this migration keep retrying at once, as they were created to.
    """
    ALTER TABLE tasks ADD COLUMN not_before_ms INTEGER;
    ALTER TABLE tasks ADD COLUMN retry_backoff_ms INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN retry_backoff_max_ms INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN ready_ms INTEGER;
    ALTER TABLE tasks ADD COLUMN gate_shut INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX tasks_gate ON tasks (ready_ms) WHERE gate_shut = 1;
    """,
    # 7: the holder's progress on a task, sent with its renewals. Watch hears of
    # it at most once a second per task: `progress_event_ms` is when it last
    # did, and `progress_unsent` says the stored progress is newer than that.
    """
    ALTER TABLE tasks ADD COLUMN progress TEXT NOT NULL DEFAULT '';
    ALTER TABLE tasks ADD COLUMN progress_fraction REAL;
    ALTER TABLE tasks ADD COLUMN progress_ms INTEGER;
    ALTER TABLE tasks ADD COLUMN progress_event_ms INTEGER;
    ALTER TABLE tasks ADD COLUMN progress_unsent INTEGER NOT NULL DEFAULT 0;
    """,
    # 8: the W3C trace context a task was created in, handed to its teammate.
    """
    ALTER TABLE tasks ADD COLUMN trace_parent TEXT NOT NULL DEFAULT '';
    """,
    # 9: concurrency keys. A key with a row here has a limit, and the row counts
    # its tasks IN_PROGRESS (the writer keeps the count as claims start and end;
    # a board's open recounts it). The claim query stays on tasks_ready and
    # passes over a keyed row whose key is at its limit (one primary-key probe
    # per keyed row it walks; a row without a key costs none). `tasks_key` finds
    # a key's tasks (its count, the roles of its ready tasks to wake).
    """
    ALTER TABLE tasks ADD COLUMN concurrency_key TEXT NOT NULL DEFAULT '';
    CREATE INDEX tasks_key ON tasks (concurrency_key, state) WHERE concurrency_key != '';
    CREATE TABLE concurrency_keys (
        key             TEXT    PRIMARY KEY,
        max_in_progress INTEGER NOT NULL,
        in_progress     INTEGER NOT NULL
    ) WITHOUT ROWID;
    """,
    # 10: usage and budgets. What holders reported spending is summed on the task
    # and on the teammate (the board's sum is the teammates'); a teammate's own
    # budget is NULL when it has none and the "*" default in meta applies.
    """
    ALTER TABLE tasks ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN cost_micros INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN model TEXT NOT NULL DEFAULT '';
    ALTER TABLE teammates ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE teammates ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE teammates ADD COLUMN cost_micros INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE teammates ADD COLUMN model TEXT NOT NULL DEFAULT '';
    ALTER TABLE teammates ADD COLUMN budget_cost_micros INTEGER;
    ALTER TABLE teammates ADD COLUMN budget_tokens INTEGER;
    INSERT INTO meta (key, value) VALUES ('budget_cost_micros', 0), ('budget_tokens', 0);
    """,
    # 11: the attempt time limit. `attempt_deadline_ms` is the live claim's claim
    # instant plus `attempt_timeout_ms` (NULL: no limit, or no live claim); the
    # lease never ends later, so the reaper's timer and index already cover it.
    """
    ALTER TABLE tasks ADD COLUMN attempt_timeout_ms INTEGER;
    ALTER TABLE tasks ADD COLUMN attempt_deadline_ms INTEGER;
    """,
    # 12: viewers, read-only credentials for the web board and BoardService's
    # reads. Only the token's hash is kept; removing a viewer deletes its row,
    # so the name may be minted again with a new token.
    """
    CREATE TABLE viewers (
        name       TEXT    PRIMARY KEY,
        token_hash BLOB    NOT NULL UNIQUE,
        created_ms INTEGER NOT NULL
    );
    """,
    # 13: which daemon's stream serves each online teammate ('' while offline). Only
    # a PostgreSQL board, which several daemons serve, names one; a SQLite board's
    # one daemon leaves it empty.
    """
    ALTER TABLE teammates ADD COLUMN served_by TEXT NOT NULL DEFAULT '';
    """,
    # 14: each opening of a teammate's stream, counted: a check for an older stream
    # (one superseded on another daemon, which has not heard of it yet) delivers nothing.
    """
    ALTER TABLE teammates ADD COLUMN stream_epoch INTEGER NOT NULL DEFAULT 0;
    """,
    # 15: the first outcome of a unary write sent with a request id, as its response's
    # bytes (store/ops.py): a retry with the same id is answered with them.
    """
    ALTER TABLE session_ops ADD COLUMN response BLOB;
    """,
    # 16: questions to the Lead. A holder's question ends its claim (outcome 'asked')
    # and leaves the task NEEDS_INPUT with the question on its row until the Lead's
    # answer; every question of a task and its answer go to the task's next claims.
    """
    ALTER TABLE tasks ADD COLUMN question TEXT NOT NULL DEFAULT '';
    CREATE TABLE questions (
        seq       INTEGER PRIMARY KEY AUTOINCREMENT,
        task_seq  INTEGER NOT NULL REFERENCES tasks (seq),
        fence     INTEGER NOT NULL,
        asked_by  TEXT    NOT NULL,
        question  TEXT    NOT NULL,
        ask_ms    INTEGER NOT NULL,
        answer    TEXT,
        answer_ms INTEGER
    );
    CREATE INDEX questions_by_task ON questions (task_seq, seq);
    """,
    # 17: reviews. `review_role` NULL: no review; '' the Lead reviews. A completion of
    # such a task leaves it IN_REVIEW (7) with the result and its `author`; a review's
    # claim (`review_round` set) holds it as a work claim does, so the lease index
    # covers both states. A rejection keeps the result it rejected for the rework.
    """
    ALTER TABLE tasks ADD COLUMN review_role TEXT;
    ALTER TABLE tasks ADD COLUMN review_max_rounds INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN review_rounds INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN author TEXT NOT NULL DEFAULT '';
    ALTER TABLE tasks ADD COLUMN rejected_result BLOB;
    ALTER TABLE claims ADD COLUMN review_round INTEGER;
    ALTER TABLE claims ADD COLUMN feedback TEXT NOT NULL DEFAULT '';
    DROP INDEX tasks_lease;
    CREATE INDEX tasks_lease ON tasks (lease_expire_ms) WHERE state IN (2, 7);
    CREATE INDEX tasks_reviewable ON tasks (priority DESC, seq) WHERE state = 7 AND live_fence IS NULL;
    """,
    # 18: discovered work. A teammate's proposed task keeps who proposed it and the task
    # whose claim it came from; PROPOSED (8) waits for the Lead. `task_creation` is a
    # teammate's own policy (NULL: the "*" default in meta; 1 propose, 2 allow, 3 deny).
    """
    ALTER TABLE tasks ADD COLUMN proposed_by TEXT NOT NULL DEFAULT '';
    ALTER TABLE tasks ADD COLUMN discovered_from TEXT NOT NULL DEFAULT '';
    ALTER TABLE teammates ADD COLUMN task_creation INTEGER;
    INSERT INTO meta (key, value) VALUES ('task_creation', 1);
    CREATE INDEX tasks_proposed ON tasks (proposed_by) WHERE state = 8;
    """,
    # 19: live output. Each claim (attempt) keeps the bytes its holder appended, one row
    # per append at its offset (`pos`), and their count on the claim's row, which an
    # append checks against the limit and moves in the same statement.
    """
    ALTER TABLE claims ADD COLUMN output_bytes INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE output_chunks (
        fence INTEGER NOT NULL,
        pos   INTEGER NOT NULL,
        data  BLOB    NOT NULL,
        PRIMARY KEY (fence, pos)
    ) WITHOUT ROWID;
    """,
    # 20: artifacts. Each upload a live claim attached is a row of `artifacts` (the
    # history keeps every one); the latest row of a name is the task's current artifact.
    # The bytes are files beside the database named by their SHA-256 (store/artifacts.py);
    # `artifact_contents` lists the contents some row names, once each, and meta's
    # `artifact_bytes` their sizes' sum, which the board-wide quota is checked against.
    """
    CREATE TABLE artifacts (
        seq        INTEGER PRIMARY KEY AUTOINCREMENT,
        task_seq   INTEGER NOT NULL,
        attempt    INTEGER NOT NULL,
        name       TEXT    NOT NULL,
        media_type TEXT    NOT NULL,
        size       INTEGER NOT NULL,
        sha256     TEXT    NOT NULL,
        create_ms  INTEGER NOT NULL,
        teammate   TEXT    NOT NULL
    );
    CREATE INDEX artifacts_task ON artifacts (task_seq, name, seq);
    CREATE TABLE artifact_contents (
        sha256 TEXT    PRIMARY KEY,
        size   INTEGER NOT NULL
    ) WITHOUT ROWID;
    INSERT INTO meta (key, value) VALUES ('artifact_bytes', 0);
    """,
    # 21: path leases. `resources` is a task's, as its spec lists them ('' : none; else
    # the JSON list [exclusive, shared]); `held_resources` has a row per resource of each
    # task IN_PROGRESS, written by its claim and deleted by the claim's end, keyed by path
    # so an overlap is a few index lookups (store/leases.py). No other index: each is one
    # more page a claim of a task with resources writes.
    """
    ALTER TABLE tasks ADD COLUMN resources TEXT NOT NULL DEFAULT '';
    CREATE TABLE held_resources (
        path      TEXT    NOT NULL,
        task_seq  INTEGER NOT NULL,
        exclusive INTEGER NOT NULL,
        PRIMARY KEY (path, task_seq)
    ) WITHOUT ROWID;
    """,
    # 22: a teammate's proposal the Lead has not decided (`undecided` 1: PROPOSED, or
    # canceled with a dependency before a decision). RetryTasks brings it back PROPOSED:
    # only the Lead's decision makes a proposal claimable.
    """
    ALTER TABLE tasks ADD COLUMN undecided INTEGER NOT NULL DEFAULT 0;
    UPDATE tasks SET undecided = 1 WHERE state = 8;
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise RuntimeError(f"database schema {version} is newer than this corrald ({SCHEMA_VERSION})")
    for number in range(version, SCHEMA_VERSION):
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(MIGRATIONS[number]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


def _statements(script: str) -> list[str]:
    """Split a migration into statements (executescript would COMMIT on its own)."""
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        if line.strip().startswith("--"):
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        raise RuntimeError(f"incomplete statement in migration: {buffer.strip()[:60]}")
    return statements
