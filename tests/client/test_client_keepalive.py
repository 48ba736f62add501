"""Claim keepalive against a scripted teammate (no daemon): renew cadence,
recording a proven loss, riding out transient errors, and an unconfirmed loss."""

import asyncio
import datetime

import grpc
import pytest

import corral
import corral.aio
from corral._types import ClaimInfo, Task, TaskState, Usage
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
        self.progress: list[tuple[str, float | None]] = []  # what each renew carried
        self.usages: list[Usage | None] = []  # what each renew and completion reported

    def _answer(self) -> tuple[datetime.datetime, bool]:
        self.renewals += 1
        outcome = self._script.pop(0) if self._script else None
        if outcome is not None:
            raise outcome
        return datetime.datetime.now(UTC) + self._lease, False

    def renew(
        self,
        task_id: str,
        token: str,
        *,
        timeout: float,
        progress: str = "",
        fraction: float | None = None,
        usage: Usage | None = None,
    ) -> tuple[datetime.datetime, bool]:
        self.progress.append((progress, fraction))
        self.usages.append(usage)
        return self._answer()

    def complete(self, task_id: str, token: str, result: bytes, usage: Usage | None = None) -> Task:
        self.completed.append(result)
        self.usages.append(usage)
        return Task(task_id, TaskState.COMPLETED, result=result)

    def forget(self, token: str) -> None:
        self.forgotten.append(token)


class AsyncScriptedTeammate(ScriptedTeammate):
    async def renew(  # type: ignore[override]
        self,
        task_id: str,
        token: str,
        *,
        timeout: float,
        progress: str = "",
        fraction: float | None = None,
        usage: Usage | None = None,
    ) -> tuple[datetime.datetime, bool]:
        self.progress.append((progress, fraction))
        self.usages.append(usage)
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


@pytest.mark.timeout(10)
def test_report_progress_renews_now_with_the_progress_and_keepalive_sends_none() -> None:
    teammate = ScriptedTeammate([])
    claim = corral.Claim(claim_info(), teammate)  # type: ignore[arg-type]
    expiry = claim.report_progress("running tests, 3/5", 0.6)
    assert claim.lease_expire_time == expiry
    claim.report_progress("no fraction")
    claim.renew()
    assert teammate.progress == [("running tests, 3/5", 0.6), ("no fraction", None), ("", None)]


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("text", "fraction", "field"),
    [("x" * 1025, None, "progress"), ("é" * 513, 0.5, "progress"), ("ok", 1.5, "progress_fraction")]
    + [("ok", -0.1, "progress_fraction"), ("ok", float("nan"), "progress_fraction")],
)
def test_report_progress_refuses_bad_input_before_any_call(text: str, fraction: float | None, field: str) -> None:
    teammate = ScriptedTeammate([])
    claim = corral.Claim(claim_info(), teammate)  # type: ignore[arg-type]
    with pytest.raises(corral.InvalidArgument) as refused:
        claim.report_progress(text, fraction)
    assert [v.field for v in refused.value.field_violations] == [field]
    assert teammate.renewals == 0

    async def scenario() -> None:
        quiet = AsyncScriptedTeammate([])
        aio_claim = corral.aio.Claim(claim_info(), quiet)  # type: ignore[arg-type]
        with pytest.raises(corral.InvalidArgument):
            await aio_claim.report_progress(text, fraction)
        assert quiet.renewals == 0

    asyncio.run(scenario())


@pytest.mark.timeout(10)
def test_renew_and_complete_carry_usage_and_bad_usage_is_refused_before_any_call() -> None:
    teammate = ScriptedTeammate([])
    claim = corral.Claim(claim_info(), teammate)  # type: ignore[arg-type]
    claim.renew(usage=corral.Usage(input_tokens=3, model="m"))
    for bad, field in (
        (corral.Usage(cost_micros=-1), "usage.cost_micros"),
        (corral.Usage(model="m" * 201), "usage.model"),
    ):
        with pytest.raises(corral.InvalidArgument) as refused:
            claim.renew(usage=bad)
        assert [v.field for v in refused.value.field_violations] == [field]
        with pytest.raises(corral.InvalidArgument):
            claim.complete(b"r", usage=bad)
    claim.complete(b"r", usage=corral.Usage(cost_micros=5))
    assert teammate.usages == [corral.Usage(input_tokens=3, model="m"), corral.Usage(cost_micros=5)]
