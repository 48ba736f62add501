"""A task's live output: what the holder of a claim appends (AppendOutput), kept per claim
(its attempt) and read back from any offset (TailOutput).

Each append is one row of `output_chunks`, keyed by the claim's fence and the offset it
starts at (`pos`), and the claim's row counts the attempt's bytes (`output_bytes`). The
append checks the claim is live and under the limit, and moves the count, in one UPDATE
of the claim's row: on PostgreSQL that row's lock orders it against whatever ends the
claim on another writer, so no byte lands after the end a reader was told of. An
append writes no event (Watch is not flooded); the wake hub hears of it by fence
(`Wakes.output`), and so of a claim's end: each job that ends a claim names its fence
there, so only that claim's followers look again.
"""

from __future__ import annotations

import sqlite3
from typing import NamedTuple

from .. import errors
from ..txn import Txn
from .dialect import sql
from .tasks.ends import live_claim


class Appended(NamedTuple):
    """An append's answer: the claim's attempt number and its output's size after it."""

    attempt: int
    size: int


class OutputAttempt(NamedTuple):
    """The claim whose output a reader asked for, as it stands."""

    seq: int  # the task's
    fence: int
    attempt: int
    size: int  # bytes stored
    ended: bool  # the claim ended: `size` is final


class OutputPage(NamedTuple):
    """Output read from an offset: `data` (at most what was asked), and the claim's size
    and whether it had ended as the read found it."""

    data: bytes
    size: int
    ended: bool


def append_output(tx: Txn, teammate: str, task_id: str, token: str, data: bytes, max_bytes: int) -> Appended:
    """Adds `data` (1 byte to the append limit, checked by the caller) at the end of the
    output of the caller's live claim. Refused as any stale call about a claim is, or with
    OutputLimit when the attempt's output would pass `max_bytes`; a refusal writes nothing."""
    live = live_claim(tx, teammate, task_id, token)
    statements = sql(tx.conn)
    size = len(data)
    row = tx.conn.execute(statements.output.APPEND, (size, live.fence, size, max_bytes)).fetchone()
    if row is None:
        stored, outcome = tx.conn.execute(statements.output.CLAIM_OUTPUT, (live.fence,)).fetchone()
        if outcome is not None:  # it ended on another writer since: say how, as any call would
            live_claim(tx, teammate, task_id, token)
            raise errors.ClaimTokenMismatch(f"claim on task {task_id!r} already ended ({outcome})", id=task_id)
        raise errors.OutputLimit(
            f"task {task_id!r}: this attempt's output holds {stored} bytes; {size} more would pass the"
            f" limit of {max_bytes}",
            id=task_id,
        )
    total, attempt = row
    tx.conn.execute(statements.output.INSERT_CHUNK, (live.fence, total - size, data))
    tx.wakes.output.add(live.fence)
    return Appended(attempt, total)


def attempt_of_token(conn: sqlite3.Connection, token: str) -> int:
    """The attempt number of the claim with `token` (0 if none): an append sent again is
    answered from its record, which keeps the size alone."""
    row = conn.execute(sql(conn).output.ATTEMPT_OF_TOKEN, (token,)).fetchone()
    return 0 if row is None else row[0]


def find_attempt(conn: sqlite3.Connection, task_id: str, attempt: int, reader: str | None = None) -> OutputAttempt:
    """The claim of the task whose attempt number is `attempt` (the latest of them where
    claims that used no attempt share it), or the task's latest claim for 0. A teammate
    (`reader`) may read only its own tasks and their dependencies (`may_tail`)."""
    statements = sql(conn)
    task = conn.execute(statements.output.TASK_SEQ, (task_id,)).fetchone()
    if task is None:
        raise errors.TaskNotFound(f"no task {task_id!r}", id=task_id)
    seq = task[0]
    if reader is not None and not may_tail(conn, reader, seq):
        raise errors.PermissionDenied(
            f"task {task_id!r} is not yours: a teammate may read the output of the tasks it holds or held"
            " and of their dependencies"
        )
    if attempt == 0:
        row = conn.execute(statements.output.LATEST_CLAIM, (seq,)).fetchone()
    else:
        row = conn.execute(statements.output.NUMBERED_CLAIM, (seq, attempt)).fetchone()
    if row is None:
        which = "no claim yet" if attempt == 0 else f"no attempt {attempt}"
        raise errors.AttemptNotFound(f"task {task_id!r} has {which}", id=task_id)
    fence, number, size, outcome = row
    return OutputAttempt(seq, fence, number, size, outcome is not None)


def may_tail(conn: sqlite3.Connection, teammate: str, seq: int) -> bool:
    """Whether a teammate may read the task's output: it holds or held the task, or one
    that depends on it."""
    return bool(conn.execute(sql(conn).output.MAY_TAIL, (seq, teammate, seq, teammate)).fetchone()[0])


def read_output(conn: sqlite3.Connection, fence: int, offset: int, limit: int, chunk_max: int) -> OutputPage:
    """Up to `limit` bytes of the claim's output from `offset`, and its size and end as
    this read found them. Every stored chunk holds at most `chunk_max` bytes, so the one
    holding `offset` starts after `offset - chunk_max`: only the rows needed are read."""
    statements = sql(conn)
    size, outcome = conn.execute(statements.output.CLAIM_OUTPUT, (fence,)).fetchone()
    # The claim's row first: every chunk within `size` committed with it, or before.
    end = min(size, offset + limit)
    pieces: list[bytes] = []
    if offset < end:
        for pos, data in conn.execute(statements.output.CHUNKS, (fence, offset - chunk_max, end)).fetchall():
            data = bytes(data)
            lo, hi = max(offset, pos), min(end, pos + len(data))
            if lo < hi:
                pieces.append(data[lo - pos : hi - pos])
    found = b"".join(pieces)
    if len(found) != end - offset:
        raise errors.CorralError(f"output of claim {fence} is missing bytes in [{offset}, {end})")
    return OutputPage(found, size, outcome is not None)
