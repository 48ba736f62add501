"""`Claim.report_progress` against the real daemon, sync and asyncio, on both
teammate transports: the Lead sees the progress on the task and in Watch."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import Iterator
from pathlib import Path

import pytest

import corral
import corral.aio
from tests.support import FAST_POLL, watch_until
from tests.support.proxy import SESSION_METHOD, SessionProxy

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("transport")]

RENEW_LEASE = "/corral.v1.TeammateService/RenewLease"
LEASE = datetime.timedelta(seconds=30)


@pytest.fixture
def proxy(lead: corral.Lead, tmp_path: Path) -> Iterator[SessionProxy]:
    with SessionProxy(lead.address, tmp_path / "proxy.sock") as proxy:
        yield proxy


def _first_claim(teammate: corral.Teammate, work) -> None:
    """Runs `work(claim)` on the first claim while the stream that brought it is
    open (on the Session transport, its claim calls travel as ops on it)."""
    for event in teammate.idle(poll_interval=FAST_POLL):
        if isinstance(event, corral.Claim):
            work(event)
            return
    raise AssertionError("Idle stream ended without a claim")


def _with_progress(task_id: str, text: str):
    return lambda e: isinstance(e, corral.TaskChanged) and e.task.id == task_id and e.task.progress == text


def _transport_carried(proxy: SessionProxy, transport: str, renewals: int) -> None:
    """The renewals went as Session renew ops, or as unary RenewLease calls."""
    if transport == "session":
        assert RENEW_LEASE not in proxy.calls and sum(len(ids) for ids in proxy.session_ops("renew")) == renewals
    else:
        assert SESSION_METHOD not in proxy.calls and proxy.calls.count(RENEW_LEASE) == renewals


def test_report_progress_reaches_the_lead(lead: corral.Lead, proxy: SessionProxy, transport: str) -> None:
    lead.create_tasks([corral.TaskSpec("t1", lease_duration=LEASE)])
    new = lead.add_teammate("ann")

    def work(claim: corral.Claim) -> None:
        first_expiry = claim.lease_expire_time
        assert first_expiry is not None and claim.task.progress == "" and claim.task.progress_fraction is None
        expiry = claim.report_progress("running tests, 3/5", 0.6)
        assert expiry >= first_expiry and claim.lease_expire_time == expiry
        task = lead.get_task("t1")
        assert (task.progress, task.progress_fraction) == ("running tests, 3/5", 0.6)
        assert task.progress_time is not None and task.progress_time.tzinfo is not None
        (listed,) = lead.list_tasks()
        assert (listed.progress, listed.progress_fraction) == ("running tests, 3/5", 0.6)
        assert listed.progress_time == task.progress_time
        seen = watch_until(lead, _with_progress("t1", "running tests, 3/5"))
        assert isinstance(seen, corral.TaskChanged) and seen.task.progress_fraction == 0.6
        with pytest.raises(corral.InvalidArgument):
            claim.report_progress("x" * 1025)
        with pytest.raises(corral.InvalidArgument):
            claim.report_progress("ok", float("nan"))
        claim.renew()  # a plain renewal keeps it
        assert lead.get_task("t1").progress == "running tests, 3/5"
        done = claim.complete(b"ok")
        assert (done.progress, done.progress_fraction) == ("running tests, 3/5", 0.6)

    with corral.Teammate.connect(proxy.address, new.token) as ann:
        _first_claim(ann, work)
    _transport_carried(proxy, transport, renewals=2)


def test_aio_report_progress_reaches_the_lead(lead: corral.Lead, proxy: SessionProxy, transport: str) -> None:
    lead.create_tasks([corral.TaskSpec("t1", lease_duration=LEASE)])
    new = lead.add_teammate("ann")

    async def work(claim: corral.aio.Claim) -> None:
        expiry = await claim.report_progress("compiling")
        assert claim.lease_expire_time == expiry
        task = lead.get_task("t1")
        assert (task.progress, task.progress_fraction) == ("compiling", None)
        assert task.progress_time is not None
        await claim.report_progress("", 0.25)
        task = lead.get_task("t1")
        assert (task.progress, task.progress_fraction) == ("", 0.25)
        with pytest.raises(corral.InvalidArgument):
            await claim.report_progress("ok", 1.5)
        assert lead.get_task("t1").lease_expire_time == task.lease_expire_time
        await claim.complete()

    async def scenario() -> None:
        async with await corral.aio.Teammate.connect(proxy.address, new.token) as ann:
            async with contextlib.aclosing(ann.idle(poll_interval=FAST_POLL)) as events:
                async for event in events:
                    if isinstance(event, corral.aio.Claim):
                        await work(event)
                        return
        raise AssertionError("Idle stream ended without a claim")

    asyncio.run(scenario())
    _transport_carried(proxy, transport, renewals=2)
