"""Open streams of one kind (boards' event streams, drawers' output streams), bounded
per identity.

At most `clients_max` in all; viewers together below the whole, so the lead always
finds a free slot, and each viewer at most `per_viewer`. A slot is taken before the
stream's first await and given back in `finally` (`held`).
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterator

from aiohttp import web

from ..credentials import Identity
from .config import WebConfig
from .guard import json_error

RETRY_AFTER_S = 5


class StreamSlots:
    def __init__(self, config: WebConfig, noun: str) -> None:
        self._config = config
        self._noun = noun  # what the refusals call one stream: "boards", "output streams"
        self._held: collections.Counter[Identity] = collections.Counter()

    def refusal(self, identity: Identity) -> web.Response | None:
        """Why `identity` may not open one more stream now, or None when it may."""
        config, noun = self._config, self._noun
        retry = {"Retry-After": str(RETRY_AFTER_S)}
        if self._held.total() >= config.feed_clients_max:
            return json_error(503, f"too many open {noun} (at most {config.feed_clients_max})", retry)
        if identity.is_lead:
            return None
        if self._held[identity] >= config.feed_per_viewer:
            return json_error(429, f"this viewer has {config.feed_per_viewer} {noun} open already; close one", retry)
        viewers = sum(held for holder, held in self._held.items() if not holder.is_lead)
        if viewers >= config.feed_clients_max - config.feed_lead_reserved:
            return json_error(
                503,
                f"viewers have {viewers} {noun} open, all they may; the other"
                f" {config.feed_lead_reserved} are kept for the lead",
                retry,
            )
        return None

    @contextlib.contextmanager
    def held(self, identity: Identity) -> Iterator[None]:
        self._held[identity] += 1
        try:
            yield
        finally:
            self._held[identity] -= 1
            if not self._held[identity]:
                del self._held[identity]
