"""The roster: teammates, their roles and credentials, joining and leaving."""

from __future__ import annotations

import json
import sqlite3

from .. import errors
from ..model import (
    ClaimEndReason,
    ClaimOutcome,
    TaskCreation,
    TeammateRecord,
    TeammateStatus,
)
from ..txn import Txn
from . import usage
from .claim_ends import removal_note
from .dialect import sql
from .events import emit
from .status import refresh_status
from .tasks import release_all, stored_roles, work_waited_for


def add_teammate(tx: Txn, name: str, roles: tuple[str, ...], require_plan: bool, token_hash: bytes) -> TeammateRecord:
    if tx.conn.execute(sql(tx.conn).TEAMMATE_EXISTS, (name,)).fetchone():
        raise errors.AlreadyExists(f"teammate {name!r} exists", field="name")
    tx.conn.execute(
        sql(tx.conn).INSERT_TEAMMATE,
        (name, token_hash, json.dumps(list(roles)), int(require_plan), int(TeammateStatus.OFFLINE), tx.now_ms),
    )
    teammate = get_teammate(tx.conn, name)
    emit(tx, "teammate_changed", {"name": name, "status": int(teammate.status), "reason": "added"})
    tx.wakes.note("added", teammate=name, roles=",".join(roles) or "-")
    return teammate


def rotate_token(tx: Txn, name: str, token_hash: bytes) -> None:
    """Gives a teammate a new credential, the old one dead from this commit on (a retried
    AddTeammate: the first answer, which carried the old one, was lost)."""
    changed = tx.conn.execute(sql(tx.conn).ROTATE_TEAMMATE_TOKEN, (token_hash, name)).rowcount
    if not changed:
        raise errors.FailedPrecondition(f"teammate {name!r} was removed since this request added it", name=name)
    tx.wakes.credentials = True  # the other daemons forget the old credential
    tx.wakes.note("credential_replaced", teammate=name)


def teammate_row(conn: sqlite3.Connection, name: str, *, lock: bool = False) -> tuple:
    """(roles, require_plan, removed, online, status, acked_seq, last_seq); TeammateNotFound if none.
    `lock`: the transaction is about to change what the teammate may receive (its inbox, its
    shutdown, its removal), and holds the teammate's row until it ends (`row_lock`)."""
    statements = sql(conn)
    row = conn.execute(statements.TEAMMATE_ROW + (statements.row_lock() if lock else ""), (name,)).fetchone()
    if row is None:
        raise errors.TeammateNotFound(f"no teammate {name!r}", name=name)
    return row


def get_teammate(conn: sqlite3.Connection, name: str) -> TeammateRecord:
    roles, require_plan, _, _, status, _, _ = teammate_row(conn, name)
    (served_by,) = conn.execute(sql(conn).SERVED_BY, (name,)).fetchone()
    held = tuple(r[0] for r in conn.execute(sql(conn).HELD_TASK_IDS, (name,)))
    role_list = stored_roles(roles)
    waiting_for = tuple(work_waited_for(conn, name, role_list)) if status == TeammateStatus.WAITING else ()
    spent, budget = usage.of_teammate(conn, name)
    (policy,) = conn.execute(sql(conn).graph.TASK_CREATION_OF, (name,)).fetchone()
    return TeammateRecord(
        name,
        role_list,
        bool(require_plan),
        TeammateStatus(status),
        held,
        waiting_for,
        usage=spent,
        budget=budget,
        daemon=served_by,
        task_creation=TaskCreation(policy),
    )


def list_teammates(conn: sqlite3.Connection, after: int = 0, limit: int = -1) -> list[tuple[int, TeammateRecord]]:
    """Teammates in the order they were added, after position `after`, each with its
    position (the page token's cursor); `limit` -1 means all."""
    statements = sql(conn)
    if limit >= 0:
        rows = conn.execute(statements.TEAMMATES_AFTER_LIMIT, (after, limit))
    else:
        rows = conn.execute(statements.TEAMMATES_AFTER, (after,))
    return [(position, get_teammate(conn, name)) for position, name in rows.fetchall()]


def roles_of(conn: sqlite3.Connection, name: str) -> tuple[str, ...]:
    return stored_roles(teammate_row(conn, name)[0])


def credentials(conn: sqlite3.Connection) -> list[tuple[bytes, str, bool]]:
    """(token hash, name, removed) for every teammate ever minted."""
    return [(h, n, bool(r)) for h, n, r in conn.execute("SELECT token_hash, name, removed FROM teammates")]


def credential(conn: sqlite3.Connection, token_hash: bytes) -> str | None:
    """The name of the teammate, not removed, whose token has this hash."""
    row = conn.execute(sql(conn).CREDENTIAL, (token_hash,)).fetchone()
    return None if row is None else row[0]


def remove_teammate(tx: Txn, name: str, why: str = "removed") -> TeammateRecord:
    if teammate_row(tx.conn, name, lock=True)[2]:
        return get_teammate(tx.conn, name)
    release_all(tx, name, ClaimOutcome.REVOKED, removal_note(name), notice=ClaimEndReason.TEAMMATE_REMOVED)
    tx.conn.execute(sql(tx.conn).REMOVE_TEAMMATE, (name,))
    tx.conn.execute(sql(tx.conn).ANSWER_SHUTDOWNS_OF, (name,))
    tx.wakes.ended[name] = why
    refresh_status(tx, name, reason="removed")
    tx.wakes.note("removed", teammate=name, why=why)
    return get_teammate(tx.conn, name)


def set_online(tx: Txn, name: str, online: bool, reason: str | None = None, *, served_by: str = "") -> int:
    """Records the teammate's stream opened (`served_by`: the daemon serving it, on a board
    several daemons serve) or gone. Returns the teammate's stream epoch, which an opening
    advances: the new stream's, against which every check of a stream is made."""
    (epoch,) = tx.conn.execute(
        sql(tx.conn).SET_ONLINE,
        (int(online), served_by if online else "", int(online), name),
    ).fetchone()
    why = reason or ("joined" if online else "left")
    if online:
        tx.wakes.streams_opened.add(name)
    refresh_status(tx, name, reason=why, force=reason is not None)
    tx.wakes.note("joined" if online else "left", teammate=name, why=why)
    return epoch


def mark_all_offline(tx: Txn) -> None:
    for (name,) in tx.conn.execute("SELECT name FROM teammates WHERE online = 1").fetchall():
        set_online(tx, name, False)
