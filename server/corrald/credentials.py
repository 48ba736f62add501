"""Credentials: who a bearer token proves, from this daemon's cache of the stored hashes.

Only a credential's hash is stored (`token_hash`); the cache maps each live hash to
its teammate or viewer, and the lead's hash is the state directory's (or the
PostgreSQL board's). A daemon of a shared board may meet a credential another
daemon minted a moment ago: one indexed read (`Credentials.read`) finds it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import secrets
from collections.abc import Callable
from typing import Any

from .store import team, viewers

# The roles a credential can have (GetIdentityResponse.role).
ROLE_LEAD = "lead"
ROLE_TEAMMATE = "teammate"
ROLE_VIEWER = "viewer"

LEAD = "lead"
VIEWER_PREFIX = "viewer:"  # a viewer's identity never shares a lane or a log name with a teammate's
TEAMMATE_PREFIX = "corral-tm-"
VIEWER_TOKEN_PREFIX = "corral-view-"

# What the store holds: every teammate's (hash, name, removed) and every viewer's (hash, name).
Stored = tuple[list[tuple[bytes, str, bool]], list[tuple[bytes, str]]]


@dataclasses.dataclass(frozen=True, slots=True)
class Identity:
    name: str  # "lead", a teammate's name, or "viewer:" and a viewer's name
    is_lead: bool
    is_viewer: bool = False

    @property
    def role(self) -> str:
        """What the credential may do, as GetIdentity names it."""
        return ROLE_LEAD if self.is_lead else ROLE_VIEWER if self.is_viewer else ROLE_TEAMMATE


def token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def mint(prefix: str) -> tuple[str, bytes]:
    """A new credential and its hash, the only part of it ever stored."""
    token = prefix + secrets.token_urlsafe(32)
    return token, token_hash(token)


def viewer_identity(name: str) -> Identity:
    return Identity(VIEWER_PREFIX + name, False, is_viewer=True)


def stored(conn) -> Stored:
    """Every credential of the board (a read, or a job's connection)."""
    return team.credentials(conn), viewers.credentials(conn)


def _stored_one(digest: bytes) -> Callable[[Any], tuple[str | None, str | None]]:
    return lambda conn: (team.credential(conn, digest), viewers.credential(conn, digest))


class Credentials:
    """The live credentials by hash. `read`, set on a board that other daemons serve too,
    runs a read of the store (blocking) for a hash the cache does not hold."""

    def __init__(self, lead_hash: bytes) -> None:
        self._lead_hash = lead_hash
        self._teammates: dict[bytes, str] = {}
        self._viewers: dict[bytes, str] = {}
        self.read: Callable[[Callable[[Any], Any]], Any] | None = None

    def load(self, credentials: Stored) -> list[Identity]:
        """Takes every stored credential in place of those held; returns the viewers gone since."""
        mates, watchers = credentials
        before = set(self._viewers.values())
        self._teammates = {digest: name for digest, name, removed in mates if not removed}
        self._viewers = dict(watchers)
        return [viewer_identity(name) for name in sorted(before - set(self._viewers.values()))]

    def authenticate(self, token: str, *, read_store: bool = True) -> Identity | None:
        return self.identity_of(token_hash(token), read_store=read_store)

    def identity_of(self, digest: bytes, *, read_store: bool = True) -> Identity | None:
        """Who the credential with this hash (`token_hash`) proves, if it is live.

        With `read_store` False, only the credentials this daemon holds in memory
        count (the lead's always): no read for a credential minted elsewhere.
        """
        if hmac.compare_digest(digest, self._lead_hash):
            return Identity(LEAD, True)
        name = self._teammates.get(digest)
        if name is not None:
            return Identity(name, False)
        viewer = self._viewers.get(digest)
        if viewer is not None:
            return viewer_identity(viewer)
        if read_store and self.read is not None:
            # Minted by another daemon of the board a moment ago, perhaps: one indexed read.
            mate, viewer = self.read(_stored_one(digest))
            if mate is not None:
                self._teammates[digest] = mate
                return Identity(mate, False)
            if viewer is not None:
                self._viewers[digest] = viewer
                return viewer_identity(viewer)
        return None

    def still_valid(self, identity: Identity) -> bool:
        """Whether the credential that proved `identity` is still live (for sessions kept across a restart)."""
        if identity.is_lead:
            return True
        if identity.is_viewer:
            return identity.name.removeprefix(VIEWER_PREFIX) in self._viewers.values()
        return identity.name in self._teammates.values()

    def grant_teammate(self, name: str, digest: bytes, *, only: bool = False) -> None:
        """Holds a teammate's new credential; with `only`, in place of any it had."""
        _grant(self._teammates, name, digest, only)

    def grant_viewer(self, name: str, digest: bytes, *, only: bool = False) -> None:
        _grant(self._viewers, name, digest, only)

    def forget_teammate(self, name: str) -> None:
        _forget(self._teammates, name)

    def forget_viewer(self, name: str) -> None:
        _forget(self._viewers, name)


def _grant(hashes: dict[bytes, str], name: str, digest: bytes, only: bool) -> None:
    if only:
        _forget(hashes, name)
    hashes[digest] = name


def _forget(hashes: dict[bytes, str], name: str) -> None:
    """Drops every credential of `name` from a cache of credentials by hash."""
    for digest, owner in list(hashes.items()):
        if owner == name:
            del hashes[digest]
