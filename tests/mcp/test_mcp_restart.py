"""A daemon restart under a working bridge: the stream comes back, the held claim with it
(design §5 step 1), and the model finishes the task it already had."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import corral
import corral.aio
from tests.support import wait_until_async

from .mcpkit import Secrets, bridge_agent


@pytest.mark.timeout(60)
def test_a_daemon_restart_keeps_the_claim_and_the_task_completes(tmp_path: Path) -> None:
    state = tmp_path / "state"

    async def scenario() -> None:
        lead = await corral.aio.Lead.launch(state)
        new = await lead.add_teammate("steady")
        secrets = Secrets({lead.token, new.token})
        await lead.create_tasks([corral.TaskSpec("survivor", description="keep going")])
        address = lead.address
        async with bridge_agent(address, new.token, secrets) as agent:
            claim = await agent.ok("next_item", wait_seconds=5)
            assert claim["claim"]["task_id"] == "survivor"
            await lead.close()  # stops the daemon
            down = await agent.call("get_task", task_id="survivor")
            assert down.is_error and down.text.startswith("UNAVAILABLE:"), down.text
            lead = await corral.aio.Lead.launch(state)
            try:
                seen: list[dict] = []

                async def reconnected() -> bool:
                    result = await agent.call("next_item", wait_seconds=2)
                    assert not result.is_error or result.text.startswith("UNAVAILABLE:"), result.text
                    seen.append(result.data)
                    return not result.is_error

                await _eventually(reconnected, 20)
                # The claim re-sent on the new stream is recognised by its token, not handed out again.
                assert seen[-1]["kind"] == "none", seen[-1]
                await agent.ok("complete_task", task_id="survivor", result="made it")
                task = await lead.get_task("survivor")
                assert (task.state, task.attempt, task.result) == (corral.TaskState.COMPLETED, 1, b"made it")
            finally:
                await lead.close()

    asyncio.run(scenario())


async def _eventually(attempt, timeout: float) -> None:
    outcome: list[bool] = []

    async def tried() -> bool:
        outcome.append(await attempt())
        return outcome[-1]

    done = asyncio.Event()

    async def loop() -> None:
        while not await tried():
            await asyncio.sleep(0.2)
        done.set()

    runner = asyncio.create_task(loop())
    try:
        await wait_until_async(done, timeout, "the call to succeed after the restart")
    finally:
        runner.cancel()
