"""A batch bigger than one request may carry (the daemon's 6 MiB) is sent by the SDK in
parts, each task after the ones it depends on, and arrives whole."""

from __future__ import annotations

import pytest

import corral

MIB = 1024 * 1024
TASKS = 14  # of 1 MiB each: three parts (5, 5 and 4)


def chain() -> list[corral.TaskSpec]:
    """big-0 depends on big-1, ..., on big-13: the batch's first task can go only in its last part."""
    return [
        corral.TaskSpec(f"big-{i}", payload=bytes([i]) * MIB, depends_on=(f"big-{i + 1}",) if i + 1 < TASKS else ())
        for i in range(TASKS)
    ]


@pytest.mark.timeout(60)
def test_a_batch_too_big_for_one_request_arrives_whole_with_its_dependencies(lead: corral.Lead) -> None:
    specs = chain()
    created = lead.create_tasks(specs, request_id="big-chain")
    assert [t.id for t in created] == [s.id for s in specs]
    assert len({t.seq for t in created}) == TASKS
    for spec in specs:
        task = lead.get_task(spec.id)
        assert task.payload == spec.payload and task.depends_on == spec.depends_on
        assert task.state is corral.TaskState.PENDING
        waiting = task.waiting_for.dependencies if task.waiting_for else ()
        assert waiting == spec.depends_on, f"{spec.id} waits for {waiting}"
    # Sent again with its request id, part by part: the same tasks, nothing new.
    again = lead.create_tasks(specs, request_id="big-chain")
    assert [t.seq for t in again] == [t.seq for t in created]
    assert len(list(lead.list_tasks())) == TASKS


@pytest.mark.timeout(60)
def test_a_refused_part_names_the_batchs_task_and_says_what_the_parts_before_it_created(lead: corral.Lead) -> None:
    specs = chain()
    specs[0] = corral.TaskSpec("big-0", payload=b"\0" * MIB, depends_on=("big-1", "ghost"))  # in the last part
    with pytest.raises(corral.InvalidArgument) as refused:
        lead.create_tasks(specs)
    (violation,) = refused.value.field_violations
    assert violation.field == "tasks[0].depends_on" and "ghost" in violation.description
    # Five 1 MiB specs to a part: big-13 to big-9, big-8 to big-4, then big-3 to big-0, refused whole.
    assert "the 2 before this one created 10 of its tasks" in str(refused.value)
    assert sorted(t.id for t in lead.list_tasks()) == sorted(s.id for s in specs[4:])
    # The batch put right and sent again: the tasks already created are answered as they are.
    created = lead.create_tasks(chain())
    assert [t.id for t in created] == [f"big-{i}" for i in range(TASKS)]
    assert len(list(lead.list_tasks())) == TASKS


@pytest.mark.timeout(30)
def test_a_big_batch_with_a_cycle_is_refused_before_anything_is_sent(lead: corral.Lead) -> None:
    specs = chain()
    specs[-1] = corral.TaskSpec(f"big-{TASKS - 1}", payload=b"\0" * MIB, depends_on=("big-0",))
    with pytest.raises(corral.InvalidArgument) as refused:
        lead.create_tasks(specs)
    assert "dependency cycle" in str(refused.value) and "nothing was sent" in str(refused.value)
    assert list(lead.list_tasks()) == []
