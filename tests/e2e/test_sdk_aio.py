"""The asyncio clients against the real daemon."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from pathlib import Path

import pytest

import corral
import corral.aio
from tests.support import FAST_POLL

# Each test runs on both teammate transports (CORRAL_TRANSPORT=session, =idle).
pytestmark = pytest.mark.usefixtures("transport")

ONE_SECOND = datetime.timedelta(seconds=1)


@pytest.mark.timeout(60)
def test_aio_lead_and_teammate_round_trip(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with await corral.aio.Lead.launch(tmp_path / "state") as lead:
            await lead.create_tasks([corral.TaskSpec("a", payload=b"in"), corral.TaskSpec("b", depends_on=("a",))])
            with pytest.raises(corral.NotFound):
                await lead.get_task("zzz")
            new = await lead.add_teammate("ann")
            async with await corral.aio.Teammate.connect(lead.address, new.token) as ann:
                assert await ann.send_message("lead", "starting") == ["lead"]
                done: list[str] = []
                async with contextlib.aclosing(ann.idle(max_idle_polls=3, poll_interval=FAST_POLL)) as events:
                    async for event in events:
                        if isinstance(event, corral.aio.Claim):
                            async with event.keepalive():
                                assert event.task.payload in (b"in", b"")
                            await event.complete(f"did {event.task.id}")
                            done.append(event.task.id)
                assert done == ["a", "b"]
                assert [t.id async for t in ann.list_tasks(states=[corral.TaskState.COMPLETED])] == ["a", "b"]

            kinds: list[str] = []
            async with contextlib.aclosing(lead.watch()) as feed:
                async for event in feed:
                    kinds.append(type(event).__name__)
                    if isinstance(event, corral.LeadMessage):
                        assert (event.message.sender, event.message.body) == ("ann", "starting")
                    if isinstance(event, corral.TaskChanged) and event.task.id == "b" and event.task.state.is_final:
                        break
            assert {"TaskChanged", "TeammateChanged", "LeadMessage"} <= set(kinds)
            assert (await lead.wait_until_done(timeout=5)).completed_ids == ("a", "b")
            assert [t.name for t in await lead.list_teammates()] == ["ann"]

    asyncio.run(scenario())


@pytest.mark.timeout(60)
def test_aio_keepalive_reports_cancel_as_lost_lease(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with await corral.aio.Lead.launch(tmp_path / "state") as lead:
            await lead.create_tasks([corral.TaskSpec("doomed", lease_duration=ONE_SECOND)])
            new = await lead.add_teammate("ann")
            async with await corral.aio.Teammate.connect(lead.address, new.token) as ann:
                async with contextlib.aclosing(ann.idle(poll_interval=FAST_POLL)) as events:
                    claim = await anext(events)
                assert isinstance(claim, corral.aio.Claim)
                async with claim.keepalive():
                    await lead.cancel_tasks(["doomed"])
                    async with asyncio.timeout(10):
                        while not claim.lost:
                            await asyncio.sleep(0.02)
                with pytest.raises(corral.LeaseLost) as raised:
                    claim.check()
                assert isinstance(raised.value.cause, corral.TaskCanceled)
                with pytest.raises(corral.TaskCanceled):
                    await claim.complete(b"too late")
                assert (await lead.get_task("doomed")).state is corral.TaskState.CANCELED

    asyncio.run(scenario())
