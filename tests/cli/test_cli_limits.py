"""`corral limits set|list` against a real daemon, and a DAG file's concurrency_key."""

from __future__ import annotations

import pytest


@pytest.mark.timeout(60)
def test_limits_set_list_and_remove(cli, lead, write_file):
    assert cli("limits", "list").stdout.strip() == "no concurrency limits"
    assert cli.json("limits", "list") == []
    result = cli("limits", "set", "openai", "4")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "openai: at most 4 in progress (0 now)"
    assert cli.json("limits", "set", "repo:web", "1") == {"key": "repo:web", "limit": 1, "in_progress": 0}

    dag = write_file("dag.toml", '[defaults]\nconcurrency_key = "repo:web"\n[[tasks]]\nid = "a"\n[[tasks]]\nid = "b"\n')
    added = cli.json("tasks", "add", str(dag))
    assert [task["id"] for task in added] == ["a", "b"]
    assert lead.get_task("a").concurrency_key == "repo:web"
    assert cli.json("tasks", "show", "b")["concurrency_key"] == "repo:web"

    assert cli.json("limits", "list") == [
        {"key": "openai", "limit": 4, "in_progress": 0},
        {"key": "repo:web", "limit": 1, "in_progress": 0},
    ]
    text = cli("limits", "list").stdout
    assert "openai" in text and "repo:web" in text
    assert cli("limits", "set", "openai", "0").stdout.strip() == "openai: no limit (0 in progress now)"
    assert [limit["key"] for limit in cli.json("limits", "list")] == ["repo:web"]


@pytest.mark.timeout(60)
def test_a_bad_limit_is_one_line_naming_the_field(cli, error_line):
    line = error_line(cli("limits", "set", "openai", "10001"))
    assert line == "corral: INVALID_ARGUMENT: limit: 10001 is outside [1, 10000]"
    # A negative limit is a value, refused with the range (not an unknown option '-1').
    negative = cli("limits", "set", "openai", "-1")
    assert (
        negative.exit_code == 1 and error_line(negative) == "corral: INVALID_ARGUMENT: limit: -1 is outside [1, 10000]"
    )
    assert "key" in error_line(cli("limits", "set", "has space", "1"))
    assert cli.json("limits", "list") == []
