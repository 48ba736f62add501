"""Trace context on a real board: a valid W3C traceparent is stored and handed
out with the claim; anything else is refused with the field, nothing written. It
is telemetry, not part of the spec: a spec or batch sent again from another span
is the same one, and the task keeps the trace context it was created with."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from corrald import errors, validate
from corrald.model import CreatedBatch, TaskSpec
from tests.support.boardkit import spec as base_spec

pytestmark = pytest.mark.timeout(30)

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
OTHER = "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01"  # another span of the same trace


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


def test_trace_context_is_not_part_of_a_specs_digest(board):
    plain = validate.normalize_spec(0, base_spec("t"), board.limits, 0)
    assert validate.spec_digest(plain) == validate.spec_digest(dataclasses.replace(plain, trace_parent=VALID))
    assert validate.spec_digest(plain) != validate.spec_digest(dataclasses.replace(plain, title="other"))


def test_a_spec_sent_again_from_another_trace_is_the_same_spec(board):
    board.create(spec("t", VALID))
    before = board.snapshot()
    again = _create(board, spec("t", OTHER))
    assert again.unchanged_ids == ("t",)
    assert board.snapshot() == before, "nothing written"
    assert board.task("t").trace_parent == VALID, "the task keeps the trace context it was created with"
    assert _create(board, spec("t", "")).unchanged_ids == ("t",)
    with pytest.raises(errors.AlreadyExists):
        board.create(dataclasses.replace(spec("t", OTHER), title="another title"))


def test_a_batch_sent_again_with_its_request_id_from_another_trace_is_the_same_batch(board):
    first = _create(board, spec("a", VALID), spec("b", VALID), request_id="r1")
    before = board.snapshot()
    again = _create(board, spec("a", OTHER), spec("b", ""), request_id="r1")
    assert again.unchanged_ids == ("a", "b") and again.tasks == first.tasks
    assert board.snapshot() == before, "nothing written"
    assert [board.task(task_id).trace_parent for task_id in ("a", "b")] == [VALID, VALID]
    with pytest.raises(errors.AlreadyExists) as refused:
        _create(board, spec("a", OTHER), dataclasses.replace(spec("b", OTHER), title="another title"), request_id="r1")
    assert refused.value.metadata["field"] == "request_id"


def test_a_proposal_sent_again_from_another_trace_answers_as_before(board):
    board.add("w1")
    first = board.propose("w1", spec("x", VALID))
    before = board.snapshot()
    again = board.propose("w1", spec("x", OTHER))
    assert [task.seq for task in again.tasks] == [task.seq for task in first.tasks]
    assert board.snapshot() == before, "nothing written"
    assert board.task("x").trace_parent == VALID


def _older_digest(spec: TaskSpec, board) -> bytes:
    """A spec's digest as earlier versions stored it: its trace context counted, after the
    fields every spec has (this spec has the default time gates and nothing newer)."""
    done = validate.normalize_spec(0, spec, board.limits, 0)
    fields = [done.id, done.title, "", "", [], 0, done.max_attempts, done.lease_ms, ""]
    fields.append({"trace_parent": done.trace_parent})
    return hashlib.sha256(json.dumps(fields, separators=(",", ":")).encode()).digest()


def test_tasks_and_request_ids_stored_by_earlier_versions_are_recognised(board):
    # Tasks created before the trace context stopped counting: their stored digests
    # counted it, and so did the request id's batch digest made of them.
    old = [dataclasses.replace(spec(task_id, VALID), retry_backoff_ms=None) for task_id in ("a", "b")]
    _create(board, *old, request_id="r1")
    stored = [_older_digest(raw, board) for raw in old]
    for raw, digest in zip(old, stored, strict=True):
        board.rows("UPDATE tasks SET spec_digest = ? WHERE id = ?", (digest, raw.id))
    board.rows("UPDATE create_requests SET digest = ? WHERE request_id = 'r1'", (validate.batch_digest(stored),))
    board.restart()
    before = board.snapshot()
    resent = [dataclasses.replace(raw, trace_parent=OTHER) for raw in old]
    assert _create(board, *resent, request_id="r1").unchanged_ids == ("a", "b")
    assert _create(board, *resent).unchanged_ids == ("a", "b")
    assert _create(board, *old).unchanged_ids == ("a", "b")
    assert board.snapshot() == before, "nothing written"
    changed = dataclasses.replace(resent[1], title="another title")
    with pytest.raises(errors.AlreadyExists) as refused:
        _create(board, resent[0], changed, request_id="r1")
    assert refused.value.metadata["field"] == "request_id"
    with pytest.raises(errors.AlreadyExists) as refused:
        _create(board, changed)
    assert refused.value.metadata["field"] == "tasks[0].id"
    with pytest.raises(errors.AlreadyExists):
        _create(board, resent[0], request_id="r1")  # part of the batch is another batch
    assert board.snapshot() == before


def _create(board, *specs: TaskSpec, request_id: str = "") -> CreatedBatch:
    return board.run(board.board.create_batch(list(specs), request_id))
