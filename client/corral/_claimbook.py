"""Which claims a teammate client holds, so re-sent claims are not handed out twice.

On every new Idle stream the daemon re-sends the claims the teammate still
holds, with the same token. The book remembers held tokens, and a bounded
number of recently finished ones (a re-send can race a CompleteTask).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from corral._types import ClaimInfo

__all__ = ["ClaimBook"]

_REMEMBER_FINISHED = 4096


class _Refreshable(Protocol):
    def _refresh(self, info: ClaimInfo) -> None: ...


ClaimT = TypeVar("ClaimT", bound=_Refreshable)


class ClaimBook(Generic[ClaimT]):
    """Thread-safe map of claim token → claim handle."""

    def __init__(self, remember_finished: int = _REMEMBER_FINISHED) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, ClaimT] = {}
        self._finished: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._remember_finished = remember_finished

    def admit(self, info: ClaimInfo, make_claim: Callable[[ClaimInfo], ClaimT]) -> ClaimT | None:
        """A new handle for a first-seen claim; None for a re-send of a known one."""
        with self._lock:
            known = self._held.get(info.token)
            if known is not None:
                known._refresh(info)
                return None
            if info.token in self._finished:
                return None
            claim = make_claim(info)
            self._held[info.token] = claim
            return claim

    def forget(self, token: str) -> None:
        """The claim ended (finished or proven dead); remember its token for a while."""
        with self._lock:
            if self._held.pop(token, None) is None:
                return
            self._finished[token] = None
            while len(self._finished) > self._remember_finished:
                self._finished.popitem(last=False)

    def recently_held(self, token: str) -> bool:
        """True for a claim this client held and has let go of lately (finished, or
        proven dead by a call before the stream's notice of its end came)."""
        with self._lock:
            return token in self._finished

    def get(self, token: str) -> ClaimT | None:
        """The held claim with this token, if any."""
        with self._lock:
            return self._held.get(token)

    def held(self) -> list[ClaimT]:
        """The claims currently held, oldest first."""
        with self._lock:
            return list(self._held.values())
