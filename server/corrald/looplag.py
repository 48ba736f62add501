"""How late the event loop runs: the lateness of a short periodic timer.

Every call, stream write and wake-up waits for the loop; a step that holds it
(a big parse, a long conversion) shows here as lag, whatever caused it.
"""

from __future__ import annotations

import asyncio
import collections


class LoopLag:
    def __init__(self, interval_s: float = 0.01, samples: int = 4096) -> None:
        self._interval_s = interval_s
        self._lag_ms: collections.deque[float] = collections.deque(maxlen=samples)
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        # A timer callback, not a task that sleeps: no coroutine step, future or
        # task wake-up per tick on a loop that serves every call.
        loop = asyncio.get_running_loop()
        self._arm(loop, loop.time() + self._interval_s)

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self, loop: asyncio.AbstractEventLoop, due: float) -> None:
        self._timer = loop.call_at(due, self._tick, loop, due)

    def _tick(self, loop: asyncio.AbstractEventLoop, due: float) -> None:
        now = loop.time()
        self._lag_ms.append(max(0.0, now - due) * 1000)
        self._arm(loop, now + self._interval_s)

    def p99_ms(self) -> float:
        ordered = sorted(self._lag_ms)
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else 0.0

    def max_ms(self) -> float:
        return max(self._lag_ms, default=0.0)
