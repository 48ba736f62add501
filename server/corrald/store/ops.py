"""Session ops run once: each op's outcome is recorded, in its own transaction, by the
op id its teammate chose, and an op sent again is answered from the record.

The record goes in first (`ON CONFLICT DO NOTHING`), so the usual case (a new op id)
costs one insert and no lookup; only an op whose outcome carries a value
(a renewal's lease end) or an error updates it after. When the insert finds
the op id taken, the body never runs and the record answers. A body that fails
with a domain error has written nothing (every store function checks before it
writes), so its error is recorded as its outcome; one that wrote and then
failed is undone whole, record and all, like any failed job.

Records are kept for 24 hours and for the last 10,000 ops of each teammate,
whichever is fewer; every 512th op prunes (`PRUNE_EVERY`).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from .. import errors
from ..model import OpOutcome, Txn

KEEP_MS = 24 * 3600 * 1000
KEEP_PER_TEAMMATE = 10_000
PRUNE_EVERY = 512


def run_once(
    tx: Txn,
    teammate: str,
    op_id: str,
    digest: bytes,
    body: Callable[[Txn], OpOutcome],
) -> tuple[OpOutcome, bool]:
    """Runs `body` unless `op_id` already ran; returns the outcome and whether it ran now.

    The same op id with another `digest` (a different op) is INVALID_ARGUMENT.
    """
    conn = tx.conn
    inserted = conn.execute(
        "INSERT INTO session_ops (teammate, op_id, digest, done_ms) VALUES (?, ?, ?, ?)"
        " ON CONFLICT DO NOTHING RETURNING seq",
        (teammate, op_id, digest, tx.now_ms),
    ).fetchone()
    if inserted is None:
        return _recorded(conn, teammate, op_id, digest), False
    (seq,) = inserted
    written = conn.total_changes
    try:
        outcome = body(tx)
    except errors.CorralError as error:
        if conn.total_changes != written:
            raise  # it wrote before it failed: the job is undone whole
        outcome = OpOutcome(error=error)
    if outcome.value is not None or outcome.flag or outcome.error is not None:
        _store_outcome(conn, seq, outcome)
    if seq % PRUNE_EVERY == 0:
        _prune(tx, teammate)
    return outcome, True


def _store_outcome(conn, seq: int, outcome: OpOutcome) -> None:
    error = outcome.error
    kind = message = metadata = None
    if error is not None:
        kind, message = type(error).__name__, error.message
        described = {"description": error.description} if isinstance(error, errors.InvalidArgument) else {}
        metadata = json.dumps({**error.metadata, **described}) if error.metadata or described else None
    conn.execute(
        "UPDATE session_ops SET value = ?, flag = ?, error_kind = ?, error_message = ?, error_metadata = ?"
        " WHERE seq = ?",
        (outcome.value, int(outcome.flag), kind, message, metadata, seq),
    )


def _recorded(conn, teammate: str, op_id: str, digest: bytes) -> OpOutcome:
    stored_digest, value, flag, kind, message, metadata = conn.execute(
        "SELECT digest, value, flag, error_kind, error_message, error_metadata FROM session_ops"
        " WHERE teammate = ? AND op_id = ?",
        (teammate, op_id),
    ).fetchone()
    if stored_digest != digest:
        raise errors.InvalidArgument("op_id", f"{op_id!r} was already used for a different op")
    if kind is None:
        return OpOutcome(value, bool(flag))
    return OpOutcome(error=errors.replay(kind, message, json.loads(metadata) if metadata else {}))


def _prune(tx: Txn, teammate: str) -> None:
    """Drops records older than a day (every teammate's) and this teammate's beyond its last 10,000."""
    conn = tx.conn
    # `done_ms` grows with `seq` (one writer, a clock that never goes back): the
    # records older than a day are the ones before the first younger one.
    conn.execute(
        "DELETE FROM session_ops WHERE seq < coalesce((SELECT seq FROM session_ops WHERE done_ms >= ?"
        " ORDER BY seq LIMIT 1), (SELECT max(seq) + 1 FROM session_ops))",
        (tx.now_ms - KEEP_MS,),
    )
    conn.execute(
        "DELETE FROM session_ops WHERE teammate = ? AND seq <= (SELECT seq FROM session_ops WHERE teammate = ?"
        " ORDER BY seq DESC LIMIT 1 OFFSET ?)",
        (teammate, teammate, KEEP_PER_TEAMMATE),
    )
