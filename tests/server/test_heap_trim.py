"""Giving back what big requests leave in the heap (overload/heap.py): one trim after
a burst of big requests, another for those answered while it ran, none for small ones."""

from __future__ import annotations

import asyncio
import threading

import pytest

from corrald.overload import heap
from corrald.overload.heap import BIG_REQUEST_BYTES, HeapTrim

pytestmark = pytest.mark.timeout(30)


class FakeTrim:
    """Stands for malloc_trim: counts its calls; each blocks until `release` is set."""

    def __init__(self) -> None:
        self.calls = 0
        self.started = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def __call__(self, pad: int) -> int:
        assert pad == 0
        self.calls += 1
        self.started.set()
        assert self.release.wait(10), "the test never let the trim finish"
        return 1


async def idle(trimmer: HeapTrim) -> None:
    await asyncio.wait_for(trimmer.until_idle(), 10)


def test_a_burst_of_big_requests_is_followed_by_one_trim():
    async def main() -> int:
        fake = FakeTrim()
        trimmer = HeapTrim(fake, delay_s=0.01)
        for _ in range(24):
            trimmer.after_request(6 * BIG_REQUEST_BYTES)
        await idle(trimmer)
        assert trimmer.trims == 1
        return fake.calls

    assert asyncio.run(main()) == 1


def test_small_requests_ask_for_no_trim():
    async def main() -> None:
        trimmer = HeapTrim(FakeTrim(), delay_s=0)
        for _ in range(100):
            trimmer.after_request(BIG_REQUEST_BYTES - 1)
        assert trimmer.idle, "nothing was scheduled"

    asyncio.run(main())


def test_a_big_request_answered_while_a_trim_runs_gets_another_after_it():
    async def main() -> int:
        fake = FakeTrim()
        fake.release.clear()
        trimmer = HeapTrim(fake, delay_s=0)
        trimmer.after_request(BIG_REQUEST_BYTES)
        await asyncio.to_thread(fake.started.wait, 10)
        trimmer.after_request(BIG_REQUEST_BYTES)  # freed after the running trim looked
        trimmer.after_request(BIG_REQUEST_BYTES)
        fake.release.set()
        await idle(trimmer)
        return fake.calls

    assert asyncio.run(main()) == 2


def test_without_malloc_trim_nothing_is_scheduled(monkeypatch):
    monkeypatch.setattr(heap, "_malloc_trim", lambda: None)

    async def main() -> bool:
        trimmer = HeapTrim(delay_s=0)
        trimmer.after_request(6 * BIG_REQUEST_BYTES)
        return trimmer.idle  # nothing was scheduled

    assert asyncio.run(main())


def test_the_thresholds_are_fixed_on_this_c_library():
    assert heap.fix_thresholds(), "glibc's mallopt refused M_MMAP_THRESHOLD"
