"""Web logins: sessions behind a random cookie, one-time login tickets, and the
failed-login limit per peer.

A session holds the identity its credential proved, never the credential. Each
identity's sessions are bounded on their own (the lead's apart from all viewers'),
so one identity's logins never end another's sessions. A
viewer removed on the board (`Board.viewer_removed`) loses its sessions at once.
Sessions outlive a restart: they are kept in the state directory (`web.sessions`,
0600) by the hash of their cookie, never the cookie itself, so a page open
across a restart reconnects and catches up instead of being logged out.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import logging
import os
import pathlib
import secrets
import time
from collections.abc import Callable

from ..credentials import Identity
from .config import (
    LOGIN_FAILURES_PER_MINUTE,
    SESSION_TTL_S,
    SESSIONS_LEAD_MAX,
    SESSIONS_MAX,
    SESSIONS_PER_VIEWER,
    TICKET_TTL_S,
)

Clock = Callable[[], float]
log = logging.getLogger("corrald.web")


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


@dataclasses.dataclass(frozen=True, slots=True)
class Session:
    id: str  # the cookie's value; "" for a session restored after a restart (only its digest was kept)
    identity: Identity
    csrf: str  # sent back in a header by every action: a cross-site form cannot know it
    expires_at: float


class Sessions:
    """Live sessions by the hash of their cookie id, oldest first.

    The lead holds at most `lead_limit` sessions and each viewer `per_viewer`: a
    login past its identity's bound ends that identity's oldest session. All viewers
    together hold at most `limit - lead_limit`; a viewer's login past that is refused
    (`open` answers None) rather than ending anyone else's session.

    With a `path`, the table is kept there and read back at start, dropping what
    expired and what `still_valid` no longer vouches for (a viewer removed meanwhile).
    """

    def __init__(
        self,
        clock: Clock = time.time,  # wall time: an expiry must mean the same after a restart
        ttl_s: float = SESSION_TTL_S,
        limit: int = SESSIONS_MAX,
        lead_limit: int = SESSIONS_LEAD_MAX,
        per_viewer: int = SESSIONS_PER_VIEWER,
        path: pathlib.Path | None = None,
        still_valid: Callable[[Identity], bool] = lambda identity: True,
    ) -> None:
        self._clock = clock
        self._ttl_s = ttl_s
        self._lead_limit = lead_limit
        self._per_viewer = per_viewer
        self._viewers_limit = limit - lead_limit
        self._path = path
        self._by_digest: dict[str, Session] = {}
        if path is not None:
            self._load(path, still_valid)

    def _own_limit(self, identity: Identity) -> int:
        return self._lead_limit if identity.is_lead else self._per_viewer

    def open(self, identity: Identity) -> Session | None:
        """A new session of `identity`, or None when the viewers' sessions are all taken."""
        self._drop_expired()
        own = [digest for digest, s in self._by_digest.items() if s.identity == identity]
        if len(own) >= self._own_limit(identity):
            for digest in own[: len(own) - self._own_limit(identity) + 1]:
                del self._by_digest[digest]
        elif not identity.is_lead and self.viewer_count >= self._viewers_limit:
            return None
        session = Session(secrets.token_urlsafe(32), identity, secrets.token_urlsafe(24), self._clock() + self._ttl_s)
        self._by_digest[_digest(session.id)] = session
        self._save()
        return session

    @property
    def viewer_count(self) -> int:
        return sum(1 for s in self._by_digest.values() if not s.identity.is_lead)

    def _drop_expired(self) -> None:
        now = self._clock()
        for digest, session in list(self._by_digest.items()):
            if session.expires_at <= now:
                del self._by_digest[digest]

    def find(self, session_id: str | None) -> Session | None:
        digest = _digest(session_id or "")
        session = self._by_digest.get(digest)
        if session is None:
            return None
        if session.expires_at <= self._clock():
            del self._by_digest[digest]
            self._save()
            return None
        return session

    def close(self, session_id: str) -> None:
        if self._by_digest.pop(_digest(session_id), None) is not None:
            self._save()

    def revoke(self, identity: Identity) -> None:
        for digest, session in list(self._by_digest.items()):
            if session.identity == identity:
                del self._by_digest[digest]
        self._save()

    def _save(self) -> None:
        if self._path is None:
            return
        kept = {
            digest: {
                "name": s.identity.name,
                "lead": s.identity.is_lead,
                "viewer": s.identity.is_viewer,
                "csrf": s.csrf,
                "expires_at": s.expires_at,
            }
            for digest, s in self._by_digest.items()
        }
        partial = self._path.with_name(self._path.name + ".tmp")
        partial.unlink(missing_ok=True)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(kept))  # dumps is the C encoder; dump to a file is not
        os.replace(partial, self._path)

    def _load(self, path: pathlib.Path, still_valid: Callable[[Identity], bool]) -> None:
        try:
            kept = json.loads(path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as error:
            log.warning("web sessions not restored from %s: %s", path, error)
            return
        now = self._clock()
        for digest, s in kept.items():
            identity = Identity(s["name"], bool(s["lead"]), is_viewer=bool(s["viewer"]))
            if s["expires_at"] > now and still_valid(identity):
                # The id itself is not kept; a restored session is found by its digest.
                self._by_digest[digest] = Session("", identity, s["csrf"], s["expires_at"])
        self._trim()
        self._save()

    def _trim(self) -> None:
        """Keeps the newest sessions within the bounds (a table kept under other bounds)."""
        held: collections.Counter[Identity] = collections.Counter()
        viewers = 0
        for digest, session in reversed(list(self._by_digest.items())):
            identity = session.identity
            if held[identity] >= self._own_limit(identity) or (not identity.is_lead and viewers >= self._viewers_limit):
                del self._by_digest[digest]
                continue
            held[identity] += 1
            viewers += not identity.is_lead


class Tickets:
    """One-time login tickets a lead mints for a link (`/login#ticket=...`): each opens
    one session of the identity that minted it, within its time."""

    def __init__(self, clock: Clock = time.monotonic, ttl_s: float = TICKET_TTL_S, limit: int = 64) -> None:
        self._clock = clock
        self._ttl_s = ttl_s
        self._limit = limit
        self._by_value: dict[str, tuple[Identity, float]] = {}

    def mint(self, identity: Identity) -> str:
        now = self._clock()
        for value, (_, expires_at) in list(self._by_value.items()):
            if expires_at <= now:
                del self._by_value[value]
        while len(self._by_value) >= self._limit:
            del self._by_value[next(iter(self._by_value))]
        value = "corral-ticket-" + secrets.token_urlsafe(32)
        self._by_value[value] = (identity, now + self._ttl_s)
        return value

    def redeem(self, value: str) -> Identity | None:
        found = self._by_value.pop(value, None)
        if found is None or found[1] <= self._clock():
            return None
        return found[0]


class LoginLimiter:
    """More than `per_minute` failed logins within a minute from one peer: its next
    failures are answered 429 until the oldest failure is a minute old.

    It throttles failures only: a credential that proves the lead or a viewer logs in
    whatever this peer sent before (on loopback every local process is one peer), so
    nobody's bad logins can lock anyone out. While a peer is throttled its attempts
    are checked against the credentials in memory only, no read of the store.
    """

    def __init__(self, clock: Clock = time.monotonic, per_minute: int = LOGIN_FAILURES_PER_MINUTE) -> None:
        self._clock = clock
        self._per_minute = per_minute
        self._failures: dict[str, collections.deque[float]] = {}

    def _recent(self, peer: str) -> collections.deque[float]:
        failures = self._failures.setdefault(peer, collections.deque())
        horizon = self._clock() - 60
        while failures and failures[0] <= horizon:
            failures.popleft()
        return failures

    def retry_after_s(self, peer: str) -> int | None:
        """Seconds until this peer may try again, or None when it may now."""
        failures = self._recent(peer)
        if len(failures) < self._per_minute:
            if not failures:
                self._failures.pop(peer, None)
            return None
        return max(1, round(failures[0] + 60 - self._clock()))

    def failed(self, peer: str) -> None:
        if len(self._failures) > 4096:  # peers come and go: keep the table bounded
            self._failures.clear()
        self._recent(peer).append(self._clock())
