"""Path leases through the MCP bridge: create_tasks and propose_tasks take resources as
DAG files do, next_item shows a claim's resources, get_task shows what a waiting task
waits for (the holder), and a bad resource is an isError naming the task and field,
with nothing written."""

from __future__ import annotations

import asyncio

import pytest

import corral

from .mcpkit import bridge_agent


@pytest.mark.timeout(30)
def test_next_item_shows_the_claims_resources_and_get_task_the_holder_waited_for(board, secrets, mint) -> None:
    first, first_token = mint(roles=["edit"])
    _, onlooker_token = mint(roles=["onlooker"])  # takes none of these tasks, so never races ada for one
    merge, api = f"{first}-merge", f"{first}-api"
    repo = f"repo:{first}"

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, board.token, secrets) as lead,
            bridge_agent(board.address, first_token, secrets) as ada,
            bridge_agent(board.address, onlooker_token, secrets) as onlooker,
        ):
            tasks = [
                {"id": merge, "required_role": "edit", "priority": 5, "resources": [repo]},
                {"id": api, "required_role": "edit", "resources": [f"{repo}/src/api"], "shared_resources": ["db:x"]},
            ]
            assert (await lead.ok("create_tasks", tasks=tasks))["task_ids"] == [merge, api]
            claim = (await ada.ok("next_item", wait_seconds=5))["claim"]
            assert claim["task_id"] == merge
            assert (claim["task"]["resources"], claim["task"]["shared_resources"]) == ([repo], [])
            waiting = (await onlooker.ok("get_task", task_id=api))["task"]
            assert (waiting["resources"], waiting["shared_resources"]) == ([f"{repo}/src/api"], ["db:x"])
            assert waiting["waiting_for"]["resources"] == [
                {"resource": f"{repo}/src/api", "held_by_task_id": merge, "held_resource": repo, "held_exclusive": True}
            ]
            await ada.ok("complete_task", task_id=merge, result="merged")
            # Freed, the waiting task is handed over with the completion (ada is the only teammate of its role).
            second = (await ada.ok("next_item", wait_seconds=10))["claim"]
            assert second["task_id"] == api and second["task"]["shared_resources"] == ["db:x"]
            assert "waiting_for" not in second["task"]
            await ada.ok("complete_task", task_id=api, result="done")

    asyncio.run(scenario())
    assert board.get_task(api).state is corral.TaskState.COMPLETED


@pytest.mark.timeout(30)
def test_a_bad_resource_is_an_error_naming_the_task_and_field_and_nothing_is_written(board, secrets, mint) -> None:
    name, token = mint(roles=["prop"])
    board.create_tasks([corral.TaskSpec(f"{name}-held", required_role="prop")])
    before = [task.id for task in board.list_tasks()]

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, board.token, secrets) as lead,
            bridge_agent(board.address, token, secrets) as mate,
        ):
            for tasks, mentions in (
                ([{"id": f"{name}-a"}, {"id": f"{name}-b", "resources": ["repo:web//src"]}], "resources[0]"),
                ([{"id": f"{name}-a", "shared_resources": ["repo:web/../x"]}], "shared_resources[0]"),
                ([{"id": f"{name}-a", "resources": ["a"], "shared_resources": ["a/b"]}], "shared_resources[0]"),
                ([{"id": f"{name}-a", "resources": [f"p/{i}" for i in range(17)]}], "more than 16"),
                ([{"id": f"{name}-a", "resources": "repo:web"}], "resources"),
                ([{"id": f"{name}-a", "resources": [""]}], "resources[0]"),
            ):
                text = await lead.error("create_tasks", tasks=tasks)
                assert text.startswith("INVALID_ARGUMENT:") and mentions in text, (tasks, text)
            assert (await mate.ok("next_item", wait_seconds=5))["claim"]["task_id"] == f"{name}-held"
            text = await mate.error("propose_tasks", tasks=[{"id": f"{name}-p", "resources": ["x/./y"]}])
            assert text.startswith("INVALID_ARGUMENT:") and f"task '{name}-p'" in text and "resources[0]" in text
            assert [task.id for task in board.list_tasks()] == before, "nothing was written"
            proposed = await mate.ok(
                "propose_tasks", tasks=[{"id": f"{name}-p", "resources": [f"repo:{name}/docs"]}], task_id=f"{name}-held"
            )
            assert proposed["task_ids"] == [f"{name}-p"]
            await mate.ok("complete_task", task_id=f"{name}-held", result="ok")

    asyncio.run(scenario())
    assert board.get_task(f"{name}-p").resources == (f"repo:{name}/docs",)
