"""Idle opens of one teammate are spaced apart.

A teammate opens Idle once, and again only after its stream broke. A client
reopening in a tight loop would make every open supersede the last, each
costing a few writer jobs; so a faster open waits its turn (the SDK's
reconnect backoff starts at 250 ms, well above the spacing). Event-loop only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

# Opens of one teammate are at least this far apart.
REOPEN_SPACING_S = 0.1


class ReopenSpacing:
    def __init__(self, spacing_s: float = REOPEN_SPACING_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._spacing_s = spacing_s
        self._clock = clock
        self._next_open: dict[str, float] = {}  # time before which a teammate's next open waits
        self._forget_above = 1024  # entries kept before those whose turn has passed are forgotten

    async def turn(self, name: str) -> None:
        """Waits until this teammate may open another Idle stream."""
        now = self._clock()
        turn = max(now, self._next_open.get(name, now))
        self._next_open[name] = turn + self._spacing_s
        if len(self._next_open) > self._forget_above:  # forget teammates whose turn is past
            self._next_open = {n: t for n, t in self._next_open.items() if t > now}
            # Twice what is left, so the sweep costs O(1) per open however many teammates open at once.
            self._forget_above = 2 * len(self._next_open) + 1024
        if turn > now:
            await asyncio.sleep(turn - now)
