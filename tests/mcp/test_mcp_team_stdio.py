"""A whole team over stdio: 4 teammate bridges and 1 Lead bridge, each a `corral mcp`
process driven by a scripted agent, finish a 40-task DAG; every byte they wrote is
searched for credentials."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

import corral

from .mcpkit import Agent, StdioLog, stdio_agent

TEAMMATES = 4
TASKS = 40


def _dag(prefix: str, seed: int = 17) -> list[dict[str, Any]]:
    """Layers of tasks, each depending on up to three of the tasks before it."""
    chooser = random.Random(seed)
    tasks: list[dict[str, Any]] = []
    for index in range(TASKS):
        earlier = [t["id"] for t in tasks]
        deps = chooser.sample(earlier, k=min(len(earlier), chooser.randint(0, 3))) if index >= 4 else []
        tasks.append({"id": f"{prefix}{index:02d}", "description": f"step {index}", "depends_on": deps})
    return tasks


async def _teammate(agent: Agent, name: str, must_plan: bool, done: list[tuple[str, str]]) -> None:
    """Loop next_item -> work -> complete_task until a shutdown request, approved."""
    planned = False
    while True:
        item = await agent.ok("next_item", wait_seconds=3)
        kind = item["kind"]
        if kind == "claim":
            claim = item["claim"]
            task = claim["task"]
            missing = [dep for dep in task["depends_on"] if dep not in claim["dependency_results"]]
            assert not missing, f"{task['id']} claimed without the results of {missing}"
            done.append((task["id"], name))
            await agent.ok("complete_task", task_id=task["id"], result=f"{task['id']} by {name}")
        elif kind == "shutdown_request":
            request_id = item["shutdown_request"]["request_id"]
            await agent.ok("respond_shutdown", request_id=request_id, approve=True, reason="all done")
            return
        elif kind == "none" and item["blocked_by"] == "plan_required" and must_plan and not planned:
            await agent.ok("submit_plan", plan=f"{name}: take whatever is ready, one at a time")
            planned = True


async def _lead(agent: Agent, tasks: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    """Create the DAG, approve the plan, and shut the team down once every task completed."""
    await agent.ok("create_tasks", tasks=tasks, request_id="team-dag")
    wanted = {t["id"] for t in tasks}
    events: list[dict[str, Any]] = []
    completed: set[str] = set()
    answered: set[str] = set()
    after = 0
    shutting_down = False
    while len(answered) < len(names):
        page = await agent.ok("watch_events", after_seq=after, wait_seconds=3, limit=1000)
        after = page["next_after_seq"]
        for event in page["events"]:
            events.append(event)
            if event["kind"] == "plan_submitted":
                await agent.ok("decide_plan", plan_id=event["plan_id"], approve=True, feedback="approved")
            elif event["kind"] == "task_changed" and event["state"] == "COMPLETED":
                completed.add(event["task_id"])
            elif event["kind"] == "shutdown_answered" and event["approve"]:
                answered.add(event["teammate"])
        if not shutting_down and wanted <= completed:
            shutting_down = True
            for name in names:
                await agent.ok("request_shutdown", name=name, reason="the DAG is done", grace_seconds=60)
        summary = await agent.ok("board_summary")
        assert summary["tasks_by_state"].get("FAILED", 0) == 0
    return events


# Kept beside the board-level run (tests/conformance/test_board_concurrency.py): this one is through MCP bridges.
@pytest.mark.timeout(90)
def test_four_teammates_and_a_lead_finish_a_dag_over_stdio_exactly_once_in_order(board, secrets, mint, tmp) -> None:
    mates = [mint("team", roles=["dag"], require_plan_approval=(i == 0)) for i in range(TEAMMATES)]
    names = [name for name, _ in mates]
    tasks = [dict(t, required_role="dag") for t in _dag("dag-")]
    logs = [StdioLog(tmp / f"{who}.out", tmp / f"{who}.err") for who in ["lead", *names]]
    done: list[tuple[str, str]] = []

    async def lead_run() -> list[dict[str, Any]]:
        async with stdio_agent(board.address, board.token, secrets, logs[0]) as lead:
            assert "next_item" not in await lead.tool_names()
            return await _lead(lead, tasks, names)

    async def mate_run(index: int) -> None:
        (name, token), log = mates[index], logs[index + 1]
        async with stdio_agent(board.address, token, secrets, log) as agent:
            await _teammate(agent, name, index == 0, done)

    async def scenario() -> list[dict[str, Any]]:
        results = await asyncio.gather(lead_run(), *(mate_run(i) for i in range(TEAMMATES)))
        return results[0]

    events = asyncio.run(scenario())
    ids = [task_id for task_id, _ in done]
    assert sorted(ids) == sorted(t["id"] for t in tasks) and len(ids) == len(set(ids)), "not exactly once"
    seq_of: dict[tuple[str, str], int] = {}
    for event in events:
        if event["kind"] == "task_changed":
            seq_of.setdefault((event["task_id"], event["state"]), event["seq"])
    for task in tasks:
        started = seq_of[(task["id"], "IN_PROGRESS")]
        for dep in task["depends_on"]:
            assert seq_of[(dep, "COMPLETED")] < started, f"{task['id']} started before {dep} completed"
    assert {who for _, who in done} <= set(names)
    for task in tasks:
        assert board.get_task(task["id"]).state is corral.TaskState.COMPLETED
    for log in logs:
        log.check(secrets)
