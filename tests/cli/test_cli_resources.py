"""Path leases through the CLI against a real daemon: `resources` / `shared_resources` in
DAG files (and what is refused), `tasks show` with the holder a task waits for, and
`corral resources list`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import corral
from tests.support import FAST_POLL

DAG = """
[[tasks]]
id = "merge"
title = "Merge the branches"
priority = 5
resources = ["repo:web"]

[[tasks]]
id = "api"
resources = ["repo:web/src/api"]
shared_resources = ["db:staging"]

[[tasks]]
id = "docs"
shared_resources = ["repo:docs"]
"""


@pytest.fixture
def team(lead: corral.Lead) -> Iterator[tuple[corral.Teammate, corral.Teammate]]:
    ada, bob = lead.add_teammate("ada"), lead.add_teammate("bob")
    with (
        corral.Teammate.connect(lead.address, ada.token) as first,
        corral.Teammate.connect(lead.address, bob.token) as second,
    ):
        yield first, second


def claim_one(teammate: corral.Teammate) -> corral.Claim:
    for event in teammate.idle(poll_interval=FAST_POLL):
        if isinstance(event, corral.Claim):
            return event
    raise AssertionError("the Idle stream ended without a claim")


@pytest.mark.timeout(60)
def test_dag_resources_are_shown_by_tasks_show_and_held_ones_listed(cli, lead, write_file, team):
    ada, bob = team
    assert len(cli.json("tasks", "add", str(write_file("edit.toml", DAG)))) == 3
    listed = cli.json("tasks", "list")
    assert [(t["id"], t["resources"], t["shared_resources"]) for t in listed] == [
        ("merge", ["repo:web"], []),
        ("api", ["repo:web/src/api"], ["db:staging"]),
        ("docs", [], ["repo:docs"]),
    ]
    api = lead.get_task("api")
    assert (api.resources, api.shared_resources) == (("repo:web/src/api",), ("db:staging",))
    assert cli("resources", "list").stdout.strip() == "no resources held"
    assert cli.json("resources", "list") == []

    held = claim_one(ada)
    assert held.task.id == "merge" and held.task.resources == ("repo:web",)
    shown = cli.json("tasks", "show", "api")
    assert shown["waiting_for"]["resources"] == [
        {
            "resource": "repo:web/src/api",
            "held_by_task_id": "merge",
            "held_resource": "repo:web",
            "held_exclusive": True,
        }
    ]
    text = cli("tasks", "show", "api").stdout
    assert "repo:web/src/api (exclusive), db:staging (shared)" in text
    assert "'repo:web/src/api' (task merge holds 'repo:web' exclusively)" in " ".join(text.split())

    assert cli.json("resources", "list") == [
        {"resource": "repo:web", "exclusive": True, "task_id": "merge", "teammate": "ada"}
    ]
    second = claim_one(bob)
    assert second.task.id == "docs", "api waits for repo:web; docs does not conflict"
    assert cli.json("resources", "list") == [
        {"resource": "repo:docs", "exclusive": False, "task_id": "docs", "teammate": "bob"},
        {"resource": "repo:web", "exclusive": True, "task_id": "merge", "teammate": "ada"},
    ]
    rows = [line.split() for line in cli("resources", "list").stdout.splitlines()]
    assert ["repo:docs", "shared", "docs", "bob"] in rows and ["repo:web", "exclusive", "merge", "ada"] in rows

    held.complete(b"merged")
    freed = cli.json("tasks", "show", "api")["waiting_for"]
    assert freed is None or freed["resources"] == [], "no stream is open, so it may wait for a teammate only"
    assert "holds" not in cli("tasks", "show", "api").stdout


@pytest.mark.timeout(60)
def test_the_same_file_twice_is_a_no_op_and_different_resources_are_refused(cli, lead, write_file, error_line):
    path = write_file("edit.toml", DAG)
    assert len(cli.json("tasks", "add", str(path))) == 3
    again = cli("tasks", "add", str(path))
    assert again.exit_code == 0, again.stderr
    changed = write_file("changed.toml", DAG.replace('shared_resources = ["db:staging"]', ""))
    line = error_line(cli("tasks", "add", str(changed)))
    assert "task 'api' (tasks[1]): id:" in line and "different spec" in line
    assert lead.get_task("api").shared_resources == ("db:staging",)


REFUSED_BY_THE_DAEMON = [
    pytest.param(
        '[[tasks]]\nid = "a"\n[[tasks]]\nid = "b"\nresources = ["repo:web", "repo:web//src"]\n',
        ["task 'b' (tasks[1]): resources[1] (\"repo:web//src\"): has a segment ''"],
        id="empty-segment",
    ),
    pytest.param(
        '[[tasks]]\nid = "a"\nshared_resources = ["repo:web/../etc"]\n',
        ["task 'a' (tasks[0]): shared_resources[0] (\"repo:web/../etc\"): has a segment '..'"],
        id="dotdot-segment",
    ),
    pytest.param(
        '[[tasks]]\nid = "a"\nresources = ["repo:' + "x" * 200 + '"]\n',
        ["task 'a' (tasks[0]): resources[0] (", "longer than 200 characters"],
        id="too-long",
    ),
    pytest.param(
        '[[tasks]]\nid = "a"\nresources = ["repo:web"]\nshared_resources = ["repo:web"]\n',
        ["task 'a' (tasks[0]): shared_resources[0] (\"repo:web\"): 'repo:web' is the same as"],
        id="exclusive-and-shared",
    ),
    pytest.param(
        '[[tasks]]\nid = "a"\nresources = [' + ", ".join(f'"p/{i}"' for i in range(17)) + "]\n",
        ["task 'a' (tasks[0]): resources: more than 16 resources"],
        id="seventeen",
    ),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("text", "expected"), REFUSED_BY_THE_DAEMON)
def test_a_bad_resource_names_the_task_field_and_value_and_writes_nothing(
    cli, lead, write_file, error_line, text, expected
):
    result = cli("tasks", "add", str(write_file("bad.toml", text)))
    assert result.exit_code == 1, result.output
    line = error_line(result)
    for fragment in expected:
        assert fragment in line, line
    assert list(lead.list_tasks()) == []


REFUSED_BY_THE_CLI = [
    pytest.param(
        '[[tasks]]\nid = "a"\nresources = "repo:web"\n',
        "task 'a' (tasks[0]): resources: expected a list of strings, got string",
        id="not-a-list",
    ),
    pytest.param(
        "tasks:\n  - id: a\n    shared_resources: [repo:web, 3]\n",
        "task 'a' (tasks[0]): shared_resources: expected a list of strings, got a list containing integer 3",
        id="not-strings",
    ),
    pytest.param(
        '{"tasks": [{"id": "a", "resources": ["repo:web", " "]}]}',
        "task 'a' (tasks[0]): resources[1]: must be a non-empty path such as 'repo:web/src/api'",
        id="blank",
    ),
    pytest.param(
        '[[tasks]]\nid = "a"\nresource = ["repo:web"]\n',
        "task 'a' (tasks[0]): unknown field 'resource' (did you mean 'resources'?)",
        id="typo",
    ),
]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("text", "expected"), REFUSED_BY_THE_CLI)
def test_a_resource_that_is_not_a_path_is_refused_before_any_daemon_is_contacted(
    tmp_path, make_cli, write_file, error_line, text, expected
):
    suffix = "json" if text.startswith("{") else "yaml" if text.startswith("tasks:") else "toml"
    result = make_cli(tmp_path / "no-daemon-here")("tasks", "add", str(write_file(f"bad.{suffix}", text)))
    assert result.exit_code == 1, result.output
    assert expected in error_line(result)
