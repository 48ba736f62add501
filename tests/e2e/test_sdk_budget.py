"""Usage and budgets through the SDK, sync and asyncio, on both teammate
transports: claims report usage, the Lead sees the sums, a spent budget brings
a `BudgetExhausted` instead of the next claim, and raising it brings the claim."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

import corral
import corral.aio
from corral import _convert
from tests.support import FAST_POLL, watch_until

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("transport")]


def _is_exhausted(name: str):
    return lambda e: isinstance(e, corral.BudgetExhaustedEvent) and e.exhausted.teammate == name


def test_a_spent_budget_stops_claims_until_it_is_raised(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("a"), corral.TaskSpec("b", priority=-1)])
    new = lead.add_teammate("ann")
    assert lead.set_budget("ann", max_cost_micros=10) == corral.Budget(max_cost_micros=10)
    seen: list[object] = []
    with corral.Teammate.connect(lead.address, new.token) as ann:
        for event in ann.idle(poll_interval=FAST_POLL):
            seen.append(event)
            if isinstance(event, corral.Claim) and event.task.id == "a":
                event.renew(usage=corral.Usage(input_tokens=100, cost_micros=4, model="small"))
                done = event.complete("ok", usage=corral.Usage(output_tokens=50, cost_micros=6))
                assert done.usage == corral.Usage(100, 50, 10, "small")
            elif isinstance(event, corral.BudgetExhausted):
                assert event == corral.BudgetExhausted(
                    "ann", corral.Usage(100, 50, 10, "small"), corral.Budget(max_cost_micros=10)
                )
                assert lead.get_task("b").state is corral.TaskState.PENDING
                lead.set_budget("ann", max_cost_micros=100)
            elif isinstance(event, corral.Claim):
                event.complete("ok")
                break
    assert [type(e).__name__ for e in seen] == ["Claim", "BudgetExhausted", "Claim"]
    assert lead.get_task("a").usage == corral.Usage(100, 50, 10, "small")
    (mate,) = lead.list_teammates()
    assert mate.usage == corral.Usage(100, 50, 10, "small") and mate.budget == corral.Budget(max_cost_micros=100)
    assert lead.get_stats().usage == corral.Usage(100, 50, 10)
    event = watch_until(lead, _is_exhausted("ann"))
    assert isinstance(event, corral.BudgetExhaustedEvent) and event.exhausted.spent.cost_micros == 10


def test_lead_set_budget_refuses_bad_input(lead: corral.Lead) -> None:
    with pytest.raises(corral.NotFound):
        lead.set_budget("nobody", max_tokens=1)
    with pytest.raises(corral.InvalidArgument):
        lead.set_budget("*", max_tokens=-1)
    # Past what the wire carries: refused by the SDK, naming the field, not protobuf's ValueError.
    with pytest.raises(corral.InvalidArgument, match="max_tokens") as refused:
        lead.set_budget("*", max_tokens=2**70)
    assert [v.field for v in refused.value.field_violations] == ["max_tokens"]
    with pytest.raises(corral.InvalidArgument, match="usage.input_tokens"):
        _convert.usage_to_pb(corral.Usage(input_tokens=2**63))  # what claim.complete and renew send


def test_aio_usage_on_failures_and_the_default_budget(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("a", max_attempts=1), corral.TaskSpec("b", priority=-1)])
    new = lead.add_teammate("bob")

    async def scenario() -> list[str]:
        kinds: list[str] = []
        async with await corral.aio.Lead.connect(lead.address, lead.token) as aio_lead:
            assert await aio_lead.set_budget("*", max_tokens=8) == corral.Budget(max_tokens=8)
            async with await corral.aio.Teammate.connect(lead.address, new.token) as bob:
                async with contextlib.aclosing(bob.idle(poll_interval=FAST_POLL)) as events:
                    async for event in events:
                        kinds.append(type(event).__name__)
                        if isinstance(event, corral.aio.Claim) and event.task.id == "a":
                            with pytest.raises(corral.InvalidArgument):
                                await event.fail("no", usage=corral.Usage(model="m" * 201))
                            failed = await event.fail(
                                "no", retryable=False, usage=corral.Usage(input_tokens=5, output_tokens=3)
                            )
                            assert failed.usage == corral.Usage(5, 3)
                        elif isinstance(event, corral.BudgetExhausted):
                            assert event.budget == corral.Budget(max_tokens=8)
                            await aio_lead.set_budget("bob", max_tokens=100)
                        elif isinstance(event, corral.aio.Claim):
                            await event.complete()
                            return kinds
        raise AssertionError("the stream ended early")

    assert asyncio.run(scenario()) == ["Claim", "BudgetExhausted", "Claim"]
    assert lead.get_task("a").usage == corral.Usage(5, 3)
    assert lead.list_teammates()[0].budget == corral.Budget(max_tokens=100)


def test_a_stream_opened_behind_a_spent_budget_hears_why_once_then_claims_when_raised(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("a"), corral.TaskSpec("b", priority=-1)])
    new = lead.add_teammate("cat")
    lead.set_budget("cat", max_tokens=10)
    with corral.Teammate.connect(lead.address, new.token) as cat:
        for event in cat.idle(poll_interval=FAST_POLL):
            assert isinstance(event, corral.Claim)
            event.complete("ok", usage=corral.Usage(input_tokens=10))
            break
        # A restarted agent's new stream: the gate is closed, and it is told so first.
        seen: list[object] = []
        for event in cat.idle(poll_interval=FAST_POLL):
            seen.append(event)
            if isinstance(event, corral.BudgetExhausted):
                assert event == corral.BudgetExhausted("cat", corral.Usage(10), corral.Budget(max_tokens=10))
                assert lead.get_task("b").state is corral.TaskState.PENDING
                lead.set_budget("cat", max_tokens=100)
            else:
                assert isinstance(event, corral.Claim) and event.task.id == "b", event
                event.complete("ok")
                break
        assert [type(e).__name__ for e in seen] == ["BudgetExhausted", "Claim"], "one notice, then the claim"
