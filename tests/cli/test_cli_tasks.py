"""`corral tasks ...` against a real daemon: exit codes and --json shapes."""

from __future__ import annotations

import datetime
import json
import re

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
    "attempts_used",
    "error",
    "seq",
    "create_time",
    "lease_expire_time",
    "finish_time",
    "not_before_time",
    "retry_backoff_seconds",
    "retry_backoff_max_seconds",
    "attempt_timeout_seconds",
    "ready_time",
    "waiting_for",
    "progress",
    "progress_fraction",
    "progress_time",
    "concurrency_key",
    "usage",
    "question",
    "review",
    "review_rounds",
    "proposed_by",
    "discovered_from",
    "artifacts",
    "resources",
    "shared_resources",
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
    assert set(shown) == TASK_KEYS | {"attempts"}
    assert shown["state"] == "completed" and shown["owner"] == "ann" and shown["result"] == "built build"
    assert shown["attempt"] == 1 and shown["finish_time"].endswith("Z")

    text = cli("tasks", "show", "build")
    assert text.exit_code == 0 and "built build" in text.stdout
    table = cli("tasks", "list")
    assert table.exit_code == 0 and "review" in table.stdout
    lead.remove_teammate("ann")
    mate.result()


ATTEMPT_KEYS = {"attempt", "owner", "fence", "claim_time", "end_time", "outcome", "error", "verdict", "feedback"}


@pytest.mark.timeout(60)
def test_show_lists_the_attempts_with_their_errors(cli, lead):
    lead.create_tasks([corral.TaskSpec("flaky", max_attempts=3)])
    new = lead.add_teammate("ann")
    with corral.Teammate.connect(lead.address, new.token) as ann:
        for error in ("first try broke", "second try broke"):
            events = ann.idle()
            claim = next(events)
            events.close()
            assert isinstance(claim, corral.Claim)
            claim.fail(error)

    shown = cli.json("tasks", "show", "flaky")
    assert [set(attempt) for attempt in shown["attempts"]] == [ATTEMPT_KEYS, ATTEMPT_KEYS]
    assert [(a["attempt"], a["owner"], a["outcome"], a["error"]) for a in shown["attempts"]] == [
        (1, "ann", "failed", "first try broke"),
        (2, "ann", "failed", "second try broke"),
    ]
    assert all(a["end_time"].endswith("Z") and a["claim_time"].endswith("Z") for a in shown["attempts"])
    assert "attempts" not in cli.json("tasks", "list")[0], "the list keeps its shape"

    text = cli("tasks", "show", "flaky")
    assert text.exit_code == 0, text.stderr
    assert "attempts" in text.stdout and "first try broke" in text.stdout and "second try broke" in text.stdout
    assert text.stdout.count("failed") >= 2


@pytest.mark.timeout(60)
def test_show_after_a_reset_says_no_attempt_is_used_and_keeps_the_history(cli, lead):
    lead.create_tasks([corral.TaskSpec("flaky", max_attempts=2, retry_backoff=datetime.timedelta(0))])
    new = lead.add_teammate("ann")
    with corral.Teammate.connect(lead.address, new.token) as ann:
        for error in ("first try broke", "second try broke"):
            events = ann.idle()
            claim = next(events)
            events.close()
            assert isinstance(claim, corral.Claim)
            claim.fail(error)
    before = cli("tasks", "show", "flaky")
    assert before.exit_code == 0 and re.search(r"attempts used +2 of 2", before.stdout), before.stdout

    assert cli("tasks", "retry", "flaky", "--reset-attempts").exit_code == 0
    text = cli("tasks", "show", "flaky")
    assert text.exit_code == 0, text.stderr
    assert re.search(r"attempts used +0 of 2", text.stdout), text.stdout
    assert "first try broke" in text.stdout and "second try broke" in text.stdout, "the history is kept"
    shown = cli.json("tasks", "show", "flaky")
    assert (shown["state"], shown["attempt"], shown["attempts_used"]) == ("pending", 2, 0)
    assert len(shown["attempts"]) == 2


@pytest.mark.timeout(60)
def test_show_unknown_task_is_one_line_and_exit_1(cli, error_line):
    result = cli("tasks", "show", "nope")
    assert result.exit_code == 1
    # Every error from the daemon reads `LABEL: what happened` (cut 10 of the first-hour report).
    assert error_line(result) == "corral: TASK_NOT_FOUND: no task 'nope'"


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


@pytest.mark.timeout(60)
def test_a_delayed_task_from_a_file_shows_its_gates(cli, write_file, lead):
    at = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=30)).replace(microsecond=0)
    stamp = at.isoformat().replace("+00:00", "Z")
    dag = (
        f'[defaults]\nretry_backoff_seconds = 2\n\n[[tasks]]\nid = "later"\n'
        f'not_before = "{stamp}"\nretry_backoff_max_seconds = 30\n'
    )
    result = cli("tasks", "add", str(write_file("later.toml", dag)))
    assert result.exit_code == 0, result.stderr
    shown = cli.json("tasks", "show", "later")
    assert shown["not_before_time"] == shown["ready_time"] == stamp
    assert (shown["retry_backoff_seconds"], shown["retry_backoff_max_seconds"]) == (2, 30)
    text = cli("tasks", "show", "later").stdout
    assert "ready at" in text and "2s, doubling to 30s" in text


@pytest.mark.timeout(60)
def test_retry_sends_a_failed_task_back_and_refuses_a_pending_one(cli, lead):
    lead.create_tasks([corral.TaskSpec("flaky", max_attempts=1), corral.TaskSpec("after", depends_on=("flaky",))])
    ann = lead.add_teammate("ann")
    with corral.Teammate.connect(lead.address, ann.token) as teammate:
        events = teammate.idle()
        claim = next(events)
        claim.fail("broken", retryable=False)
        events.close()
    retried = cli.json("tasks", "retry", "flaky", "--reset-attempts")
    assert [(task["id"], task["state"]) for task in retried] == [("flaky", "pending"), ("after", "pending")]
    shown = cli.json("tasks", "show", "after")
    assert shown["waiting_for"]["dependencies"] == ["flaky"]
    refused = cli("tasks", "retry", "after")
    assert refused.exit_code == 1 and "'after' is PENDING" in refused.stderr


@pytest.mark.timeout(60)
def test_revoke_takes_a_claim_back_and_tells_its_holder(cli, lead, error_line):
    lead.create_tasks([corral.TaskSpec("held", lease_duration=datetime.timedelta(seconds=30))])
    new = lead.add_teammate("ann")
    with corral.Teammate.connect(lead.address, new.token) as teammate:
        events = teammate.idle()
        claim = next(events)
        assert isinstance(claim, corral.Claim) and claim.task.id == "held"

        revoked = cli.json("tasks", "revoke", "held", "--reason", "wrong branch")
        assert revoked["id"] == "held" and revoked["state"] == "pending" and revoked["owner"] == ""
        ended = next(events)
        assert ended == corral.ClaimEnded("held", claim.token, corral.ClaimEndReason.REVOKED, "wrong branch")
        assert claim.end_reason is corral.ClaimEndReason.REVOKED and claim.ended and claim.lost
        with pytest.raises(corral.ClaimRevoked):
            claim.complete("late")
        again = next(events)  # the task is ready again: the same stream claims it back
        assert isinstance(again, corral.Claim) and again.fence > claim.fence
        events.close()

    shown = cli.json("tasks", "show", "held")
    assert shown["attempts"][0]["outcome"] == "revoked" and shown["attempts"][0]["error"] == "wrong branch"
    lead.create_tasks([corral.TaskSpec("idle")])
    text = cli("tasks", "revoke", "idle")
    assert error_line(text).startswith(
        "corral: FAILED_PRECONDITION: cannot revoke: "
    ) and "no live claim" in error_line(text)
    assert error_line(cli("tasks", "revoke", "nope")) == "corral: TASK_NOT_FOUND: no task 'nope'"
