"""Bad input is refused with InvalidArgument naming the field, and nothing is written."""

from __future__ import annotations

import pytest

from corrald import errors
from corrald.config import HOUR_MS, KIB, MIB
from corrald.model import TaskState
from tests.support.boardkit import spec

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def seeded(board):
    """A board holding a PENDING, a FAILED and a CANCELED task."""
    board.add("w")
    board.create(spec("ok"), spec("failed", max_attempts=1, priority=5), spec("canceled"))
    grant = board.claim("w")
    assert grant.task.id == "failed"
    board.fail("w", "failed", grant.token, retryable=False)
    board.cancel("canceled")
    assert board.state("failed") is TaskState.FAILED and board.state("canceled") is TaskState.CANCELED
    return board


GOOD = spec("good")

BAD_BATCHES = {
    "cycle": ([GOOD, spec("x", "y"), spec("y", "z"), spec("z", "x")], "depends_on", "cycle"),
    "self-dependency": ([GOOD, spec("x", "x")], "tasks[1].depends_on", "itself"),
    "unknown dependency": ([GOOD, spec("x", "ghost")], "tasks[1].depends_on", "ghost"),
    "dependency on FAILED": ([GOOD, spec("x", "failed")], "tasks[1].depends_on", "FAILED"),
    "dependency on CANCELED": ([GOOD, spec("x", "ok", "canceled")], "tasks[1].depends_on", "CANCELED"),
    "duplicate id in batch": ([GOOD, spec("x"), spec("x")], "tasks[2].id", "duplicate"),
    "dependency named twice": ([GOOD, spec("x", "ok", "ok")], "tasks[1].depends_on", "twice"),
    "title too long": ([GOOD, spec("x", title="t" * 201)], "tasks[1].title", "200"),
    "description too long": ([GOOD, spec("x", description="d" * (64 * KIB + 1))], "tasks[1].description", ""),
    "description too long in utf-8 bytes": (
        [GOOD, spec("x", description="é" * (32 * KIB + 1))],
        "tasks[1].description",
        "",
    ),
    "payload too large": ([GOOD, spec("x", payload=b"p" * (MIB + 1))], "tasks[1].payload", ""),
    "too many deps": ([GOOD, spec("x", *[f"d{i}" for i in range(1001)])], "tasks[1].depends_on", "1000"),
    "lease below 1 s": ([GOOD, spec("x", lease_ms=999)], "tasks[1].lease_duration", ""),
    "lease above 24 h": ([GOOD, spec("x", lease_ms=24 * HOUR_MS + 1)], "tasks[1].lease_duration", ""),
    "negative lease": ([GOOD, spec("x", lease_ms=-1)], "tasks[1].lease_duration", ""),
    "max_attempts above 100": ([GOOD, spec("x", max_attempts=101)], "tasks[1].max_attempts", ""),
    "negative max_attempts": ([GOOD, spec("x", max_attempts=-1)], "tasks[1].max_attempts", ""),
    "priority out of range": ([GOOD, spec("x", priority=10**9)], "tasks[1].priority", ""),
    "empty id": ([GOOD, spec("")], "tasks[1].id", "empty"),
    "id with whitespace": ([GOOD, spec("a b")], "tasks[1].id", ""),
    "id too long": ([GOOD, spec("i" * 129)], "tasks[1].id", ""),
    "bad required_role": ([GOOD, spec("x", required_role="two words")], "tasks[1].required_role", ""),
    "empty dependency name": ([GOOD, spec("x", "")], "tasks[1].depends_on", ""),
    "empty batch": ([], "tasks", "empty"),
    "batch too large": ([spec(f"t{i}") for i in range(10_001)], "tasks", "10000"),
}


@pytest.mark.parametrize("case", list(BAD_BATCHES), ids=list(BAD_BATCHES))
def test_bad_batch_is_refused_naming_the_field_and_writes_nothing(seeded, case):
    batch, field, words = BAD_BATCHES[case]
    counts, dump = seeded.counts(), seeded.dump()
    with pytest.raises(errors.InvalidArgument) as caught:
        seeded.create(*batch)
    error = caught.value
    if field.startswith("tasks["):
        assert error.field == field
    else:
        assert error.field.endswith(field)
    assert error.metadata["field"] == error.field
    assert words in error.description
    assert seeded.counts() == counts
    assert seeded.dump() == dump


def test_bad_batch_with_request_id_records_nothing_so_the_id_stays_usable(seeded):
    with pytest.raises(errors.InvalidArgument):
        seeded.create(spec("x", "ghost"), request_id="req")
    assert seeded.scalar("SELECT count(*) FROM create_requests") == 0
    assert [t.id for t in seeded.create(spec("x"), request_id="req")] == ["x"]


def test_request_id_too_long(board):
    with pytest.raises(errors.InvalidArgument) as caught:
        board.create(spec("a"), request_id="r" * 129)
    assert caught.value.field == "request_id"
    assert board.scalar("SELECT count(*) FROM tasks") == 0


def test_boundary_values_are_accepted(board):
    created = board.create(
        spec(
            "a",
            title="t" * 200,
            lease_ms=1000,
            max_attempts=100,
            description="d" * (64 * KIB),
            payload=b"p" * MIB,
            priority=1_000_000,
        ),
        spec("b", lease_ms=24 * HOUR_MS, max_attempts=1, priority=-1_000_000),
    )
    assert [(t.lease_ms, t.max_attempts) for t in created] == [(1000, 100), (24 * HOUR_MS, 1)]


def test_a_thousand_dependencies_are_accepted(board):
    board.create(*[spec(f"d{i}") for i in range(1000)])
    (task,) = board.create(spec("x", *[f"d{i}" for i in range(1000)]))
    assert len(task.depends_on) == 1000
    assert board.scalar("SELECT unmet_deps FROM tasks WHERE id = 'x'") == 1000


def test_cycle_through_a_long_chain_is_found(board):
    chain = [spec(f"c{i}", f"c{i + 1}") for i in range(50)] + [spec("c50", "c0")]
    with pytest.raises(errors.InvalidArgument) as caught:
        board.create(*chain)
    path = " → ".join(f"c{i}" for i in range(51))
    assert caught.value.description == f"dependency cycle: {path} → c0"
    assert caught.value.field == "tasks[0].depends_on"
    assert board.scalar("SELECT count(*) FROM tasks") == 0


def test_the_cycle_printed_is_a_cycle_even_beside_tasks_stuck_behind_it(board):
    # x waits on the cycle a → c → b → a without being on it.
    with pytest.raises(errors.InvalidArgument) as caught:
        board.create(spec("x", "a"), spec("a", "c"), spec("b", "a"), spec("c", "b"))
    assert caught.value.description == "dependency cycle: a → c → b → a"
    assert caught.value.field == "tasks[1].depends_on"


@pytest.mark.parametrize(
    ("name", "roles"),
    [("lead", ()), ("*", ()), ("", ()), ("a b", ()), ("ok", ("bad role",)), ("ok", tuple(f"r{i}" for i in range(33)))],
)
def test_bad_teammate_is_refused(board, name, roles):
    before = board.dump()
    with pytest.raises(errors.InvalidArgument) as caught:
        board.add(name, roles)
    assert caught.value.field in ("name", "roles")
    assert board.dump() == before


def test_oversize_texts_elsewhere_are_refused(board):
    board.add("w")
    board.create(spec("a"))
    grant = board.claim("w")
    before = board.dump()
    big = "x" * (64 * KIB + 1)
    for call, field in (
        (lambda: board.send("lead", "w", big), "body"),
        (lambda: board.fail("w", "a", grant.token, big), "error"),
        (lambda: board.run(board.board.submit_plan("w", big)), "plan"),
        (lambda: board.run(board.board.request_shutdown("w", big, 0)), "reason"),
        (lambda: board.complete("w", "a", grant.token, b"r" * (MIB + 1)), "result"),
        (lambda: board.run(board.board.request_shutdown("w", "", 999)), "grace"),
        (lambda: board.run(board.board.request_shutdown("w", "", 24 * HOUR_MS + 1)), "grace"),
        (lambda: board.send("lead", "", "hi"), "to"),
    ):
        with pytest.raises(errors.InvalidArgument) as caught:
            call()
        assert caught.value.field == field
    assert board.dump() == before
