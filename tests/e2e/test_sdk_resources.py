"""Path leases in the SDK's types, both flavours, against a real daemon: TaskSpec's
resources and shared_resources round-trip onto Task, a waiting task's
WaitingFor.resources names the holder (ResourceWait), Stats.held_resources lists what is
held (HeldResource), Watch's TaskChanged carries the task's resources, and a bad
resource is InvalidArgument naming the field."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

import corral
import corral.aio
from tests.support import FAST_POLL

pytestmark = pytest.mark.timeout(60)

SPECS = [
    corral.TaskSpec("merge", priority=5, resources=("repo:web",)),
    corral.TaskSpec("api", resources=("repo:web/src/api",), shared_resources=("db:staging",)),
]
WAIT = corral.ResourceWait(
    resource="repo:web/src/api", held_by_task_id="merge", held_resource="repo:web", held_exclusive=True
)


def test_the_sync_sdk_types_the_resources_the_waits_and_what_is_held(lead: corral.Lead) -> None:
    lead.create_tasks(SPECS)
    api = lead.get_task("api")
    assert (api.resources, api.shared_resources) == (("repo:web/src/api",), ("db:staging",))
    new = lead.add_teammate("ada")
    with corral.Teammate.connect(lead.address, new.token) as ada:
        with contextlib.closing(ada.idle(poll_interval=FAST_POLL)) as events:
            claim = next(event for event in events if isinstance(event, corral.Claim))
        assert claim.task.id == "merge" and claim.task.resources == ("repo:web",)
        waiting = lead.get_task("api").waiting_for
        assert waiting is not None and waiting.resources == (WAIT,)
        assert [t.waiting_for.resources for t in lead.list_tasks() if t.id == "api" and t.waiting_for] == [(WAIT,)]
        stats = lead.get_stats()
        assert stats.held_resources == (corral.HeldResource("repo:web", "merge", "ada", True),)
        assert stats.held_resources_total == 1
        claim.complete(b"merged")
    assert lead.get_stats().held_resources == ()
    changed = {}
    with contextlib.closing(lead.watch(0, timeout=15)) as events:
        for event in events:
            if isinstance(event, corral.TaskChanged):
                changed[event.task.id] = (event.task.resources, event.task.shared_resources)
                if event.task.id == "merge" and event.task.state is corral.TaskState.COMPLETED:
                    break
    assert changed == {"merge": (("repo:web",), ()), "api": (("repo:web/src/api",), ("db:staging",))}


def test_the_asyncio_sdk_types_them_too_and_a_bad_resource_names_its_field(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with await corral.aio.Lead.launch(tmp_path / "state") as lead:
            with pytest.raises(corral.InvalidArgument) as refused:
                await lead.create_tasks(
                    [corral.TaskSpec("bad", resources=("repo:web",), shared_resources=("repo:web",))]
                )
            assert [v.field for v in refused.value.field_violations] == ["tasks[0].shared_resources[0]"]
            assert [task async for task in lead.list_tasks()] == []
            await lead.create_tasks(SPECS)
            api = await lead.get_task("api")
            assert (api.resources, api.shared_resources) == (("repo:web/src/api",), ("db:staging",))
            new = await lead.add_teammate("bob")
            async with await corral.aio.Teammate.connect(lead.address, new.token) as bob:
                events = bob.idle(poll_interval=FAST_POLL)
                claim = None
                async for event in events:
                    if isinstance(event, corral.aio.Claim):
                        claim = event
                        break
                await events.aclose()
                assert claim is not None and claim.task.resources == ("repo:web",)
                waiting = (await lead.get_task("api")).waiting_for
                assert waiting is not None and waiting.resources == (WAIT,)
                held = (await lead.get_stats()).held_resources
                assert held == (corral.HeldResource("repo:web", "merge", "bob", True),)
                await claim.complete(b"merged")

    asyncio.run(scenario())
