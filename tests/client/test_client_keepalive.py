"""Claim keepalive against a scripted teammate (no daemon): renew cadence,
recording a proven loss, riding out transient errors, and an unconfirmed loss."""

import asyncio
import datetime

import grpc
import pytest

import corral
import corral.aio
from corral._types import ClaimInfo, Task, TaskState
from tests.support import wait_until, wait_until_async

UTC = datetime.UTC
LEASE = datetime.timedelta(milliseconds=300)


def lease_expired() -> corral.LeaseExpired:
    return corral.LeaseExpired("lease ended", code=grpc.StatusCode.FAILED_PRECONDITION, reason="LEASE_EXPIRED")


class ScriptedTeammate:
    """Answers renew calls from a script of outcomes (an exception or None = success)."""

    def __init__(self, script: list[Exception | None], lease: datetime.timedelta = LEASE) -> None:
        self._script = list(script)
        self._lease = lease
        self.renewals = 0
        self.forgotten: list[str] = []
        self.completed: list[bytes] = []

    def _answer(self) -> tuple[datetime.datetime, bool]:
        self.renewals += 1
        outcome = self._script.pop(0) if self._script else None
        if outcome is not None:
            raise outcome
        return datetime.datetime.now(UTC) + self._lease, False

    def renew(self, task_id: str, token: str, *, timeout: float) -> tuple[datetime.datetime, bool]:
        return self._answer()

    def complete(self, task_id: str, token: str, result: bytes) -> Task:
        self.completed.append(result)
        return Task(task_id, TaskState.COMPLETED, result=result)

    def forget(self, token: str) -> None:
        self.forgotten.append(token)


class AsyncScriptedTeammate(ScriptedTeammate):
    async def renew(self, task_id: str, token: str, *, timeout: float) -> tuple[datetime.datetime, bool]:  # type: ignore[override]
        return self._answer()


def claim_info(lease: datetime.timedelta = LEASE) -> ClaimInfo:
    task = Task("t1", TaskState.IN_PROGRESS, lease_duration=lease)
    return ClaimInfo(task, token="tok", lease_expire_time=datetime.datetime.now(UTC) + lease, attempt=1, fence=7)


@pytest.mark.timeout(10)
def test_keepalive_renews_until_stopped_and_complete_stops_it() -> None:
    teammate = ScriptedTeammate([])
    claim = corral.Claim(claim_info(), teammate)  # type: ignore[arg-type]
    first_expiry = claim.lease_expire_time
    with claim.keepalive():
        wait_until(lambda: teammate.renewals >= 3, what="three renewals")
    assert not claim.lost
    assert claim.lease_expire_time is not None and first_expiry is not None
    assert claim.lease_expire_time > first_expiry
    claim.check()  # does not raise
    claim.start_keepalive()
    claim.complete("done")
    renewals = teammate.renewals
    assert teammate.completed == [b"done"] and teammate.forgotten == ["tok"]
    assert claim._keepalive is None, "complete stops the keepalive"
    assert teammate.renewals == renewals


@pytest.mark.timeout(10)
def test_keepalive_records_a_proven_loss() -> None:
    teammate = ScriptedTeammate([None, lease_expired()])
    claim = corral.Claim(claim_info(), teammate)  # type: ignore[arg-type]
    claim.start_keepalive()
    wait_until(lambda: claim.lost, what="the claim to be lost")
    with pytest.raises(corral.LeaseLost) as raised:
        claim.check()
    assert isinstance(raised.value.cause, corral.LeaseExpired)
    assert raised.value.task_id == "t1"
    assert teammate.forgotten == ["tok"]
    renewals = teammate.renewals
    claim.stop_keepalive()
    assert teammate.renewals == renewals == 2, "no renew after the loss"


@pytest.mark.timeout(10)
def test_keepalive_rides_out_transient_errors() -> None:
    teammate = ScriptedTeammate([corral.Unavailable("blip"), corral.Overloaded("busy"), None, None])
    claim = corral.Claim(claim_info(), teammate)  # type: ignore[arg-type]
    with claim.keepalive():
        wait_until(lambda: teammate.renewals >= 5, what="five renewals")
    assert not claim.lost


@pytest.mark.timeout(10)
def test_unreachable_daemon_past_the_lease_is_an_unconfirmed_loss() -> None:
    teammate = ScriptedTeammate([corral.Unavailable("down")] * 1000)
    claim = corral.Claim(claim_info(), teammate)  # type: ignore[arg-type]
    with claim.keepalive():
        wait_until(lambda: claim.lost, what="the claim to be lost")
    assert claim.lost_error is not None and claim.lost_error.cause is None
    assert teammate.forgotten == [], "the daemon may still consider the claim live"


@pytest.mark.timeout(10)
def test_manual_renew_failure_is_recorded_too() -> None:
    teammate = ScriptedTeammate([lease_expired()])
    claim = corral.Claim(claim_info(), teammate)  # type: ignore[arg-type]
    with pytest.raises(corral.LeaseExpired):
        claim.renew()
    assert claim.lost
    claim.start_keepalive()
    assert claim._keepalive is None, "a lost claim is not kept alive"


@pytest.mark.timeout(10)
def test_aio_keepalive_records_a_proven_loss() -> None:
    async def scenario() -> None:
        teammate = AsyncScriptedTeammate([None, None, lease_expired()])
        claim = corral.aio.Claim(claim_info(), teammate)  # type: ignore[arg-type]
        async with claim.keepalive():
            await wait_until_async(lambda: claim.lost, 5, "the keepalive to record the loss", interval=0.01)
        with pytest.raises(corral.LeaseLost):
            claim.check()
        assert teammate.renewals == 3 and teammate.forgotten == ["tok"]

    asyncio.run(scenario())
