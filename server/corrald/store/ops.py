"""Session ops run once: each op's outcome is recorded, in its own transaction, by the
op id its teammate chose, and an op sent again is answered from the record.

The record goes in first (`ON CONFLICT DO NOTHING`), so the usual case (a new op id)
costs one insert and no lookup; only an op whose outcome carries a value
(a renewal's lease end) or an error updates it after. When the insert finds
the op id taken, the body never runs and the record answers. A body that fails
with a domain error has written nothing (every store function checks before it
writes), so its error is recorded as its outcome; one that wrote and then
failed is undone whole, record and all, like any failed job.

A body may write the record itself (`RecordingBody`): where statements are round
trips (PostgreSQL), in its own first statement, as a WITH clause (`RECORD_CLAUSE` of
store/postgres/fused.py) that every other write of that statement depends on. Until
that statement runs, the body has written nothing; if the op id is taken, the
statement writes nothing at all and the body raises `OpAlreadyRan`, and the record
answers as before. A body path without such a statement (every path on SQLite) writes
the record before its first write (`write_pending_record`).

Records are kept for 24 hours and for the last 10,000 ops of each teammate,
whichever is fewer; every 512th op prunes (`PRUNE_EVERY`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Generic, TypeVar

from .. import errors
from ..txn import OpOutcome, PendingOpRecord, Txn
from .dialect import sql, steps

KEEP_MS = 24 * 3600 * 1000
KEEP_PER_TEAMMATE = 10_000
PRUNE_EVERY = 512

T = TypeVar("T")


# A unary write's request id is kept as an op of its caller, named after its RPC.
REQUEST_ID_SEPARATOR = "\x1f"


def request_op_id(rpc: str, request_id: str) -> str:
    """The op id under which a unary write's request id is recorded: one per RPC, so the
    same id sent to two RPCs names two calls, and never a Session op's id."""
    return f"{rpc}{REQUEST_ID_SEPARATOR}{request_id}"


class OpAlreadyRan(Exception):
    """The body's first statement found the op id taken, and wrote nothing."""


@dataclasses.dataclass(frozen=True, slots=True)
class OpRun(Generic[T]):
    """What `run_once` did: ran the body now (`ran`; its `value` unless it failed), or found
    the op had run, and `outcome` is what its record says."""

    outcome: OpOutcome
    ran: bool
    value: T | None = None


NOTHING = OpOutcome()  # an op whose record keeps no outcome beyond having run


@dataclasses.dataclass(frozen=True, slots=True)
class RecordingBody(Generic[T]):
    """An op's body that writes the op's record itself (see the module's doc): `run` is
    handed the record, to write in its first statement (`record_written`) or before its
    first write of another kind (`write_pending_record`)."""

    run: Callable[[Txn, PendingOpRecord], T]


def run_once(
    tx: Txn,
    teammate: str,
    op_id: str,
    digest: bytes,
    body: Callable[[Txn], T] | RecordingBody[T],
    *,
    recorded_as: Callable[[T], OpOutcome] | None = None,
) -> OpRun[T]:
    """Runs `body` unless `op_id` already ran; its record keeps `recorded_as(value)` (by
    default, nothing but that it ran). A `RecordingBody` writes the record itself.

    The same op id with another `digest` (a different op) is INVALID_ARGUMENT.
    """
    conn = tx.conn
    record = PendingOpRecord(teammate, op_id, digest, tx.now_ms)
    if not isinstance(body, RecordingBody) and not _write(tx, record):
        return OpRun(_recorded(conn, teammate, op_id, digest), False)
    value: T | None = None
    try:
        value = body.run(tx, record) if isinstance(body, RecordingBody) else body(tx)
        outcome = NOTHING if recorded_as is None else recorded_as(value)
    except OpAlreadyRan:
        return OpRun(_recorded(conn, teammate, op_id, digest), False)
    except errors.CorralError as error:
        if record.seq is None and not _write(tx, record):  # it failed before its first statement
            return OpRun(_recorded(conn, teammate, op_id, digest), False)
        if conn.total_changes != record.changes:
            raise  # it wrote before it failed: the job is undone whole
        outcome = OpOutcome(error=error)
    if record.seq is None:
        raise AssertionError(f"the body of op {op_id!r} wrote no record")
    if outcome.value is not None or outcome.flag or outcome.error is not None or outcome.response is not None:
        _store_outcome(conn, record.seq, outcome)
    if record.seq % PRUNE_EVERY == 0:
        _prune(tx, teammate)
    return OpRun(outcome, True, value)


def write_pending_record(tx: Txn, record: PendingOpRecord | None) -> None:
    """Writes the record (if any) a body was to write in its first statement, before the
    body's first write of another kind; raises OpAlreadyRan if the op id is taken."""
    if record is not None and record.seq is None and not _write(tx, record):
        raise OpAlreadyRan


def record_written(tx: Txn, record: PendingOpRecord, seq: int | None) -> None:
    """What the body's statement with the record clause returned of `op`: the record's seq,
    or None when it found the op id taken (and so wrote nothing)."""
    if seq is None:
        raise OpAlreadyRan
    record.seq, record.changes = seq, tx.conn.total_changes


def _write(tx: Txn, record: PendingOpRecord) -> bool:
    """Writes the record; False if the op id is taken."""
    seq = steps(tx.conn).record_op(tx.conn, record)
    if seq is None:
        return False
    record.seq, record.changes = seq, tx.conn.total_changes
    return True


def _store_outcome(conn, seq: int, outcome: OpOutcome) -> None:
    error = outcome.error
    kind = message = metadata = None
    if error is not None:
        kind, message = type(error).__name__, error.message
        described = {"description": error.description} if isinstance(error, errors.InvalidArgument) else {}
        metadata = json.dumps({**error.metadata, **described}) if error.metadata or described else None
    conn.execute(
        sql(conn).STORE_OUTCOME,
        (outcome.value, int(outcome.flag), kind, message, metadata, outcome.response, seq),
    )


def _recorded(conn, teammate: str, op_id: str, digest: bytes) -> OpOutcome:
    stored_digest, value, flag, kind, message, metadata, response = conn.execute(
        sql(conn).RECORDED,
        (teammate, op_id),
    ).fetchone()
    if bytes(stored_digest) != digest:
        field, _, request_id = op_id.rpartition(REQUEST_ID_SEPARATOR)
        if field:  # a unary write's request id (`request_op_id`)
            raise errors.InvalidArgument("request_id", f"{request_id!r} was already used for a different call")
        raise errors.InvalidArgument("op_id", f"{op_id!r} was already used for a different op")
    if kind is None:
        return OpOutcome(value, bool(flag), response=bytes(response) if response is not None else None)
    return OpOutcome(error=errors.replay(kind, message, json.loads(metadata) if metadata else {}))


def _prune(tx: Txn, teammate: str) -> None:
    """Drops records older than a day (every teammate's) and this teammate's beyond its last 10,000."""
    conn = tx.conn
    # `done_ms` grows with `seq` (one writer, a clock that never goes back): the
    # records older than a day are the ones before the first younger one.
    conn.execute(
        sql(conn).PRUNE_OPS_BEFORE,
        (tx.now_ms - KEEP_MS,),
    )
    conn.execute(
        sql(conn).PRUNE_OPS_BEYOND,
        (teammate, teammate, KEEP_PER_TEAMMATE),
    )
