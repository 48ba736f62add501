"""`corral tasks ...` against a real daemon: exit codes and --json shapes."""

from __future__ import annotations

import json

import pytest

import corral

TASK_KEYS = {
    "id",
    "state",
    "title",
    "description",
    "depends_on",
    "priority",
    "required_role",
    "max_attempts",
    "lease_seconds",
    "owner",
    "attempt",
    "error",
    "seq",
    "create_time",
    "lease_expire_time",
    "finish_time",
    "payload",
    "result",
}

TOML_DAG = """
[defaults]
lease_seconds = 20

[[tasks]]
id = "fetch"
title = "Fetch"
priority = 5
payload = '{"url": "https://example.org"}'

[[tasks]]
id = "build"
depends_on = ["fetch"]
max_attempts = 2

[[tasks]]
id = "review"
depends_on = ["build"]
required_role = "reviewer"
lease_seconds = 90
"""

YAML_DAG = """
- id: y1
  title: From YAML
- id: y2
  depends_on: [y1]
  priority: -3
"""

JSON_DAG = json.dumps({"tasks": [{"id": "j1", "description": "from JSON"}, {"id": "j2", "depends_on": ["j1", "y1"]}]})


@pytest.mark.timeout(60)
def test_add_toml_yaml_json_then_list(cli, write_file, lead):
    path = write_file("dag.toml", TOML_DAG)
    result = cli("tasks", "add", str(path))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == f"added 3 new task(s) from {path}"
    added = cli.json("tasks", "add", str(write_file("dag.yaml", YAML_DAG)))
    assert [task["id"] for task in added] == ["y1", "y2"]
    # JSON may depend on tasks already on the board (y1).
    assert cli("tasks", "add", str(write_file("dag.json", JSON_DAG))).exit_code == 0

    listed = cli.json("tasks", "list")
    assert [task["id"] for task in listed] == ["fetch", "build", "review", "y1", "y2", "j1", "j2"]
    for task in listed:
        assert set(task) == TASK_KEYS
        assert task["state"] == "pending"
    by_id = {task["id"]: task for task in listed}
    assert by_id["fetch"]["payload"] == '{"url": "https://example.org"}'
    assert by_id["fetch"]["priority"] == 5
    assert by_id["build"]["lease_seconds"] == 20.0 and by_id["build"]["max_attempts"] == 2
    assert by_id["review"]["lease_seconds"] == 90.0 and by_id["review"]["required_role"] == "reviewer"
    assert sorted(by_id["j2"]["depends_on"]) == ["j1", "y1"]
    assert by_id["y2"]["priority"] == -3

    # The same tasks are on the board, as the SDK sees them.
    assert {task.id for task in lead.list_tasks()} == set(by_id)


@pytest.mark.timeout(60)
def test_re_adding_an_unchanged_file_is_a_no_op(cli, write_file):
    path = str(write_file("dag.toml", TOML_DAG))
    assert cli("tasks", "add", path).exit_code == 0
    again = cli("tasks", "add", path)
    assert again.exit_code == 0, again.stderr
    assert again.stdout.strip() == f"added 0 new task(s) from {path}; 3 already existed unchanged"
    assert len(cli.json("tasks", "list")) == 3


@pytest.mark.timeout(60)
def test_a_file_that_grew_adds_only_its_new_tasks(cli, write_file):
    path = str(write_file("dag.toml", TOML_DAG))
    assert cli("tasks", "add", path).exit_code == 0
    grown = str(write_file("grown.toml", TOML_DAG + '\n[[tasks]]\nid = "ship"\ndepends_on = ["review"]\n'))
    result = cli("tasks", "add", grown)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == f"added 1 new task(s) from {grown}; 3 already existed unchanged"


@pytest.mark.timeout(60)
def test_changed_specs_are_refused_naming_every_changed_id(cli, write_file, error_line):
    assert cli("tasks", "add", str(write_file("dag.toml", TOML_DAG))).exit_code == 0
    changed = TOML_DAG.replace("priority = 5", "priority = 6").replace("max_attempts = 2", "max_attempts = 3")
    result = cli("tasks", "add", str(write_file("changed.toml", changed)))
    assert result.exit_code == 1
    assert "tasks 'fetch', 'build' exist with a different spec" in error_line(result)
    assert len(cli.json("tasks", "list")) == 3, "nothing of a refused file is written"


@pytest.mark.timeout(60)
def test_list_filters_by_state_and_show_gives_one_task(cli, write_file, lead, start_teammate, until_event):
    cli("tasks", "add", str(write_file("dag.toml", TOML_DAG)))
    mate = start_teammate("ann", lambda task: f"built {task.id}")
    # `review` needs a reviewer; ann is not one, so fetch and build finish and review waits.
    until_event(lead, lambda e: isinstance(e, corral.TaskChanged) and e.task.id == "build" and e.task.state.is_final)

    completed = cli.json("tasks", "list", "--state", "completed")
    assert [task["id"] for task in completed] == ["fetch", "build"]
    pending = cli.json("tasks", "list", "--state", "pending", "--state", "in_progress")
    assert [task["id"] for task in pending] == ["review"]
    assert [task["id"] for task in cli.json("tasks", "list", "--owner", "ann")] == ["fetch", "build"]

    shown = cli.json("tasks", "show", "build")
    assert set(shown) == TASK_KEYS
    assert shown["state"] == "completed" and shown["owner"] == "ann" and shown["result"] == "built build"
    assert shown["attempt"] == 1 and shown["finish_time"].endswith("Z")

    text = cli("tasks", "show", "build")
    assert text.exit_code == 0 and "built build" in text.stdout
    table = cli("tasks", "list")
    assert table.exit_code == 0 and "review" in table.stdout
    lead.remove_teammate("ann")
    mate.result()


@pytest.mark.timeout(60)
def test_show_unknown_task_is_one_line_and_exit_1(cli, error_line):
    result = cli("tasks", "show", "nope")
    assert result.exit_code == 1
    assert "not found" in error_line(result) and "nope" in result.stderr


@pytest.mark.timeout(60)
def test_cancel_cascades_to_dependents(cli, write_file):
    cli("tasks", "add", str(write_file("dag.toml", TOML_DAG)))
    changed = cli.json("tasks", "cancel", "build")
    assert sorted(task["id"] for task in changed) == ["build", "review"]
    assert all(task["state"] == "canceled" for task in changed)
    assert [task["id"] for task in cli.json("tasks", "list", "--state", "canceled")] == ["build", "review"]
    result = cli("tasks", "cancel", "fetch")
    assert result.exit_code == 0 and "canceled 1 task(s): fetch" in result.stdout


@pytest.mark.timeout(60)
def test_connection_options_on_the_group_or_from_the_environment(cli, lead, state_dir, write_file):
    cli("tasks", "add", str(write_file("dag.yaml", YAML_DAG)))
    grouped = cli("--state-dir", str(state_dir), "tasks", "list", "--json", connect=False)
    assert grouped.exit_code == 0, grouped.stderr
    assert len(json.loads(grouped.stdout)) == 2
    env = {"CORRAL_ADDRESS": lead.address, "CORRAL_TOKEN": lead.token}
    from_env = cli("tasks", "list", "--json", env=env, connect=False)
    assert from_env.exit_code == 0, from_env.stderr
    assert len(json.loads(from_env.stdout)) == 2
    explicit = cli("tasks", "list", "--json", "--address", lead.address, "--token", lead.token, connect=False)
    assert explicit.exit_code == 0 and len(json.loads(explicit.stdout)) == 2
