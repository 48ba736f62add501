"""Attempt history through both SDK flavours: `Task.attempts` from get_task and
`Claim.previous_attempt` on a retried task's claim."""

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

FAILED, IN_PROGRESS, COMPLETED = (
    corral.AttemptOutcome.FAILED,
    corral.AttemptOutcome.IN_PROGRESS,
    corral.AttemptOutcome.COMPLETED,
)


def _first_claim(teammate: corral.Teammate) -> corral.Claim:
    events = teammate.idle(poll_interval=FAST_POLL)
    try:
        event = next(events)
    finally:
        events.close()
    assert isinstance(event, corral.Claim), event
    return event


@pytest.mark.timeout(60)
def test_a_retried_claim_says_what_went_wrong_and_get_task_lists_the_attempts(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("t", max_attempts=3)])
    assert lead.get_task("t").attempts == ()
    new = lead.add_teammate("ann")
    with corral.Teammate.connect(lead.address, new.token) as ann:
        first = _first_claim(ann)
        assert first.previous_attempt is None
        (live,) = lead.get_task("t").attempts
        assert (live.attempt, live.owner, live.fence, live.outcome, live.end_time) == (
            1,
            "ann",
            first.fence,
            IN_PROGRESS,
            None,
        )
        first.fail("ImportError: no module named numpy")

        second = _first_claim(ann)
        previous = second.previous_attempt
        assert previous is not None and second.attempt == 2
        assert (previous.attempt, previous.owner, previous.fence, previous.outcome) == (1, "ann", first.fence, FAILED)
        assert previous.error == "ImportError: no module named numpy"
        assert isinstance(previous.end_time, datetime.datetime) and previous.end_time.tzinfo is not None
        assert previous.claim_time is not None and previous.claim_time <= previous.end_time
        assert second.info.previous_attempt == previous
        done = second.complete(b"ok")
        assert done.attempts == (), "only get_task fills the history"

        history = lead.get_task("t").attempts
        assert [(a.attempt, a.outcome, a.error) for a in history] == [
            (1, FAILED, "ImportError: no module named numpy"),
            (2, COMPLETED, ""),
        ]
        assert history[0] == previous
        assert ann.get_task("t").attempts == history, "a teammate reads it too"
        assert all(task.attempts == () for task in lead.list_tasks())


@pytest.mark.timeout(60)
def test_aio_claims_and_get_task_carry_the_attempts(tmp_path: Path) -> None:
    async def first_claim(teammate: corral.aio.Teammate) -> corral.aio.Claim:
        async with contextlib.aclosing(teammate.idle(poll_interval=FAST_POLL)) as events:
            async for event in events:
                assert isinstance(event, corral.aio.Claim), event
                return event
        raise AssertionError("the stream ended without a claim")

    async def scenario() -> None:
        async with await corral.aio.Lead.launch(tmp_path / "state") as lead:
            await lead.create_tasks([corral.TaskSpec("t", max_attempts=3)])
            new = await lead.add_teammate("ann")
            async with await corral.aio.Teammate.connect(lead.address, new.token) as ann:
                first = await first_claim(ann)
                assert first.previous_attempt is None
                await first.fail("timeout talking to the registry")
                second = await first_claim(ann)
                assert second.previous_attempt is not None
                assert second.previous_attempt.error == "timeout talking to the registry"
                assert second.previous_attempt.outcome is FAILED and second.previous_attempt.end_time is not None
                history = (await lead.get_task("t")).attempts
                assert [(a.fence, a.outcome) for a in history] == [(first.fence, FAILED), (second.fence, IN_PROGRESS)]
                assert history[0] == second.previous_attempt
                await second.complete(b"ok")

    asyncio.run(scenario())
