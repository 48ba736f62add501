"""Viewers: read-only credentials, kept as token hashes."""

from __future__ import annotations

import sqlite3

from .. import errors
from ..model import ViewerRecord
from ..txn import Txn
from .dialect import sql


def add_viewer(tx: Txn, name: str, token_hash: bytes) -> ViewerRecord:
    if tx.conn.execute(sql(tx.conn).VIEWER_EXISTS, (name,)).fetchone():
        raise errors.AlreadyExists(f"viewer {name!r} exists", field="name")
    tx.conn.execute(sql(tx.conn).INSERT_VIEWER, (name, token_hash, tx.now_ms))
    tx.wakes.note("viewer_added", viewer=name)
    return ViewerRecord(name, tx.now_ms)


def rotate_token(tx: Txn, name: str, token_hash: bytes) -> None:
    """Gives a viewer a new credential, the old one dead from this commit on (a retried AddViewer)."""
    if tx.conn.execute(sql(tx.conn).ROTATE_VIEWER_TOKEN, (token_hash, name)).rowcount == 0:
        raise errors.FailedPrecondition(f"viewer {name!r} was removed since this request added it")
    tx.wakes.credentials = True
    tx.wakes.note("viewer_credential_replaced", viewer=name)


def remove_viewer(tx: Txn, name: str) -> None:
    if tx.conn.execute(sql(tx.conn).REMOVE_VIEWER, (name,)).rowcount == 0:
        raise errors.NotFound(f"no viewer {name!r}")
    tx.wakes.credentials = True
    tx.wakes.note("viewer_removed", viewer=name)


def list_viewers(conn: sqlite3.Connection) -> list[ViewerRecord]:
    rows = conn.execute("SELECT name, created_ms FROM viewers ORDER BY rowid").fetchall()
    return [ViewerRecord(name, created_ms) for name, created_ms in rows]


def credentials(conn: sqlite3.Connection) -> list[tuple[bytes, str]]:
    """(token hash, name) for every viewer."""
    return [(digest, name) for digest, name in conn.execute("SELECT token_hash, name FROM viewers")]


def credential(conn: sqlite3.Connection, token_hash: bytes) -> str | None:
    """The name of the viewer whose token has this hash."""
    row = conn.execute(sql(conn).VIEWER_CREDENTIAL, (token_hash,)).fetchone()
    return None if row is None else row[0]
