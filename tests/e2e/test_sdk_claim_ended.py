"""`ClaimEnded` through the SDK (both flavours, both transports): a claim the daemon
ends under its holder is told on `idle()` at once, the Claim handle is lost with
the reason, its keepalive stops, and its token is dead; under `run_teammate` the
handler hears it (an asyncio one is cancelled, a thread finds `ended` set) and
its outcome is dropped."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import threading
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
            assert claim.ended.is_set() and claim.ended.wait(0) and claim.ended
            assert claim.end_reason is corral.ClaimEndReason.REVOKED
            with pytest.raises(corral.ClaimEndedError) as lost:
                claim.check()
            assert isinstance(lost.value, corral.LeaseLost) and isinstance(lost.value.cause, corral.ClaimRevoked)
            assert lost.value.end_reason is corral.ClaimEndReason.REVOKED
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


def _revoked_handler(flavour: str, started: threading.Event, heard: list[object]) -> object:
    """A handler whose first attempt blocks until its claim ends, noting what it heard."""
    if flavour == "sync":

        def handle(task: corral.Task) -> str:
            claim = corral.current_claim()
            if started.is_set():  # a revoke uses no attempt: this is the second claim
                return "second"
            started.set()
            heard.append(claim.ended.wait(30))
            heard.append(claim.end_reason)
            with pytest.raises(corral.ClaimEndedError) as ended:
                claim.check()
            heard.append(ended.value.end_reason)
            return "late"  # dropped: the claim ended

        return handle

    async def handle_async(task: corral.Task) -> str:
        claim = corral.aio.current_claim()
        if started.is_set():
            return "second"
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            heard.extend([True, claim.end_reason, "cancelled"])
            raise
        return "late"

    return handle_async


@pytest.mark.timeout(60)
@pytest.mark.parametrize("flavour", ["sync", "aio"])
def test_run_teammate_tells_the_handler_its_claim_was_revoked(lead: corral.Lead, flavour: str) -> None:
    lead.create_tasks([corral.TaskSpec("t", lease_duration=LONG_LEASE, max_attempts=2)])
    new = lead.add_teammate("ann")
    started, heard = threading.Event(), []
    summaries: list[corral.RunSummary] = []
    options = {"address": lead.address, "token": new.token, "max_idle_polls": 1000}
    handler = _revoked_handler(flavour, started, heard)

    def run() -> None:
        if flavour == "sync":
            summaries.append(corral.run_teammate(handler, **options))  # type: ignore[arg-type]
        else:
            summaries.append(asyncio.run(corral.aio.run_teammate(handler, **options)))  # type: ignore[arg-type]

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    assert started.wait(20)
    lead.revoke_claim("t", "taken back")
    done = lead.wait_until_done(timeout=30)
    assert done.completed == 1
    lead.request_shutdown("ann", reason="done")
    runner.join(30)
    assert not runner.is_alive()
    expected_last = corral.ClaimEndReason.REVOKED if flavour == "sync" else "cancelled"
    assert heard == [True, corral.ClaimEndReason.REVOKED, expected_last]
    task = lead.get_task("t")
    # The first attempt's "late" never reached the board: the second attempt's result did.
    assert task.result == b"second"
    assert [a.outcome for a in task.attempts] == [corral.AttemptOutcome.REVOKED, corral.AttemptOutcome.COMPLETED]
    (summary,) = summaries
    assert (summary.completed, summary.failed, summary.lost) == (1, 0, 1)
    assert summary.exit_reason is corral.ExitReason.SHUTDOWN
