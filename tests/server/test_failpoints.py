"""Failpoints as a daemon under test reads them from CORRAL_FAILPOINTS."""

from __future__ import annotations

import sqlite3

import pytest

from corrald import failpoints

pytestmark = pytest.mark.timeout(10)


@pytest.fixture(autouse=True)
def _no_failpoints():
    failpoints.disable()
    yield
    failpoints.disable()


def fires(name: str) -> bool:
    try:
        failpoints.hit(name)
    except sqlite3.OperationalError:
        return True
    return False


def test_a_count_fires_once_and_a_count_with_plus_fires_from_then_on():
    failpoints.load_from_env({"CORRAL_FAILPOINTS": "once=error:2, from=error:2+, always=error"})
    assert [fires("once") for _ in range(4)] == [False, True, False, False]
    assert [fires("from") for _ in range(4)] == [False, True, True, True]
    assert [fires("always") for _ in range(2)] == [True, True]


def test_sleep_takes_its_duration_then_its_count(caplog):
    failpoints.load_from_env({"CORRAL_FAILPOINTS": "job:slow=sleep:1:2"})
    with caplog.at_level("WARNING", logger="corrald.failpoints"):
        for _ in range(3):
            failpoints.hit("job:slow")
    assert [record.getMessage() for record in caplog.records] == ["failpoint: sleeping 1 ms"]
