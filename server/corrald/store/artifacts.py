"""Artifacts: files the holder of a claim attaches to its task (PutArtifact).

The bytes are stored apart, before the attach, by the driver's blob store
(`sqlite/blobs.py`: files beside the database; `postgres/blobs.py`: rows of the
board's database), named by their SHA-256. The attach is one small writer job:
the claim is still live, the content's size counts toward the board's quota
once (`artifact_contents` lists each content an artifact names, and meta's
`artifact_bytes` sums their sizes, moved in one UPDATE that also checks the
quota), and one row of `artifacts` names the content. The history keeps every
row; a task's current artifact of a name is its latest row of that name.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import NamedTuple

from .. import errors
from ..model import ArtifactRecord
from ..txn import Txn
from .dialect import sql
from .events import emit
from .output import may_tail
from .tasks.ends import live_claim, live_claim_at


class Uploaded(NamedTuple):
    """What an upload stored: its bytes' size and SHA-256 (lowercase hex), under a
    checked name and media type."""

    name: str
    media_type: str
    size: int
    sha256: str


def check_claim(conn: sqlite3.Connection, now_ms: int, teammate: str, task_id: str, token: str) -> None:
    """Raises as any stale call about a claim is refused, unless the caller's claim is live
    as of `now_ms` (a read: `attach` checks it again)."""
    live_claim_at(conn, now_ms, teammate, task_id, token)


def attach(tx: Txn, teammate: str, task_id: str, token: str, upload: Uploaded, quota: int) -> ArtifactRecord:
    """Attaches stored content to the task as an artifact of the caller's live claim's
    attempt. Refused as any stale call is when the claim is not live, and with
    ArtifactQuota when content no artifact named before would take the board's stored
    bytes past `quota`; a refusal writes nothing."""
    live = live_claim(tx, teammate, task_id, token)
    statements = sql(tx.conn).artifacts
    (attempt,) = tx.conn.execute(statements.CLAIM_ATTEMPT, (live.fence,)).fetchone()
    if tx.conn.execute(statements.ADD_CONTENT, (upload.sha256, upload.size)).fetchone() is not None:
        grown = tx.conn.execute(statements.GROW_STORE, (upload.size, upload.size, quota)).fetchone()
        if grown is None:
            (stored,) = tx.conn.execute(statements.STORED_BYTES).fetchone()
            raise errors.ArtifactQuota(
                f"the board stores {stored} bytes of artifacts; {upload.size} more would pass its quota of {quota}",
                id=task_id,
            )
    tx.conn.execute(
        statements.INSERT,
        (live.seq, attempt, upload.name, upload.media_type, upload.size, upload.sha256, tx.now_ms, teammate),
    )
    record = ArtifactRecord(upload.name, upload.media_type, upload.size, upload.sha256, attempt, tx.now_ms)
    emit(
        tx,
        "artifact_added",
        {
            "task_id": task_id,
            "teammate": teammate,
            "name": record.name,
            "media_type": record.media_type,
            "size": record.size,
            "sha256": record.sha256,
            "attempt": record.attempt,
        },
    )
    return record


def _record(row: Iterable) -> ArtifactRecord:
    return ArtifactRecord._make(row)


def find(conn: sqlite3.Connection, task_id: str, name: str, reader: str | None = None) -> ArtifactRecord:
    """The task's current artifact of that name. A teammate (`reader`) may read only its
    own tasks and their dependencies, as TailOutput."""
    task = conn.execute(sql(conn).output.TASK_SEQ, (task_id,)).fetchone()
    if task is None:
        raise errors.TaskNotFound(f"no task {task_id!r}", id=task_id)
    (seq,) = task
    if reader is not None and not may_tail(conn, reader, seq):
        raise errors.PermissionDenied(
            f"task {task_id!r} is not yours: a teammate may read the artifacts of the tasks it holds or held"
            " and of their dependencies"
        )
    row = conn.execute(sql(conn).artifacts.CURRENT_BY_NAME, (seq, name)).fetchone()
    if row is None:
        raise errors.ArtifactNotFound(f"task {task_id!r} has no artifact {name!r}", id=task_id)
    return _record(row)


def history(conn: sqlite3.Connection, seq: int) -> list[tuple[ArtifactRecord, str]]:
    """Every artifact the task was given, oldest first, each with the teammate that attached it."""
    return [(_record(row[:6]), row[6]) for row in conn.execute(sql(conn).artifacts.HISTORY, (seq,))]


def stored_bytes(conn: sqlite3.Connection) -> int:
    """The sizes of the contents artifacts name, each counted once (what the quota bounds)."""
    return conn.execute(sql(conn).artifacts.STORED_BYTES).fetchone()[0]


def named_contents(conn: sqlite3.Connection) -> set[str]:
    """The SHA-256 of every content some artifact names (a blob store keeps these)."""
    return {sha256 for (sha256,) in conn.execute(sql(conn).artifacts.NAMED_CONTENTS)}
