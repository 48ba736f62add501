"""What bad input gets: an isError result naming the field, never a protocol error or a no-op."""

from __future__ import annotations

import asyncio

import pytest

import corral

from .mcpkit import bridge_agent

FAIL = {"error": "x", "retryable": True}


@pytest.mark.timeout(30)
def test_bad_arguments_are_refused_naming_the_field(board, secrets, mint) -> None:
    name, token = mint(roles=["bad"])
    task_id = f"{name}-t"
    board.create_tasks([corral.TaskSpec(task_id, required_role="bad")])

    async def scenario() -> None:
        async with bridge_agent(board.address, token, secrets) as agent:
            cases = [
                ("no_such_tool", {}, "UNKNOWN_TOOL:", "no_such_tool"),
                ("get_task", {}, "INVALID_ARGUMENT:", "task_id: missing"),
                ("get_task", {"task_id": 7}, "INVALID_ARGUMENT:", "task_id"),
                ("get_task", {"task_id": task_id, "offset": "3"}, "INVALID_ARGUMENT:", "offset"),
                ("list_tasks", {"owner": "x", "forged": True}, "INVALID_ARGUMENT:", "forged: not an argument"),
                ("next_item", {"wait_seconds": 0}, "INVALID_ARGUMENT:", "wait_seconds"),
                ("next_item", {"wait_seconds": 51}, "INVALID_ARGUMENT:", "wait_seconds"),
                ("next_item", {"wait_seconds": 1, "owner": "someone"}, "INVALID_ARGUMENT:", "owner"),
                ("complete_task", {"task_id": "nope", "result": "x"}, "NOT_HELD:", "nope"),
                ("release_task", {"task_id": task_id}, "NOT_HELD:", task_id),
                ("list_tasks", {"states": ["DONE"]}, "INVALID_ARGUMENT:", "states.0"),
                (
                    "renew_lease",
                    {"task_id": task_id, "progress_fraction": 2.0},
                    "INVALID_ARGUMENT:",
                    "progress_fraction",
                ),
            ]
            for tool, arguments, reason, mentions in cases:
                text = await agent.error(tool, **arguments)
                assert text.startswith(reason) and mentions in text, (tool, arguments, text)
            claim = await agent.ok("next_item", wait_seconds=5)
            assert claim["claim"]["task_id"] == task_id
            for tool, more in (("renew_lease", {}), ("complete_task", {"result": "x"}), ("fail_task", FAIL)):
                for field in ("input_tokens", "output_tokens", "cost_micros"):
                    # Past int64, which the wire's fields hold: refused here, naming the field.
                    text = await agent.error(tool, task_id=task_id, usage={field: 2**70}, **more)
                    assert text.startswith("INVALID_ARGUMENT:") and f"usage.{field}" in text, (tool, field, text)
            forged = await agent.error("complete_task", task_id=task_id, result="x", claim_token="guess")
            assert "claim_token: not an argument" in forged
            huge = await agent.error("complete_task", task_id=task_id, result="x" * (1024 * 1024 + 1))
            assert huge.startswith("INVALID_ARGUMENT: result:")
            missing = await agent.error("get_task", task_id="never-made")
            assert missing.startswith("NOT_FOUND:")
            await agent.ok("complete_task", task_id=task_id, result="fine")

    asyncio.run(scenario())
    done = board.get_task(task_id)
    assert done.result == b"fine" and done.usage == corral.Usage()  # no refused report was counted


@pytest.mark.timeout(30)
def test_lead_tool_inputs_are_checked_before_and_by_the_daemon(board, secrets) -> None:
    async def scenario() -> None:
        async with bridge_agent(board.address, board.token, secrets) as lead:
            text = await lead.error(
                "create_tasks", tasks=[{"id": "c1", "depends_on": ["c2"]}, {"id": "c2", "depends_on": ["c1"]}]
            )
            assert text.startswith("INVALID_ARGUMENT:") and "c1" in text
            text = await lead.error("create_tasks", tasks=[{"id": "u1", "colour": "red"}])
            assert "colour: not an argument" in text
            text = await lead.error("watch_events", after_seq=-1)
            assert "after_seq" in text
            for tool, arguments, field in (
                ("watch_events", {"after_seq": 2**70}, "after_seq"),
                ("set_budget", {"teammate": "anyone", "max_tokens": 2**70}, "max_tokens"),
                ("set_budget", {"teammate": "anyone", "max_cost_micros": 2**63}, "max_cost_micros"),
            ):
                text = await lead.error(tool, **arguments)  # past int64: refused here, naming the field
                assert text.startswith("INVALID_ARGUMENT:") and field in text, (tool, text)
            text = await lead.error("request_shutdown", name="nobody-here", reason="x")
            assert text.startswith("NOT_FOUND:")

    asyncio.run(scenario())
