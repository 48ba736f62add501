"""Refused calls are logged at most once a second per caller and reason, with a count of the rest."""

from __future__ import annotations

import logging

import pytest

from corrald import errors
from corrald.service.interceptor import RefusalLog

pytestmark = pytest.mark.timeout(30)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_flood_of_refusals_is_one_line_a_second_with_a_count(caplog):
    clock = Clock()
    refusals = RefusalLog(interval_s=1.0, clock=clock)
    overloaded = errors.Overloaded("writer queue full")
    with caplog.at_level(logging.INFO, logger="corrald.activity"):
        for _ in range(500):
            refusals.refused("flooder", overloaded)
        refusals.refused("honest", overloaded)  # another caller gets its own line
        clock.now += 1.0
        refusals.refused("flooder", overloaded)
    lines = [(r.activity["caller"], r.activity["more"]) for r in caplog.records]
    assert lines == [("flooder", 0), ("honest", 0), ("flooder", 499)]
    assert "and 499 more since the last line" in caplog.records[-1].getMessage()


def test_the_table_of_callers_stays_bounded():
    clock = Clock()
    refusals = RefusalLog(clock=clock)
    for number in range(10_000):
        refusals.refused(f"caller-{number}", errors.Unauthenticated("no"))
    assert len(refusals._last) <= 4097
