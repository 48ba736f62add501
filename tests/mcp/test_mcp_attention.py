"""What a busy model learns without asking, what it reports, and how much text it gets:
attention, claim_ended, progress and usage, acknowledgement timing, the 32 KiB cap."""

from __future__ import annotations

import asyncio

import pytest

import corral

from .mcpkit import bridge_agent


@pytest.mark.timeout(30)
def test_a_busy_model_hears_of_a_shutdown_and_inbox_items_wait_for_the_next_call(board, secrets, mint) -> None:
    name, token = mint(roles=["busy"])
    task_id = f"{name}-long"
    board.create_tasks([corral.TaskSpec(task_id, required_role="busy")])

    async def scenario() -> None:
        async with bridge_agent(board.address, token, secrets) as agent:
            assert (await agent.ok("next_item", wait_seconds=5))["kind"] == "claim"
            board.send_message(name, "first")
            board.request_shutdown(name, reason="stop soon")
            renewed = await _until_attention(agent, task_id)
            assert any("call next_item" in note for note in renewed["attention"]), renewed
            message = await agent.ok("next_item", wait_seconds=5)
            assert message["kind"] == "message"
            # Shown but not yet acknowledged: the model has not called next_item since.
            status = await agent.ok("my_status")
            assert status["gate"] == "protocol_unacknowledged", status
            shutdown = await agent.ok("next_item", wait_seconds=5)
            assert shutdown["kind"] == "shutdown_request"
            await agent.ok("renew_lease", task_id=task_id, progress="halfway", progress_fraction=0.5)
            await agent.ok("fail_task", task_id=task_id, error="stopping", retryable=True, usage={"input_tokens": 7})
            request_id = shutdown["shutdown_request"]["request_id"]
            await agent.ok("respond_shutdown", request_id=request_id, approve=False, reason="one more")

    asyncio.run(scenario())
    task = board.get_task(task_id)
    assert task.progress == "halfway" and task.progress_fraction == 0.5 and task.usage.input_tokens == 7


async def _until_attention(agent, task_id: str) -> dict:
    for _ in range(100):
        result = await agent.ok("renew_lease", task_id=task_id)
        if result.get("attention"):
            return result
        await asyncio.sleep(0.02)
    raise AssertionError("no attention in 100 renewals")


@pytest.mark.timeout(30)
def test_a_revoked_claim_arrives_as_claim_ended_and_finishing_it_says_so(board, secrets, mint) -> None:
    name, token = mint(roles=["revoked"])
    task_id = f"{name}-taken"
    board.create_tasks([corral.TaskSpec(task_id, required_role="revoked", description="x" * 40_000)])

    async def scenario() -> None:
        async with bridge_agent(board.address, token, secrets) as agent:
            shown = await agent.call("next_item", wait_seconds=5)
            assert len(shown.text.encode()) <= 32 * 1024  # the text rendering is capped too
            description = shown.data["claim"]["task"]["description"]
            assert description["truncated"] is True and len(description["text"]) < 32 * 1024
            page = await agent.ok("get_task", task_id=task_id, offset=description["next_offset"])
            rest = page["task"]["description"]
            assert rest["offset"] == description["next_offset"] and rest["text"] == "x" * (40_000 - rest["offset"])
            board.revoke_claim(task_id, "reassigning")
            ended = await agent.ok("next_item", wait_seconds=5)
            assert ended["kind"] == "claim_ended" and ended["claim_ended"]["reason"] == "REVOKED", ended
            late = await agent.error("complete_task", task_id=task_id, result="mine anyway")
            assert late.startswith("CLAIM_REVOKED:")

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_calls_run_beside_a_waiting_next_item_and_next_items_queue_in_order(board, secrets, mint) -> None:
    name, token = mint(roles=["conc"])

    async def scenario() -> None:
        async with bridge_agent(board.address, token, secrets) as agent:
            waiting = asyncio.create_task(agent.ok("next_item", wait_seconds=3))
            second = asyncio.create_task(agent.ok("next_item", wait_seconds=1))
            status = await asyncio.wait_for(agent.ok("my_status"), 2)  # not stuck behind the long poll
            assert status["name"] == name and not waiting.done()
            board.create_tasks([corral.TaskSpec(f"{name}-1", required_role="conc")])
            first_item = await waiting
            assert first_item["kind"] == "claim"
            assert (await second)["kind"] == "none"  # served after the first: the claim went there
            await agent.ok("complete_task", task_id=f"{name}-1", result="ok")

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_an_item_is_acknowledged_only_by_the_next_call_so_a_bridge_gone_before_it_shows_it_again(
    board, secrets, mint
) -> None:
    name, token = mint(roles=["acks"])

    async def scenario() -> None:
        board.send_message(name, "first")
        board.send_message(name, "second")
        async with bridge_agent(board.address, token, secrets) as agent:
            assert (await agent.ok("next_item", wait_seconds=5))["message"]["body"]["text"] == "first"
        # The model never called next_item after seeing "first": it was not acknowledged.
        async with bridge_agent(board.address, token, secrets) as agent:
            assert (await agent.ok("next_item", wait_seconds=5))["message"]["body"]["text"] == "first"
            assert (await agent.ok("next_item", wait_seconds=5))["message"]["body"]["text"] == "second"
        # The call that returned "second" acknowledged "first", and no more.
        async with bridge_agent(board.address, token, secrets) as agent:
            assert (await agent.ok("next_item", wait_seconds=5))["message"]["body"]["text"] == "second"
            assert (await agent.ok("next_item", wait_seconds=1))["kind"] == "none"

    asyncio.run(scenario())
