"""Big CPU steps of a request run on a worker thread, small ones inline.

Converting, checking and digesting a batch of 10,000 tasks is pure Python
and takes tens to hundreds of milliseconds; on the event loop it would hold
every other call for that long. On a worker thread the loop still runs: the
interpreter hands the GIL back to it every switch interval (1 ms, set at
start). A thread hop costs about 0.1 ms, so small requests stay inline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# Below these a step runs inline: a few hundred microseconds of work, less
# than the hop would add to the call's latency.
INLINE_ITEMS = 256  # tasks plus dependencies of a batch
INLINE_BYTES = 64 * 1024  # of a request to parse


async def run(step: Callable[[], T], *, inline: bool) -> T:
    """`step()`, on a worker thread unless `inline`."""
    if inline:
        return step()
    return await asyncio.to_thread(step)
