"""A CreateTasks batch too big for one request goes in parts (corral._batches): each fits,
each task comes after the tasks of the batch it depends on, each part has a request id
of its own, and a batch that has no such order is refused before anything is sent."""

from __future__ import annotations

import pytest

from corral import _batches
from corral._errors import AlreadyExists, FieldViolation, InvalidArgument
from corral.v1 import corral_pb2 as pb
from corrald.config import MESSAGE_MAX_BYTES

pytestmark = pytest.mark.timeout(30)

KIB = 1024


def spec(task_id: str, *deps: str, size: int = 0) -> pb.TaskSpec:
    return pb.TaskSpec(id=task_id, title=task_id, payload=b"p" * size, depends_on=list(deps))


def batch(*specs: pb.TaskSpec, request_id: str = "") -> pb.CreateTasksRequest:
    return pb.CreateTasksRequest(tasks=list(specs), request_id=request_id)


def test_the_sdk_splits_at_the_daemons_limit():
    assert _batches.MESSAGE_MAX_BYTES == MESSAGE_MAX_BYTES


def test_a_batch_that_fits_is_sent_as_it_is():
    request = batch(spec("a"), spec("b", "a"), request_id="r")
    (only,) = _batches.parts(request)
    assert only.request is request and only.positions == (0, 1)


def test_parts_fit_keep_dependencies_behind_them_and_carry_every_task_once():
    # 12 specs of 30 KiB, each depending on the one after it: the last must go first.
    specs = [spec(f"t{i}", f"t{i + 1}", size=30 * KIB) for i in range(11)] + [spec("t11", size=30 * KIB)]
    request = batch(*specs, request_id="big")
    parts = _batches.parts(request, max_bytes=100 * KIB)
    assert len(parts) == 4
    assert sorted(p for part in parts for p in part.positions) == list(range(12))
    placed: set[str] = set()
    for part in parts:
        assert part.request.ByteSize() <= 100 * KIB
        assert [t.id for t in part.request.tasks] == [specs[p].id for p in part.positions]
        for task in part.request.tasks:
            assert all(dep in placed for dep in task.depends_on), f"{task.id} before its dependency"
            placed.add(task.id)
    assert [part.request.request_id for part in parts] == ["big#1/4", "big#2/4", "big#3/4", "big#4/4"]


def test_independent_tasks_keep_their_order():
    specs = [spec(f"t{i}", size=30 * KIB) for i in range(7)]
    parts = _batches.parts(batch(*specs), max_bytes=100 * KIB)
    assert [p for part in parts for p in part.positions] == list(range(7))
    assert all(part.request.request_id == "" for part in parts), "no request id: none made up"


def test_a_long_request_id_is_replaced_by_its_digest_within_the_daemons_bound():
    specs = [spec(f"t{i}", size=60 * KIB) for i in range(3)]
    ids = [part.request.request_id for part in _batches.parts(batch(*specs, request_id="r" * 128), 100 * KIB)]
    assert len(set(ids)) == 3 and all(len(i) <= 128 for i in ids)
    again = [part.request.request_id for part in _batches.parts(batch(*specs, request_id="r" * 128), 100 * KIB)]
    assert again == ids, "the same batch gets the same part ids: a retry replays"


def test_a_cycle_is_refused_before_anything_is_sent():
    specs = [spec("a", "c", size=60 * KIB), spec("b", "a", size=60 * KIB), spec("c", "b", size=60 * KIB)]
    with pytest.raises(InvalidArgument) as refused:
        _batches.parts(batch(*specs), max_bytes=100 * KIB)
    assert "dependency cycle: a → c → b → a" in str(refused.value)
    assert refused.value.field_violations[0].field == "tasks[0].depends_on"


def test_a_repeated_id_is_refused_before_anything_is_sent():
    with pytest.raises(InvalidArgument) as refused:
        _batches.parts(batch(spec("a", size=60 * KIB), spec("b", size=60 * KIB), spec("a")), max_bytes=100 * KIB)
    assert refused.value.field_violations == (FieldViolation("tasks[2].id", "duplicate id 'a'"),)


def test_a_spec_bigger_than_a_request_is_refused_before_anything_is_sent():
    with pytest.raises(InvalidArgument) as refused:
        _batches.parts(batch(spec("a", size=10 * KIB), spec("huge", size=200 * KIB)), max_bytes=100 * KIB)
    assert "tasks[1] ('huge')" in str(refused.value) and "nothing was sent" in str(refused.value)


def test_a_refused_part_names_the_batchs_positions_and_what_was_created():
    specs = [spec(f"t{i}", size=60 * KIB) for i in range(4)]
    parts = _batches.parts(batch(*reversed(specs)), max_bytes=100 * KIB)
    refused = InvalidArgument(
        "tasks[0].depends_on: unknown dependency 'ghost'",
        field_violations=[FieldViolation("tasks[0].depends_on", "unknown dependency 'ghost'")],
        metadata={"field": "tasks[0].depends_on"},
    )
    told = _batches.part_refused(refused, parts[2], parts[:2])
    position = parts[2].positions[0]
    assert told.field_violations[0].field == f"tasks[{position}].depends_on"
    assert told.metadata["field"] == f"tasks[{position}].depends_on"
    assert str(told).startswith(f"tasks[{position}].depends_on: unknown dependency 'ghost'")
    assert "the 2 before this one created 2 of its tasks" in str(told)
    first = _batches.part_refused(AlreadyExists("tasks[0].id: exists with a different spec"), parts[0], [])
    assert "nothing was created" in str(first) and f"tasks[{parts[0].positions[0]}].id" in str(first)
