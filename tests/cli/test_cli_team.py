"""`corral teammates|send|shutdown|plans` with real teammates (run_teammate in threads)."""

from __future__ import annotations

import os
import subprocess

import pytest

import corral

TEAMMATE_KEYS = {
    "name",
    "status",
    "roles",
    "require_plan_approval",
    "held_task_ids",
    "waiting_for_task_ids",
    "usage",
    "budget",
    "task_creation",
}


def is_plan(event: corral.WatchEvent) -> bool:
    return isinstance(event, corral.PlanSubmitted)


def listed_budget(cli, name: str) -> dict:
    return {t["name"]: t for t in cli.json("teammates", "list")}[name]["budget"]


@pytest.mark.timeout(60)
def test_teammates_add_prints_the_token_once_and_it_works(cli, lead):
    result = cli("teammates", "add", "ann", "--role", "reviewer", "--role", "builder")
    assert result.exit_code == 0, result.stderr
    token = result.stdout.strip()
    assert "\n" not in token and token
    assert "shown only this once" in result.stderr
    with corral.Teammate.connect(lead.address, token) as teammate:
        assert teammate.get_stats().open_streams == 0  # the credential works

    added = cli.json("teammates", "add", "bob", "--plan-required")
    assert set(added) == TEAMMATE_KEYS | {"token", "env"}
    assert added["require_plan_approval"] is True and added["status"] == "offline"
    assert added["env"] == {"CORRAL_ADDRESS": lead.address, "CORRAL_TOKEN": added["token"]}

    exports = cli("teammates", "add", "cyd", "--env")
    assert exports.stdout.startswith(f"export CORRAL_ADDRESS={lead.address}\nexport CORRAL_TOKEN=")

    snippet = cli.json("teammates", "add", "dee", "--mcp-config")
    server = snippet["mcpServers"]["corral-dee"]
    assert server["args"] == ["-m", "corral.cli", "mcp"] and os.path.isabs(server["command"])
    # An MCP client starts it without the environment's bin/ on its PATH.
    started = subprocess.run(
        [server["command"], *server["args"], "--help"], env={"PATH": ""}, capture_output=True, timeout=30
    )
    assert started.returncode == 0 and b"corral mcp" in started.stdout, started
    assert server["env"]["CORRAL_ADDRESS"] == lead.address
    with corral.Teammate.connect(lead.address, server["env"]["CORRAL_TOKEN"]) as dee:
        assert dee.get_identity() == corral.Identity("dee", "teammate", ())

    listed = cli.json("teammates", "list")
    assert [mate["name"] for mate in listed] == ["ann", "bob", "cyd", "dee"]
    assert all(set(mate) == TEAMMATE_KEYS for mate in listed)
    assert sorted(listed[0]["roles"]) == ["builder", "reviewer"]

    removed = cli.json("teammates", "remove", "cyd")
    assert removed["name"] == "cyd" and removed["status"] == "removed"


@pytest.mark.timeout(60)
def test_duplicate_teammate_and_unknown_removal_are_one_line(cli, error_line):
    assert cli("teammates", "add", "ann").exit_code == 0
    assert error_line(cli("teammates", "add", "ann")) == "corral: ALREADY_EXISTS: teammate 'ann' exists"
    result = cli("teammates", "remove", "nobody")
    assert result.exit_code == 1 and error_line(result) == "corral: TEAMMATE_NOT_FOUND: no teammate 'nobody'"


@pytest.mark.timeout(60)
def test_send_reaches_teammates(cli, lead, start_teammate, until_event):
    received: list[corral.Message] = []
    mate = start_teammate("ann", lambda task: None, on_message=received.append)
    start_teammate("bob", lambda task: None)
    until_event(
        lead,
        lambda e: (
            isinstance(e, corral.TeammateChanged)
            and e.teammate.name == "ann"
            and e.reason is corral.TeammateChangeReason.JOINED
        ),
    )
    assert cli.json("send", "*", "hello all") == {"recipients": ["ann", "bob"]}
    result = cli("send", "ann", "just you")
    assert result.exit_code == 0 and "sent to ann" in result.stdout
    answer = cli.json("shutdown", "ann", "--reason", "test over", "--wait", "--timeout", "20")
    assert answer["approve"] is True and answer["request_id"]
    assert mate.result().exit_reason is corral.ExitReason.SHUTDOWN
    # on_message runs on the loop's thread before the shutdown request is handled.
    assert [m.body for m in received] == ["hello all", "just you"]
    assert all(m.sender == "lead" for m in received)


@pytest.mark.timeout(60)
def test_plans_list_and_approve_then_work_flows(cli, lead, start_teammate, until_event):
    lead.create_tasks([corral.TaskSpec("a"), corral.TaskSpec("b", depends_on=("a",))])
    mate = start_teammate("planner", lambda task: f"did {task.id}", plan="do a, then b", require_plan_approval=True)
    until_event(lead, is_plan)
    plans = cli.json("plans", "list")
    assert len(plans) == 1
    plan = plans[0]
    assert set(plan) == {"plan_id", "author", "plan", "submit_time", "newest"}
    assert plan["author"] == "planner" and plan["plan"] == "do a, then b" and plan["newest"] is True
    assert lead.get_stats().count(corral.TaskState.COMPLETED) == 0  # the gate is closed

    text = cli("plans", "list")
    assert text.exit_code == 0 and "planner" in text.stdout
    result = cli("plans", "approve", plan["plan_id"], "--feedback", "go")
    assert result.exit_code == 0, result.stderr
    lead.wait_until_done(timeout=20)
    assert {task.id: task.result for task in lead.list_tasks()} == {"a": b"did a", "b": b"did b"}

    shutdown = cli("shutdown", "planner", "--wait", "--timeout", "20")
    assert shutdown.exit_code == 0, shutdown.stderr
    assert shutdown.stdout.startswith("shutdown request sent to 'planner' (request ")
    assert "planner approved" in shutdown.stdout
    summary = mate.result()
    assert summary.exit_reason is corral.ExitReason.SHUTDOWN and summary.completed == 2


@pytest.mark.timeout(60)
def test_plans_reject_sends_the_feedback(cli, lead, start_teammate, until_event):
    mate = start_teammate("planner", lambda task: None, plan="wing it", require_plan_approval=True)
    plan_id = until_event(lead, is_plan).plan_id
    result = cli("plans", "reject", plan_id, "--feedback", "write a real plan")
    assert result.exit_code == 0 and f"rejected plan {plan_id}" in result.stdout
    summary = mate.result()
    assert summary.exit_reason is corral.ExitReason.PLAN_REJECTED
    assert summary.plan_feedback == "write a real plan"


@pytest.mark.timeout(60)
def test_plans_list_on_a_board_without_plans(cli):
    assert cli.json("plans", "list") == []
    assert "no plans submitted" in cli("plans", "list").stdout


@pytest.mark.timeout(60)
def test_deciding_an_unknown_plan_is_one_line(cli, error_line):
    result = cli("plans", "approve", "999")
    assert result.exit_code == 1 and error_line(result) == "corral: PLAN_NOT_FOUND: no plan '999'"


@pytest.mark.timeout(60)
def test_teammates_budget_sets_it_and_list_and_stats_show_usage(cli, lead, error_line):
    token = cli("teammates", "add", "ann").stdout.strip()
    cli("teammates", "add", "bob")
    assert cli.json("teammates", "budget", "ann", "--cost-micros", "100", "--tokens", "50") == {
        "teammate": "ann",
        "budget": {"max_cost_micros": 100, "max_tokens": 50},
    }
    shown = cli("teammates", "budget", "*", "--tokens", "9")
    assert shown.exit_code == 0 and shown.stdout.strip() == "the default budget: 9 tok"
    lead.create_tasks([corral.TaskSpec("a")])
    with corral.Teammate.connect(lead.address, token) as teammate:
        claim = next(event for event in teammate.idle() if isinstance(event, corral.Claim))
        claim.complete("ok", usage=corral.Usage(input_tokens=30, output_tokens=20, cost_micros=7, model="m"))
    listed = {mate["name"]: mate for mate in cli.json("teammates", "list")}
    assert listed["ann"]["usage"] == {"input_tokens": 30, "output_tokens": 20, "cost_micros": 7, "model": "m"}
    assert listed["ann"]["budget"] == {"max_cost_micros": 100, "max_tokens": 50}
    assert listed["bob"]["budget"] == {"max_cost_micros": 0, "max_tokens": 9}  # the default
    assert cli.json("stats")["usage"] == {"input_tokens": 30, "output_tokens": 20, "cost_micros": 7, "model": ""}
    table = cli("teammates", "list").stdout
    assert "50 tok, 7 micros" in table and "50 tok, 100 micros" in table
    assert "input tokens" in cli("stats").stdout
    missing = cli("teammates", "budget", "nobody", "--tokens", "1")
    assert missing.exit_code == 1 and error_line(missing).startswith("corral: TEAMMATE_NOT_FOUND: ")
    assert cli("teammates", "budget", "ann", "--tokens", "-1").exit_code == 2
    for option in ("--tokens", "--cost-micros"):  # past int64, which the wire holds: a usage error naming it
        refused = cli("teammates", "budget", "ann", option, str(2**63))
        assert refused.exit_code == 2 and option in refused.stderr, refused.stderr
    assert listed_budget(cli, "ann") == {"max_cost_micros": 100, "max_tokens": 50}  # nothing written
