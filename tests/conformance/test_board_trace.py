"""Trace context on a real board: a valid W3C traceparent is stored and handed
out with the claim; anything else is refused with the field, nothing written."""

from __future__ import annotations

import pytest

from corrald import errors
from corrald.model import TaskSpec
from tests.support.boardkit import spec as base_spec

pytestmark = pytest.mark.timeout(30)

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def spec(task_id: str, trace_parent: str) -> TaskSpec:
    raw = base_spec(task_id)
    return TaskSpec(**{**{name: getattr(raw, name) for name in raw.__slots__}, "trace_parent": trace_parent})


def test_a_traceparent_is_stored_and_handed_out_with_the_claim(board):
    board.add("w1")
    (created,) = board.create(spec("t", VALID))
    assert created.trace_parent == VALID
    assert board.claim("w1").task.trace_parent == VALID
    board.restart()
    assert board.task("t").trace_parent == VALID


def test_a_later_version_may_carry_more_fields(board):
    later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next"
    (created,) = board.create(spec("t", later))
    assert created.trace_parent == later


@pytest.mark.parametrize(
    "bad",
    [
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  # no flags
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",  # upper case
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero span id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # version 00 has four fields
        "not a trace",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + "x" * 600,  # too long
    ],
)
def test_anything_else_is_refused_and_nothing_written(board, bad):
    with pytest.raises(errors.InvalidArgument) as refused:
        board.create(base_spec("ok"), spec("t", bad))
    assert refused.value.field == "tasks[1].trace_parent"
    assert board.scalar("SELECT count(*) FROM tasks") == 0


def test_the_same_spec_with_another_trace_is_another_spec(board):
    board.create(spec("t", VALID))
    board.create(spec("t", VALID))
    with pytest.raises(errors.AlreadyExists):
        board.create(spec("t", VALID[:-2] + "00"))  # not sampled: another trace context
