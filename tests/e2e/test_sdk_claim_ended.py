"""`ClaimEnded` through the SDK (both flavours, both transports): a claim the daemon
ends under its holder is told on `idle()` at once, the Claim handle is lost with
the reason, its keepalive stops, and its token is dead."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from pathlib import Path

import pytest

import corral
import corral.aio

pytestmark = pytest.mark.usefixtures("transport")

LONG_LEASE = datetime.timedelta(seconds=30)


@pytest.mark.timeout(60)
def test_sync_revoke_reaches_the_claim_and_stops_its_keepalive(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("t", lease_duration=LONG_LEASE)])
    new = lead.add_teammate("ann")
    with corral.Teammate.connect(lead.address, new.token) as ann:
        events = ann.idle()
        claim = next(events)
        assert isinstance(claim, corral.Claim)
        with claim.keepalive():
            lead.revoke_claim("t", "taken back")
            ended = next(events)  # how soon: bench/latency.py (3r)
            assert isinstance(ended, corral.ClaimEnded)
            assert (ended.task_id, ended.reason, ended.detail) == ("t", corral.ClaimEndReason.REVOKED, "taken back")
            assert claim.ended is corral.ClaimEndReason.REVOKED
            with pytest.raises(corral.LeaseLost) as lost:
                claim.check()
            assert isinstance(lost.value.cause, corral.ClaimRevoked)
            # The notice followed the commit: the board shows it already.
            assert lead.get_task("t").attempts[0].outcome is corral.AttemptOutcome.REVOKED
        assert claim not in ann.held_claims()
        with pytest.raises(corral.ClaimRevoked):
            claim.renew()
        events.close()
    lead.create_tasks([corral.TaskSpec("unclaimed")])  # no stream is open to claim it
    with pytest.raises(corral.FailedPrecondition):
        lead.revoke_claim("unclaimed")
    with pytest.raises(corral.NotFound):
        lead.revoke_claim("nope")


@pytest.mark.timeout(60)
def test_aio_attempt_timeout_reaches_the_handler_through_check(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with await corral.aio.Lead.launch(tmp_path / "state") as lead:
            spec = corral.TaskSpec(
                "slow",
                lease_duration=datetime.timedelta(seconds=1),
                attempt_timeout=datetime.timedelta(seconds=1.5),
                max_attempts=1,
            )
            await lead.create_tasks([spec])
            assert (await lead.get_task("slow")).attempt_timeout == datetime.timedelta(seconds=1.5)
            new = await lead.add_teammate("ann")
            async with await corral.aio.Teammate.connect(lead.address, new.token) as ann:
                async with contextlib.aclosing(ann.idle()) as events:
                    claim = await anext(events)
                    assert isinstance(claim, corral.aio.Claim)
                    claim.start_keepalive()  # renewing all along does not save the attempt
                    ended = await asyncio.wait_for(anext(events), 5)
                    assert isinstance(ended, corral.ClaimEnded)
                    assert ended.reason is corral.ClaimEndReason.ATTEMPT_TIMEOUT
                    assert ended.detail == "attempt timed out after 1.5 s"
                    assert claim.lost and isinstance(claim.lost_error.cause, corral.AttemptTimedOut)
                    await claim.stop_keepalive()
                    with pytest.raises(corral.AttemptTimedOut):
                        await claim.complete("too late")
            task = await lead.get_task("slow")
            assert task.state is corral.TaskState.FAILED and task.error == "attempt timed out after 1.5 s"
            assert task.attempts[-1].outcome is corral.AttemptOutcome.FAILED

    asyncio.run(scenario())
