"""The teammate tools in-process against a real daemon: design §5 as calls, claims by
task id, leases renewed while the agent is attentive (issue: `corral mcp`)."""

from __future__ import annotations

import asyncio
import datetime

import pytest

import corral
from tests.support import wait_until_async

from .mcpkit import bridge_agent


def _first_claim_held(board: corral.Lead, task_id: str) -> bool:
    task = board.get_task(task_id)
    return task.state is corral.TaskState.IN_PROGRESS and task.attempt == 1


def _spec(task_id: str, **fields: object) -> corral.TaskSpec:
    return corral.TaskSpec(task_id, **fields)  # type: ignore[arg-type]


@pytest.mark.timeout(30)
def test_protocol_first_shutdown_beats_a_ready_task_and_holds_the_gate(board, secrets, mint) -> None:
    name, token = mint(roles=["pf"])
    held, ready = f"{name}-held", f"{name}-ready"
    board.create_tasks([_spec(held, required_role="pf")])

    async def scenario() -> None:
        async with bridge_agent(board.address, token, secrets) as agent:
            assert (await agent.ok("next_item", wait_seconds=5))["claim"]["task_id"] == held
            request_id = board.request_shutdown(name, reason="wrap up")
            board.create_tasks([_spec(ready, required_role="pf")])
            first = await agent.ok("next_item", wait_seconds=5)
            assert first["kind"] == "shutdown_request", first
            assert first["shutdown_request"]["request_id"] == request_id
            assert first["shutdown_request"]["reason"]["from"] == "lead"
            second = await agent.ok("next_item", wait_seconds=1)
            assert (second["kind"], second["blocked_by"]) == ("none", "shutdown_pending")
            assert "respond_shutdown" in second["hint"]
            assert any("shutdown" in note for note in second.get("attention", []))
            await agent.ok("respond_shutdown", request_id=request_id, approve=True, reason="done")
            after = await agent.ok("next_item", wait_seconds=1)
            assert (after["kind"], after["blocked_by"]) == ("none", "shutdown_pending")
            assert (await agent.ok("my_status"))["held_claims"] == []

    asyncio.run(scenario())
    # Approving released the held claim; the ready task was never claimed.
    assert board.get_task(held).state is corral.TaskState.PENDING
    assert board.get_task(ready).state is corral.TaskState.PENDING
    (mate,) = [m for m in board.list_teammates() if m.name == name]
    assert mate.status not in (corral.TeammateStatus.IDLE, corral.TeammateStatus.BUSY), mate.status


@pytest.mark.timeout(30)
@pytest.mark.parametrize("transport", ["session", "idle"])
def test_a_message_comes_before_a_claim_and_the_claim_completes_by_task_id(
    board, secrets, mint, monkeypatch, transport
) -> None:
    monkeypatch.setenv("CORRAL_TRANSPORT", transport)  # the SDK's stream: Session, or Idle and unary calls
    name, token = mint(roles=[f"solo-{transport}"])
    task_id = f"{name}-build"

    async def scenario() -> None:
        async with bridge_agent(board.address, token, secrets) as agent:
            board.send_message(name, "read the README first")
            board.create_tasks(
                [_spec(task_id, description="build it", payload=b"\xff\xfe", required_role=f"solo-{transport}")]
            )
            first = await agent.ok("next_item", wait_seconds=5)
            assert first["kind"] == "message"
            assert first["message"]["body"] == {
                "from": "lead",
                "role": "lead",
                "size": 21,
                "encoding": "utf-8",
                "text": "read the README first",
            }
            second = await agent.ok("next_item", wait_seconds=5)
            assert second["kind"] == "claim", second
            claim = second["claim"]
            assert claim["task_id"] == task_id and claim["resumed"] is False
            assert claim["task"]["description"]["text"] == "build it"
            assert claim["task"]["payload"]["encoding"] == "base64"
            assert "claim_token" not in second["claim"]
            done = await agent.ok("complete_task", task_id=task_id, result="built")
            assert done["state"] == "COMPLETED"
            again = await agent.ok("complete_task", task_id=task_id, result="built")
            assert again["state"] == "COMPLETED"  # a repeated complete returns the stored outcome
            status = await agent.ok("my_status")
            assert status["held_claims"] == [] and status["name"] == name

    asyncio.run(scenario())
    assert board.get_task(task_id).result == b"built"


@pytest.mark.timeout(30)
def test_the_plan_gate_opens_on_approval(board, secrets, mint) -> None:
    name, token = mint(roles=["planner"], require_plan_approval=True)
    task_id = f"{name}-design"
    board.create_tasks([_spec(task_id, required_role="planner")])

    async def scenario() -> None:
        async with bridge_agent(board.address, token, secrets) as agent:
            gated = await agent.ok("next_item", wait_seconds=1)
            assert (gated["kind"], gated["blocked_by"]) == ("none", "plan_required"), gated
            assert "submit_plan" in gated["hint"]
            plan_id = (await agent.ok("submit_plan", plan="1. design 2. review"))["plan_id"]
            board.decide_plan(plan_id, approve=True, feedback="go")
            decision = await agent.ok("next_item", wait_seconds=5)
            assert decision["kind"] == "plan_decision" and decision["plan_decision"]["approve"] is True
            assert decision["plan_decision"]["feedback"]["text"] == "go"
            claim = await agent.ok("next_item", wait_seconds=5)
            assert claim["kind"] == "claim" and claim["claim"]["task_id"] == task_id
            await agent.ok("complete_task", task_id=task_id, result="designed")

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_auto_renew_outlasts_silence_then_stops_after_the_quiet_limit(board, secrets, mint) -> None:
    name, token = mint(roles=["quiet"])
    task_id = f"{name}-long"
    board.create_tasks([_spec(task_id, required_role="quiet", lease_duration=datetime.timedelta(seconds=2))])

    async def scenario() -> None:
        async with bridge_agent(board.address, token, secrets, quiet_limit=11.0) as agent:
            claim = await agent.ok("next_item", wait_seconds=5)
            assert claim["kind"] == "claim"
            # The agent thinks for five leases' time without calling a tool: the bridge renews.
            await asyncio.sleep(10.0)  # the agent's silence is what is tested, not a wait for an event
            task = board.get_task(task_id)
            assert (task.state, task.attempt) == (corral.TaskState.IN_PROGRESS, 1)
            # Past the quiet limit renewal stops and the lease runs out.
            await wait_until_async(
                lambda: not _first_claim_held(board, task_id), 8, "the lease to run out", interval=0.05
            )
            late = await agent.call("complete_task", task_id=task_id, result="too late")
            assert late.is_error and late.text.startswith("LEASE_EXPIRED:"), late.text
            assert "do not complete it; call next_item" in late.text
            assert "lease renewal had stopped" in late.text
            again = await agent.call("complete_task", task_id=task_id, result="too late")
            assert again.is_error and again.text.startswith("NOT_HELD:"), again.text

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_a_restarted_bridge_gets_its_held_claim_back_marked_resumed(board, secrets, mint) -> None:
    name, token = mint(roles=["resume"])
    task_id = f"{name}-work"
    board.create_tasks([_spec(task_id, required_role="resume")])

    async def scenario() -> None:
        async with bridge_agent(board.address, token, secrets) as agent:
            first = await agent.ok("next_item", wait_seconds=5)
            assert first["claim"]["resumed"] is False
        async with bridge_agent(board.address, token, secrets) as agent:
            again = await agent.ok("next_item", wait_seconds=5)
            assert again["kind"] == "claim" and again["claim"]["task_id"] == task_id
            assert again["claim"]["resumed"] is True
            await agent.ok("complete_task", task_id=task_id, result="resumed and done")

    asyncio.run(scenario())
    assert board.get_task(task_id).state is corral.TaskState.COMPLETED


@pytest.mark.timeout(30)
def test_a_claim_handed_over_with_a_completion_is_renewed_before_the_model_sees_it(board, secrets, mint) -> None:
    name, token = mint(roles=["handoff"])
    one_second = datetime.timedelta(seconds=1)
    board.create_tasks([_spec(f"{name}-{i}", required_role="handoff", lease_duration=one_second) for i in (1, 2)])

    async def scenario() -> None:
        async with bridge_agent(board.address, token, secrets) as agent:
            first = await agent.ok("next_item", wait_seconds=5)
            await agent.ok("complete_task", task_id=first["claim"]["task_id"], result="one")
            await wait_until_async(lambda: _first_claim_held(board, f"{name}-2"), 5, "the handoff")
            await asyncio.sleep(2.0)  # the model thinks for two leases before asking for more
            second = await agent.ok("next_item", wait_seconds=5)
            assert second["kind"] == "claim" and second["claim"]["attempt"] == 1, second
            await agent.ok("complete_task", task_id=second["claim"]["task_id"], result="two")

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_idle_timeout_is_an_item_and_the_next_call_waits_on_a_new_stream(board, secrets, mint) -> None:
    name, token = mint(roles=["idler"])

    async def scenario() -> None:
        async with bridge_agent(board.address, token, secrets, max_idle_polls=2, poll_interval=0.1) as agent:
            timed_out = await agent.ok("next_item", wait_seconds=5)
            assert timed_out["kind"] == "idle_timeout" and timed_out["idle_timeout"]["idle_polls"] == 2, timed_out
            board.create_tasks([_spec(f"{name}-late", required_role="idler")])
            claim = await agent.ok("next_item", wait_seconds=5)
            assert claim["kind"] == "claim" and claim["claim"]["task_id"] == f"{name}-late"
            await agent.ok("complete_task", task_id=f"{name}-late", result="ok")

    asyncio.run(scenario())
