"""Discovered work through the bridges, against a real daemon: a teammate proposes
tasks from the task it holds (`propose_tasks`), or splits that task on them
(`block_current_task`); the Lead sees them waiting (`board_summary`, `watch_events`),
decides them (`decide_proposals`) and edits the graph (`add_dependencies`,
`set_task_creation`); the proposer's `next_item` brings the decision, and a split task
comes back with its new dependencies' results. Bad input is an isError result that
writes nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import corral

from .mcpkit import Agent, bridge_agent
from .test_mcp_questions import cursor, events_after, eventually


async def _proposal(lead: Agent, task_id: str) -> dict[str, Any] | None:
    summary = await lead.ok("board_summary")
    return next((p for p in summary["proposals_waiting"] if p["task_id"] == task_id), None)


def _proposed(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == "tasks_proposed"]


@pytest.mark.timeout(40)
@pytest.mark.parametrize("transport", ["session", "idle"])
def test_a_teammate_proposes_from_its_claim_and_the_lead_approves(board, secrets, mint, monkeypatch, transport) -> None:
    monkeypatch.setenv("CORRAL_TRANSPORT", transport)  # the proposal as a Session op, or the unary call
    role = f"finder-{transport}"
    name, token = mint(roles=[role])
    held, found = f"{name}-feature", f"{name}-flaky-test"

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, board.token, secrets) as lead,
            bridge_agent(board.address, token, secrets) as mate,
        ):
            await lead.ok("create_tasks", tasks=[{"id": held, "required_role": role, "priority": 3}])
            first = await mate.ok("next_item", wait_seconds=5)
            assert first["kind"] == "claim" and first["claim"]["task_id"] == held
            start = await cursor(lead)

            spec = {"id": found, "title": "Fix the flaky login test", "required_role": role, "priority": 2}
            proposed = await mate.ok("propose_tasks", tasks=[spec])
            assert proposed["task_ids"] == [found] and proposed["discovered_from"] == held
            assert proposed["split"] is False and proposed["waiting_for_lead"] is True
            status = await mate.ok("my_status")
            assert [c["task_id"] for c in status["held_claims"]] == [held]  # the claim goes on

            # The Lead sees it waiting, its title labelled as the proposer's.
            waiting = await eventually(lambda: _proposal(lead, found), "the proposal waiting for the lead")
            assert (waiting["proposed_by"], waiting["discovered_from"], waiting["priority"]) == (name, held, 2)
            assert waiting["title"] == {**waiting["title"], "from": name, "role": "teammate"}
            assert waiting["title"]["text"] == "Fix the flaky login test"
            summary = await lead.ok("board_summary")
            assert summary["tasks_by_state"]["PROPOSED"] >= 1 and summary["proposals_waiting_total"] >= 1
            (event,) = _proposed(await events_after(lead, start))
            assert (event["teammate"], event["task_ids"], event["discovered_from"]) == (name, [found], held)
            assert (event["needs_decision"], event["split"]) == (True, False)
            shown = (await mate.ok("get_task", task_id=found))["task"]
            assert (shown["state"], shown["proposed_by"], shown["discovered_from"]) == ("PROPOSED", name, held)
            assert shown["description"]["from"] == name

            decided = await lead.ok("decide_proposals", task_ids=[found], approve=True, feedback="Good catch.")
            assert decided["tasks"] == [{"task_id": found, "state": "PENDING"}]
            assert await _proposal(lead, found) is None
            decided_events = [e for e in await events_after(lead, start) if e["kind"] == "proposals_decided"]
            assert [(e["task_ids"], e["approve"], e["feedback"]["text"]) for e in decided_events] == [
                ([found], True, "Good catch.")
            ]

            # The proposer hears of it before any new claim, then works on as before.
            item = await mate.ok("next_item", wait_seconds=5)
            assert item["kind"] == "proposals_decided", item
            notice = item["proposals_decided"]
            assert (notice["task_ids"], notice["approve"]) == ([found], True)
            assert notice["feedback"] == {**notice["feedback"], "from": "lead", "role": "lead", "text": "Good catch."}
            await mate.ok("complete_task", task_id=held, result="feature done")
            work = await mate.ok("next_item", wait_seconds=5)
            assert work["kind"] == "claim" and work["claim"]["task_id"] == found, work
            await mate.ok("complete_task", task_id=found, result="deflaked")

    asyncio.run(scenario())
    assert board.get_task(found).state is corral.TaskState.COMPLETED


@pytest.mark.timeout(40)
@pytest.mark.parametrize("transport", ["session", "idle"])
def test_a_split_task_comes_back_with_its_new_dependencies_results(
    board, secrets, mint, monkeypatch, transport
) -> None:
    monkeypatch.setenv("CORRAL_TRANSPORT", transport)
    role = f"splitter-{transport}"
    name, token = mint(roles=[role])
    held, first, second = f"{name}-migrate", f"{name}-schema", f"{name}-backfill"

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, board.token, secrets) as lead,
            bridge_agent(board.address, token, secrets) as mate,
        ):
            await lead.ok("create_tasks", tasks=[{"id": held, "required_role": role}])
            assert (await mate.ok("next_item", wait_seconds=5))["claim"]["task_id"] == held
            specs = [
                {"id": first, "required_role": role},
                {"id": second, "required_role": role, "depends_on": [first]},
            ]
            split = await mate.ok("propose_tasks", tasks=specs, block_current_task=True)
            assert (split["task_ids"], split["discovered_from"], split["split"]) == ([first, second], held, True)
            assert "next_item" in split["hint"]
            # The claim ended: the bridge forgot it and no longer renews it.
            assert (await mate.ok("my_status"))["held_claims"] == []
            gone = await mate.error("complete_task", task_id=held, result="x")
            assert gone.startswith("NOT_HELD:"), gone
            task = await asyncio.to_thread(board.get_task, held)
            assert task.state is corral.TaskState.PENDING and set(task.depends_on) >= {first, second}
            assert task.attempts[-1].outcome is corral.AttemptOutcome.SPLIT
            nothing = await mate.ok("next_item", wait_seconds=1)  # it waits for the proposals
            assert nothing["kind"] == "none", nothing

            await eventually(lambda: _proposal(lead, second), "the split's proposals waiting")
            await lead.ok("decide_proposals", task_ids=[first, second], approve=True)
            assert (await mate.ok("next_item", wait_seconds=5))["kind"] == "proposals_decided"
            for dep in (first, second):
                work = await mate.ok("next_item", wait_seconds=5)
                assert work["kind"] == "claim" and work["claim"]["task_id"] == dep, work
                await mate.ok("complete_task", task_id=dep, result=f"{dep} done")

            back = await mate.ok("next_item", wait_seconds=5)
            assert back["kind"] == "claim" and back["claim"]["task_id"] == held, back
            claim = back["claim"]
            results = {dep: shown["text"] for dep, shown in claim["dependency_results"].items()}
            assert results == {first: f"{first} done", second: f"{second} done"}
            assert claim["previous_attempt"]["outcome"] == "SPLIT"
            assert claim["attempt"] == 1  # a split uses no attempt
            assert (await mate.ok("complete_task", task_id=held, result="migrated"))["state"] == "COMPLETED"

    asyncio.run(scenario())


@pytest.mark.timeout(40)
def test_a_rejected_split_frees_the_task_and_next_item_says_why(board, secrets, mint) -> None:
    name, token = mint(roles=["rejected-split"])
    held, proposal = f"{name}-report", f"{name}-rewrite-everything"

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, board.token, secrets) as lead,
            bridge_agent(board.address, token, secrets) as mate,
        ):
            await lead.ok("create_tasks", tasks=[{"id": held, "required_role": "rejected-split"}])
            await mate.ok("next_item", wait_seconds=5)
            spec = {"id": proposal, "required_role": "rejected-split"}
            await mate.ok("propose_tasks", tasks=[spec], task_id=held, block_current_task=True)
            rejected = await lead.ok("decide_proposals", task_ids=[proposal], approve=False, feedback="Not now.")
            states = {t["task_id"]: t["state"] for t in rejected["tasks"]}
            assert states == {proposal: "CANCELED", held: "PENDING"}

            item = await mate.ok("next_item", wait_seconds=5)
            assert item["kind"] == "proposals_decided" and item["proposals_decided"]["approve"] is False
            assert item["proposals_decided"]["feedback"]["text"] == "Not now."
            assert "ready again" in item["hint"]
            back = await mate.ok("next_item", wait_seconds=5)
            assert back["kind"] == "claim" and back["claim"]["task_id"] == held, back
            previous = back["claim"]["previous_attempt"]
            assert previous["outcome"] == "SPLIT"
            assert previous["error"]["text"] == "split rejected: proposal rejected: Not now."
            await mate.ok("complete_task", task_id=held, result="reported without the rewrite")

    asyncio.run(scenario())
    assert board.get_task(proposal).error == "proposal rejected: Not now."


@pytest.mark.timeout(40)
def test_the_lead_sets_task_creation_and_a_proposal_from_no_claim_lands_as_it_says(board, secrets, mint) -> None:
    name, token = mint(roles=["free-proposer"])
    allowed, waiting = f"{name}-allowed", f"{name}-waiting"

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, board.token, secrets) as lead,
            bridge_agent(board.address, token, secrets) as mate,
        ):
            set_to = await lead.ok("set_task_creation", teammate=name, policy="allow")
            assert (set_to["teammate"], set_to["policy"]) == (name, "allow")
            mates = {m["name"]: m for m in (await lead.ok("board_summary"))["teammates"]}
            assert mates[name]["task_creation"] == "ALLOW"
            added = await mate.ok("propose_tasks", tasks=[{"id": allowed, "required_role": "nobody-takes-it"}])
            assert (added["task_ids"], added["discovered_from"], added["waiting_for_lead"]) == ([allowed], "", False)
            assert (await asyncio.to_thread(board.get_task, allowed)).state is corral.TaskState.PENDING

            await lead.ok("set_task_creation", teammate=name, policy="propose")
            later = await mate.ok("propose_tasks", tasks=[{"id": waiting, "required_role": "nobody-takes-it"}])
            assert later["waiting_for_lead"] is True
            found = await eventually(lambda: _proposal(lead, waiting), "the proposal from no claim")
            assert (found["proposed_by"], found["discovered_from"]) == (name, "")
            await lead.ok("cancel_tasks", ids=[allowed, waiting])

    asyncio.run(scenario())


@pytest.mark.timeout(60)
def test_bad_proposals_and_decisions_are_refused_with_a_clear_text_and_write_nothing(board, secrets, mint) -> None:
    name, token = mint(roles=["bad-proposer"])
    held, other, taken = f"{name}-held", f"{name}-other", f"{name}-taken"
    a, b, c = f"{name}-a", f"{name}-b", f"{name}-c"

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, board.token, secrets) as lead,
            bridge_agent(board.address, token, secrets) as mate,
        ):
            await lead.ok("create_tasks", tasks=[{"id": held, "required_role": "bad-proposer", "priority": 1}])
            assert (await mate.ok("next_item", wait_seconds=5))["claim"]["task_id"] == held
            await lead.ok(
                "create_tasks",
                tasks=[
                    {"id": other, "required_role": "nobody-takes-it"},
                    {"id": taken, "required_role": "nobody-takes-it"},
                    {"id": a, "required_role": "nobody-takes-it"},
                    {"id": b, "required_role": "nobody-takes-it", "depends_on": [a]},
                    {"id": c, "required_role": "nobody-takes-it", "depends_on": [b]},
                ],
            )
            await lead.ok("set_task_creation", teammate=name, policy="deny")
            start = await cursor(lead)
            new = {"id": f"{name}-new", "required_role": "bad-proposer"}
            cases: list[tuple[Agent, str, dict[str, Any], str, str]] = [
                (mate, "propose_tasks", {"tasks": [new]}, "PERMISSION_DENIED:", "may not propose"),
                (mate, "propose_tasks", {"tasks": [new]}, "PERMISSION_DENIED:", f"you still hold task {held!r}"),
                (mate, "propose_tasks", {"tasks": []}, "INVALID_ARGUMENT:", "tasks"),
                (mate, "propose_tasks", {"tasks": [new] * 101}, "INVALID_ARGUMENT:", "tasks"),
                (mate, "propose_tasks", {"tasks": [{"title": "no id"}]}, "INVALID_ARGUMENT:", "id"),
                (mate, "propose_tasks", {"tasks": [new], "task_id": other}, "NOT_HELD:", other),
                (mate, "propose_tasks", {"tasks": [new], "claim_token": "guess"}, "INVALID", "claim_token"),
                (lead, "propose_tasks", {"tasks": [new]}, "PERMISSION_DENIED:", "propose_tasks"),
                (mate, "decide_proposals", {"task_ids": [a], "approve": True}, "PERMISSION_DENIED:", "decide"),
                (mate, "add_dependencies", {"task_id": a, "depends_on": [b]}, "PERMISSION_DENIED:", "add_dep"),
                (lead, "decide_proposals", {"task_ids": [], "approve": True}, "INVALID_ARGUMENT:", "task_ids"),
                (lead, "decide_proposals", {"task_ids": [a], "approve": True}, "FAILED_PRECONDITION:", a),
                (lead, "decide_proposals", {"task_ids": [f"{name}-never"], "approve": True}, "NOT_FOUND:", ""),
                (
                    lead,
                    "decide_proposals",
                    {"task_ids": [a], "approve": False, "feedback": "é" * 40_000},
                    "INVALID_ARGUMENT:",
                    "feedback",
                ),
                (
                    lead,
                    "add_dependencies",
                    {"task_id": a, "depends_on": [c]},
                    "INVALID_ARGUMENT:",
                    f"dependency cycle: {a} → {c} → {b} → {a}",
                ),
                (lead, "add_dependencies", {"task_id": a, "depends_on": [f"{name}-never"]}, "NOT_FOUND:", ""),
                (lead, "add_dependencies", {"task_id": held, "depends_on": [a]}, "FAILED_PRECONDITION:", held),
                (lead, "set_task_creation", {"teammate": name, "policy": "maybe"}, "INVALID_ARGUMENT:", "policy"),
                (lead, "set_task_creation", {"teammate": f"{name}-nobody", "policy": "allow"}, "NOT_FOUND:", ""),
            ]
            for agent, tool, arguments, reason, mentions in cases:
                text = await agent.error(tool, **arguments)
                assert text.startswith(reason) and mentions in text, (tool, arguments, text)
            assert await events_after(lead, start) == []  # nothing was written

            # With proposals let in again: what the daemon refuses names the task and the field.
            await lead.ok("set_task_creation", teammate=name, policy="propose")
            start = await cursor(lead)
            refused: list[tuple[dict[str, Any], str, list[str]]] = [
                (
                    {"tasks": [{**new, "priority": 5}]},
                    "INVALID_ARGUMENT:",
                    [f"{name}-new", "priority", f"above 1, the priority of {held!r}"],
                ),
                (
                    {"tasks": [{"id": f"{name}-loop", "depends_on": [held]}], "block_current_task": True},
                    "INVALID_ARGUMENT:",
                    # The split would make the held task wait for the new one, which waits for it.
                    ["block_current_task", f"dependency cycle: {held} → {name}-loop → {held}"],
                ),
                ({"tasks": [{"id": taken}]}, "ALREADY_EXISTS:", [taken]),
            ]
            for arguments, reason, mentions in refused:
                text = await mate.error("propose_tasks", **arguments)
                assert text.startswith(reason) and all(m in text for m in mentions), (arguments, text)
                assert "block_claimed_task" not in text and f"you still hold task {held!r}" in text, text
            assert _proposed(await events_after(lead, start)) == []
            status = await mate.ok("my_status")
            assert [c["task_id"] for c in status["held_claims"]] == [held]  # still held, still renewed
            await mate.ok("complete_task", task_id=held, result="done without help")
            nothing_held = await mate.error("propose_tasks", tasks=[new], block_current_task=True)
            assert nothing_held.startswith("INVALID_ARGUMENT:") and "no task to split" in nothing_held

            added = await lead.ok("add_dependencies", task_id=c, depends_on=[a, b])
            assert added["depends_on"] == [b, a] and added["state"] == "PENDING"
            await lead.ok("cancel_tasks", ids=[other, taken, a])

    asyncio.run(scenario())
    assert board.get_task(held).state is corral.TaskState.COMPLETED
    assert board.get_task(other).attempts == ()
