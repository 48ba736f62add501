"""How late the event loop runs: the lateness of a short periodic timer.

Every call, stream write and wake-up waits for the loop; a step that holds it
(a big parse, a long conversion) shows here as lag, whatever caused it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib


class LoopLag:
    def __init__(self, interval_s: float = 0.01, samples: int = 4096) -> None:
        self._interval_s = interval_s
        self._lag_ms: collections.deque[float] = collections.deque(maxlen=samples)
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._tick(), name="corral-loop-lag")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self._interval_s
            await asyncio.sleep(self._interval_s)
            self._lag_ms.append(max(0.0, loop.time() - due) * 1000)

    def p99_ms(self) -> float:
        ordered = sorted(self._lag_ms)
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else 0.0

    def max_ms(self) -> float:
        return max(self._lag_ms, default=0.0)
