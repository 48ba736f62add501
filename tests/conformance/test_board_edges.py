"""Results along edges on a real board: a claim carries its direct dependencies'
results, within 4 MiB in all, and names the ones left out."""

from __future__ import annotations

import pytest

from corrald.config import DEPENDENCY_RESULTS_MAX_BYTES, MIB
from corrald.stream import StreamState
from tests.support.boardkit import spec

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def team(board):
    board.add("w1")
    return board


def _complete(team, result: bytes) -> str:
    grant = team.claim("w1")
    team.complete("w1", grant.task.id, grant.token, result)
    return grant.task.id


def test_a_claim_carries_its_dependencies_results_in_depends_on_order(team):
    team.create(spec("x"), spec("y"), spec("z"), spec("t", "z", "x", "y"))
    for result in (b"from x", b"", b"from z"):
        _complete(team, result)
    grant = team.claim("w1")
    assert grant.task.id == "t"
    assert grant.dependency_results == (("z", b"from z"), ("x", b"from x"), ("y", b""))
    assert grant.dependency_results_omitted == ()


@pytest.mark.sqlite_only  # counts statements through SQLite's trace callback
def test_a_task_without_dependencies_asks_nothing_more(team):
    team.create(spec("alone"))
    statements: list[str] = []
    team.call(lambda tx: tx.conn.set_trace_callback(statements.append))
    try:
        grant = team.claim("w1")
    finally:
        team.call(lambda tx: tx.conn.set_trace_callback(None))
    assert grant.dependency_results == () and grant.dependency_results_omitted == ()
    assert not [s for s in statements if "FROM deps AS d JOIN" in s], statements


def test_results_past_four_mib_are_named_not_sent(team):
    size = MIB  # the largest result a task may have
    count = DEPENDENCY_RESULTS_MAX_BYTES // size + 2
    team.create(*(spec(f"d{i}") for i in range(count)), spec("wide", *(f"d{i}" for i in range(count))))
    for i in range(count):
        _complete(team, bytes([i]) * size)
    grant = team.claim("w1")
    kept = dict(grant.dependency_results)
    assert list(kept) == [f"d{i}" for i in range(count - 2)]
    assert sum(len(result) for result in kept.values()) == DEPENDENCY_RESULTS_MAX_BYTES
    assert kept["d1"] == b"\x01" * size
    assert grant.dependency_results_omitted == (f"d{count - 2}", f"d{count - 1}")


def test_a_held_claim_sent_again_carries_the_results_too(team):
    team.create(spec("a"), spec("b", "a"))
    _complete(team, b"A")
    (first,) = team.next_for("w1", StreamState(slots=1))
    (again,) = team.next_for("w1", StreamState(slots=1))  # a new stream re-sends what w1 holds
    assert first.token == again.token and again.dependency_results == (("a", b"A"),)
