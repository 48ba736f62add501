"""How claims ended, read back from the claim history: the notices a holder may have missed.

A claim that dies under its holder is told to the holder's stream by the commit
that ended it (`Wakes.claims_ended`; on a PostgreSQL board, to the other daemons
in that commit's NOTIFY). A daemon that may have missed such a notice (it heard
nothing for a while: docs/postgres.md, "Gaps in what a daemon heard") asks the
history instead. The history is the one record of how a claim ended, so the
notice read here is the one the commit would have carried.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Collection

from ..model import ClaimEnd, ClaimEndReason, ClaimOutcome
from .dialect import sql

# The endings that were not the holder's doing, and the notice each gives. A removal
# ends its teammate's claims REVOKED with `removal_note` as their error.
_NOTICES = {
    ClaimOutcome.EXPIRED: ClaimEndReason.LEASE_EXPIRED,
    ClaimOutcome.TIMED_OUT: ClaimEndReason.ATTEMPT_TIMEOUT,
    ClaimOutcome.CANCELED: ClaimEndReason.TASK_CANCELED,
    ClaimOutcome.REVOKED: ClaimEndReason.REVOKED,
}


def removal_note(name: str) -> str:
    """What the history says of each claim a teammate's removal ended."""
    return f"teammate {name!r} was removed"


@dataclasses.dataclass(frozen=True, slots=True)
class EndedClaims:
    """Of the claims asked about, those that ended, and the teammates asked about that are removed."""

    # token -> the notice its holder gets, or None when the holder ended it (completed,
    # failed, released: it knows). In claim order.
    ends: dict[str, ClaimEnd | None]
    removed: frozenset[str]


def ended_claims(conn: sqlite3.Connection, tokens: Collection[str], teammates: Collection[str]) -> EndedClaims:
    """How each of `tokens`' claims ended, if it did, and which of `teammates` are removed.

    One indexed lookup per token (the token is unique), so a daemon asks about
    every claim its open streams hold in one read."""
    ends: dict[str, ClaimEnd | None] = {}
    if tokens:
        rows = conn.execute(
            sql(conn).ENDED_CLAIMS,
            (json.dumps(sorted(tokens)),),
        )
        for token, task_id, outcome, error, holder, removed in rows:
            reason = _NOTICES.get(ClaimOutcome(outcome))
            if reason == ClaimEndReason.REVOKED and removed and error == removal_note(holder):
                reason = ClaimEndReason.TEAMMATE_REMOVED
            ends[token] = None if reason is None else ClaimEnd(task_id, token, reason, error)
    removed_names: frozenset[str] = frozenset()
    if teammates:
        removed_names = frozenset(
            name
            for (name,) in conn.execute(
                sql(conn).REMOVED_AMONG,
                (json.dumps(sorted(teammates)),),
            )
        )
    return EndedClaims(ends, removed_names)
