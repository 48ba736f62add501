"""The artifacts a task shows (Task.artifacts) and a claim carries of its dependencies
(Claim.dependency_artifacts): references, read in one statement for a page of tasks or
for a claim; the bytes stay in the blob store (store/artifacts.py)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable

from ...model import ArtifactRecord, TaskRecord
from ..dialect import sql


def current_of_tasks(conn: sqlite3.Connection, seqs: Iterable[int]) -> dict[int, tuple[ArtifactRecord, ...]]:
    """The current artifacts of each of the tasks `seqs` that has any, by name: one statement."""
    wanted = list(seqs)
    if not wanted:
        return {}
    found: dict[int, list[ArtifactRecord]] = {}
    for row in conn.execute(sql(conn).artifacts.CURRENT_OF_TASKS, (json.dumps(wanted),)):
        found.setdefault(row[0], []).append(ArtifactRecord._make(row[1:]))
    return {seq: tuple(records) for seq, records in found.items()}


def with_artifacts(conn: sqlite3.Connection, records: list[TaskRecord]) -> list[TaskRecord]:
    """`records`, each with its current artifacts (one statement for all of them)."""
    found = current_of_tasks(conn, (record.seq for record in records))
    if not found:
        return records
    return [record._replace(artifacts=found[record.seq]) if record.seq in found else record for record in records]


def current_of_dependencies(conn: sqlite3.Connection, task: TaskRecord) -> tuple[tuple[str, ArtifactRecord], ...]:
    """The current artifacts of the task's direct dependencies, (dependency id, artifact)
    in depends_on order: one indexed statement, and none for a task without dependencies."""
    if not task.depends_on:
        return ()
    rows = conn.execute(sql(conn).artifacts.CURRENT_OF_DEPENDENCIES, (task.seq,)).fetchall()
    return tuple((row[0], ArtifactRecord._make(row[1:])) for row in rows)
