"""Idle opens of one teammate are spaced apart (overload/reopen.py)."""

from __future__ import annotations

import asyncio

import pytest

from corrald.overload.reopen import REOPEN_SPACING_S, ReopenSpacing

pytestmark = pytest.mark.timeout(15)


async def settle():
    """Lets ready callbacks run."""
    for _ in range(3):
        await asyncio.sleep(0)


def test_a_teammate_reopening_idle_in_a_loop_is_spaced_out():
    """Opens of one teammate's Idle stream are REOPEN_SPACING_S apart; others are not held up."""

    async def test(spacing):
        loop = asyncio.get_running_loop()
        await spacing.turn("looper")  # the first open goes at once
        started = loop.time()
        second = asyncio.ensure_future(spacing.turn("looper"))
        other = asyncio.ensure_future(spacing.turn("calm"))
        await settle()
        assert other.done() and not second.done()
        await asyncio.wait_for(second, 5)
        assert loop.time() - started >= REOPEN_SPACING_S * 0.99  # the loop clock may round

    asyncio.run(test(ReopenSpacing()))


def test_teammates_whose_turn_has_passed_are_forgotten():
    """Memory follows the teammates that opened lately, not every teammate ever seen."""
    now = [0.0]
    spacing = ReopenSpacing(clock=lambda: now[0])

    async def open_once_each(count: int) -> None:
        for n in range(count):
            await spacing.turn(f"t{n}")  # never waits: each teammate opens once
            now[0] += 1.0

    asyncio.run(open_once_each(5000))
    assert len(spacing._next_open) <= 1024 + 2
