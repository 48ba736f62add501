"""The Lead's tools and the split by role, in-process against a real daemon."""

from __future__ import annotations

import asyncio
import os
import stat

import pytest

import corral
from corral.mcp_bridge.server import ALL_TOOL_NAMES

from .mcpkit import bridge_agent

TEAMMATE_ONLY = {"next_item", "renew_lease", "complete_task", "fail_task", "release_task", "submit_plan"}
TEAMMATE_ONLY |= {"respond_shutdown", "my_status", "ask_lead", "submit_review", "propose_tasks", "append_output"}
TEAMMATE_ONLY |= {"put_artifact"}
LEAD_ONLY = {"create_tasks", "cancel_tasks", "revoke_claim", "set_budget", "set_concurrency_limit", "decide_plan"}
LEAD_ONLY |= {"request_shutdown", "board_summary", "watch_events", "add_teammate", "answer_question", "review_task"}
LEAD_ONLY |= {"decide_proposals", "add_dependencies", "set_task_creation", "read_output", "get_artifact"}


@pytest.mark.timeout(30)
def test_each_role_lists_only_its_own_tools_and_another_roles_tool_is_denied(board, secrets, mint, tmp) -> None:
    _, token = mint()

    async def scenario() -> None:
        async with bridge_agent(board.address, token, secrets) as mate:
            names = await mate.tool_names()
            assert TEAMMATE_ONLY <= names and not names & LEAD_ONLY
            every = set(names)
            denied = await mate.error("create_tasks", tasks=[{"id": "x"}])
            assert denied.startswith("PERMISSION_DENIED:")
        async with bridge_agent(board.address, board.token, secrets) as lead:
            names = await lead.tool_names()
            assert LEAD_ONLY - {"add_teammate"} <= names and not names & TEAMMATE_ONLY
            assert "add_teammate" not in names  # only with --allow-mint
            denied = await lead.error("next_item", wait_seconds=1)
            assert denied.startswith("PERMISSION_DENIED:")
        async with bridge_agent(board.address, board.token, secrets, mint_dir=tmp) as lead:
            assert "add_teammate" in await lead.tool_names()
            # Another role's tool is known by name (PERMISSION_DENIED), anything else is unknown.
            assert every | await lead.tool_names() == ALL_TOOL_NAMES
            listing = (await lead.client.list_tools()).tools
            hints = {tool.name: tool.annotations for tool in listing}
            assert hints["board_summary"].read_only_hint is True
            assert all(a.open_world_hint is False for a in hints.values())
            assert all(tool.output_schema for tool in listing)

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_add_teammate_writes_a_0600_token_file_and_returns_only_its_path(board, secrets, tmp) -> None:
    async def scenario() -> None:
        async with bridge_agent(board.address, board.token, secrets, mint_dir=tmp) as lead:
            made = await lead.ok("add_teammate", name="minted", roles=["w"], require_plan_approval=False)
            path = tmp / "minted.token"
            assert made["token_file"] == str(path)
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
            token = path.read_text().strip()
            secrets.tokens.add(token)
            server = made["mcp_config"]["mcpServers"]["corral-minted"]
            assert server["args"] == ["-m", "corral.cli", "mcp", "--token-file", str(path)]
            assert os.path.isabs(server["command"])  # an MCP client's PATH lacks the venv
            assert token not in str(made)
            again = await lead.error("add_teammate", name="minted", roles=[], require_plan_approval=False)
            assert again.startswith("ALREADY_EXISTS:")
        async with bridge_agent(board.address, token, secrets) as minted:
            assert (await minted.ok("my_status"))["name"] == "minted"

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_the_lead_creates_watches_decides_and_shuts_down_through_tools(board, secrets, mint) -> None:
    name, token = mint(roles=["flow"], require_plan_approval=True)

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, board.token, secrets) as lead,
            bridge_agent(board.address, token, secrets) as mate,
        ):
            start = (await lead.ok("watch_events", after_seq=0, wait_seconds=1, limit=1000))["next_after_seq"]
            tasks = [
                {"id": f"{name}-a", "required_role": "flow", "description": "first"},
                {"id": f"{name}-b", "required_role": "flow", "depends_on": [f"{name}-a"], "lease_seconds": 5},
            ]
            assert (await lead.ok("create_tasks", tasks=tasks, request_id=name))["task_ids"] == [t["id"] for t in tasks]
            again = await lead.ok("create_tasks", tasks=tasks, request_id=name)
            assert again["task_ids"] == [t["id"] for t in tasks]  # the same batch again: the same tasks
            plan_id = (await mate.ok("submit_plan", plan="do a then b"))["plan_id"]
            seen = await lead.ok("watch_events", after_seq=start, wait_seconds=5)
            plans = [e for e in seen["events"] if e["kind"] == "plan_submitted"]
            assert plans and plans[-1]["plan_id"] == plan_id and plans[-1]["plan"]["from"] == name
            summary = await lead.ok("board_summary")
            assert plan_id in [p["plan_id"] for p in summary["plans_waiting"]]
            await lead.ok("decide_plan", plan_id=plan_id, approve=True, feedback="ok")
            assert (await mate.ok("next_item", wait_seconds=5))["kind"] == "plan_decision"
            for task in tasks:
                claim = await mate.ok("next_item", wait_seconds=5)
                assert claim["claim"]["task_id"] == task["id"]
                await mate.ok("complete_task", task_id=task["id"], result=f"did {task['id']}")
            summary = await lead.ok("board_summary")
            assert summary["tasks_by_state"]["COMPLETED"] >= 2
            request_id = (await lead.ok("request_shutdown", name=name, reason="all done", grace_seconds=30))[
                "request_id"
            ]
            assert (await mate.ok("next_item", wait_seconds=5))["kind"] == "shutdown_request"
            await mate.ok("respond_shutdown", request_id=request_id, approve=True, reason="bye")
            answered = await lead.ok("watch_events", after_seq=seen["next_after_seq"], wait_seconds=5, limit=1000)
            kinds = [e["kind"] for e in answered["events"]]
            assert "shutdown_answered" in kinds

    asyncio.run(scenario())
    assert board.get_task(f"{name}-b").result == f"did {name}-b".encode()


@pytest.mark.timeout(30)
def test_a_plan_decided_by_another_client_leaves_board_summary(board, secrets, mint) -> None:
    name, token = mint(require_plan_approval=True)

    async def waiting_plans(lead) -> list[str]:
        return [plan["plan_id"] for plan in (await lead.ok("board_summary"))["plans_waiting"]]

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, board.token, secrets) as lead,
            bridge_agent(board.address, token, secrets) as mate,
        ):
            plan_id = (await mate.ok("submit_plan", plan="a plan the CLI will turn down"))["plan_id"]
            deadline = asyncio.get_running_loop().time() + 10
            while plan_id not in await waiting_plans(lead):
                assert asyncio.get_running_loop().time() < deadline, "the plan never showed as waiting"
                await asyncio.sleep(0.05)
            # Decided by another client (the SDK, as `corral plans decide` would), not through this bridge.
            await asyncio.to_thread(board.decide_plan, plan_id, approve=False, feedback="smaller steps")
            while plan_id in await waiting_plans(lead):
                assert asyncio.get_running_loop().time() < deadline, f"plan {plan_id} still shows as waiting"
                await asyncio.sleep(0.05)
            seen = await lead.ok("watch_events", after_seq=0, wait_seconds=1, limit=1000)
            decided = [e for e in seen["events"] if e["kind"] == "plan_decided" and e["plan_id"] == plan_id]
            assert decided and decided[0]["author"] == name and decided[0]["approve"] is False
            assert decided[0]["feedback"]["text"] == "smaller steps"

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_a_long_watch_page_stops_within_the_text_cap_and_resumes_from_its_cursor(board, secrets) -> None:
    board.create_tasks(
        [corral.TaskSpec(f"many-{i:03d}", description="d" * 50, required_role="nobody") for i in range(400)]
    )

    async def scenario() -> None:
        async with bridge_agent(board.address, board.token, secrets) as lead:
            pages, seqs, created = [], [], set()
            while len(created) < 400 and len(pages) < 50:
                page = await lead.call("watch_events", after_seq=seqs[-1] if seqs else 0, wait_seconds=2, limit=1000)
                assert not page.is_error and len(page.text.encode()) <= 32 * 1024
                pages.append(page.data)
                seqs += [event["seq"] for event in page.data["events"]]
                assert page.data["next_after_seq"] == seqs[-1]
                created |= {e["task_id"] for e in page.data["events"] if e.get("task_id", "").startswith("many-")}
            assert seqs == list(range(1, len(seqs) + 1))  # each event once, in order, across the pages
            assert len(created) == 400
            assert any(page["truncated"] for page in pages)  # 400 events do not fit one page of text

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_the_lead_limits_revokes_cancels_and_messages_through_tools(board, secrets, mint) -> None:
    name, token = mint(roles=["ctl"])

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, board.token, secrets) as lead,
            bridge_agent(board.address, token, secrets) as mate,
        ):
            budget = await lead.ok("set_budget", teammate=name, max_tokens=1_000_000)
            assert (budget["teammate"], budget["max_tokens"]) == (name, 1_000_000)
            limit = await lead.ok("set_concurrency_limit", key=f"{name}-key", limit=1)
            assert limit == {"key": f"{name}-key", "limit": 1}
            tasks = [{"id": f"{name}-{i}", "required_role": "ctl", "concurrency_key": f"{name}-key"} for i in (1, 2)]
            tasks.append({"id": f"{name}-3", "required_role": "ctl", "depends_on": [f"{name}-2"]})
            await lead.ok("create_tasks", tasks=tasks)
            claimed = (await mate.ok("next_item", wait_seconds=5))["claim"]["task_id"]
            revoked = await lead.ok("revoke_claim", task_id=claimed, reason="changed my mind")
            assert revoked["state"] == "PENDING"
            assert (await mate.ok("next_item", wait_seconds=5))["kind"] == "claim_ended"
            canceled = await lead.ok("cancel_tasks", ids=[f"{name}-2"])
            assert set(canceled["canceled"]) == {f"{name}-2", f"{name}-3"}  # and its dependent
            assert (await lead.ok("send_message", to=name, body="carry on"))["recipients"] == [name]
            seen = []
            while {"message", "claim"} - set(seen) and len(seen) < 4:
                item = await mate.ok("next_item", wait_seconds=5)
                seen.append(item["kind"])
                if item["kind"] == "message":
                    assert item["message"]["body"]["from"] == "lead"
                if item["kind"] == "claim":  # the revoked task, back on the board and claimed again
                    assert item["claim"]["task_id"] == f"{name}-1"
                    await mate.ok("complete_task", task_id=f"{name}-1", result="ok")
            assert {"message", "claim"} <= set(seen), seen

    asyncio.run(scenario())
    assert board.get_task(f"{name}-1").state is corral.TaskState.COMPLETED
