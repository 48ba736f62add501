"""Lead.watch's timeout, which the asyncio Lead gained when both Leads became one source."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

import corral
import corral.aio


@pytest.mark.timeout(60)
def test_aio_watch_replays_then_times_out(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with await corral.aio.Lead.launch(tmp_path / "state") as lead:
            await lead.create_tasks([corral.TaskSpec("a"), corral.TaskSpec("b")])
            seen: list[str] = []
            with pytest.raises(TimeoutError, match="timeout"):
                async with contextlib.aclosing(lead.watch(0, timeout=0.5)) as feed:
                    async for event in feed:
                        if isinstance(event, corral.TaskChanged):
                            seen.append(event.task.id)
            assert seen == ["a", "b"], "the replay arrives before the deadline ends the stream"
            with pytest.raises(TimeoutError, match="^wait_until_done: "):
                await lead.wait_until_done(timeout=0.5)

    asyncio.run(scenario())
