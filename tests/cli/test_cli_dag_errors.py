"""Bad DAG files: one clear line naming the file, the task and the field; nothing written."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path

import pytest

import corral
from corral._dagfile import DagError, parse_dag


@pytest.fixture(scope="module")
def shared_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[corral.Lead, Path]]:
    """One daemon for the refusals: a refused batch writes nothing, so they cannot interfere."""
    state_dir = tmp_path_factory.mktemp("dag") / "state"
    with corral.Lead.launch(state_dir, ready_timeout=30) as lead:
        yield lead, state_dir


# (file name, content, what the error line must contain)
REFUSED_BY_THE_DAEMON = [
    pytest.param(
        "cycle.toml",
        '[[tasks]]\nid = "a"\ndepends_on = ["c"]\n[[tasks]]\nid = "b"\ndepends_on = ["a"]\n'
        '[[tasks]]\nid = "c"\ndepends_on = ["b"]\n',
        ["cycle.toml: task 'a' (tasks[0]): depends_on: dependency cycle: a → c → b → a"],
        id="cycle",
    ),
    pytest.param(
        "unknown.yaml",
        "tasks:\n  - id: a\n  - id: b\n    depends_on: [a, nope]\n",
        ["unknown.yaml: task 'b' (tasks[1]): depends_on: unknown dependency 'nope'"],
        id="unknown-dep",
    ),
    pytest.param(
        "dup.json",
        '{"tasks": [{"id": "a"}, {"id": "b"}, {"id": "a"}]}',
        ["dup.json: task 'a' (tasks[2]): id: duplicate id 'a'"],
        id="duplicate-id",
    ),
    pytest.param(
        "self.toml",
        '[[tasks]]\nid = "a"\n[[tasks]]\nid = "loop"\ndepends_on = ["loop"]\n',
        ["self.toml: task 'loop' (tasks[1]): depends_on:", "depends on itself"],
        id="self-dependency",
    ),
    pytest.param(
        "range.yaml",
        "tasks:\n  - id: a\n    max_attempts: 500\n",
        ["range.yaml: task 'a' (tasks[0]): max_attempts: 500 is outside"],
        id="max-attempts-out-of-range",
    ),
    pytest.param(
        "lease.toml",
        '[[tasks]]\nid = "a"\nlease_seconds = 0.5\n',
        ["lease.toml: task 'a' (tasks[0]): lease_seconds: 0.5s is outside [1s"],
        id="lease-out-of-range",
    ),
    pytest.param(
        "backoff.toml",
        '[[tasks]]\nid = "a"\nretry_backoff_seconds = 4000\n',
        ["backoff.toml: task 'a' (tasks[0]): retry_backoff_seconds: 4000s is outside [0s, 3600s]"],
        id="backoff-out-of-range",
    ),
    pytest.param(
        "later.yaml",
        "tasks:\n  - id: a\n    not_before: '2999-01-01T00:00:00Z'\n",
        ["later.yaml: task 'a' (tasks[0]): not_before: more than a year ahead"],
        id="not-before-too-far",
    ),
    pytest.param(
        "rounds.toml",
        '[[tasks]]\nid = "a"\nreview = { reviewer_role = "qa", max_rounds = 50 }\n',
        ["rounds.toml: task 'a' (tasks[0]): review.max_rounds:", "50"],
        id="review-rounds-out-of-range",
    ),
]

REFUSED_BY_THE_CLI = [
    pytest.param(
        "when.toml",
        '[[tasks]]\nid = "a"\nnot_before = "tomorrow"\n',
        ["when.toml: task 'a' (tasks[0]): not_before: not an ISO 8601 date and time: \"tomorrow\""],
        id="not-before-unreadable",
    ),
    pytest.param(
        "naive.toml",
        '[[tasks]]\nid = "a"\nnot_before = "2026-12-24T09:00:00"\n',
        ["naive.toml: task 'a' (tasks[0]): not_before: needs a UTC offset"],
        id="not-before-without-offset",
    ),
    pytest.param(
        "type.toml",
        '[[tasks]]\nid = "a"\n[[tasks]]\nid = "b"\npriority = "high"\n',
        ["type.toml: task 'b' (tasks[1]): priority: expected an integer, got string \"high\""],
        id="bad-field-type",
    ),
    pytest.param(
        "deps.yaml",
        "tasks:\n  - id: a\n  - id: b\n    depends_on: a\n",
        ["deps.yaml: task 'b' (tasks[1]): depends_on: expected a list of strings, got string"],
        id="deps-not-a-list",
    ),
    pytest.param(
        "intid.yaml",
        "tasks:\n  - id: 12\n",
        ["intid.yaml: tasks[0]: id: expected a string, got integer 12"],
        id="id-not-a-string",
    ),
    pytest.param(
        "typo.json",
        '{"tasks": [{"id": "a", "dependson": ["b"]}]}',
        ["typo.json: task 'a' (tasks[0]): unknown field 'dependson' (did you mean 'depends_on'?)"],
        id="unknown-field",
    ),
    pytest.param(
        "noid.toml",
        '[[tasks]]\ntitle = "who am I"\n',
        ["noid.toml: tasks[0]: id: missing"],
        id="missing-id",
    ),
    pytest.param(
        "review.toml",
        '[[tasks]]\nid = "a"\nreview = "yes"\n',
        ["review.toml: task 'a' (tasks[0]): review: expected a table, got string \"yes\""],
        id="review-not-a-table",
    ),
    pytest.param(
        "reviewer.yaml",
        "tasks:\n  - id: a\n    review: {reviewer: qa}\n",
        ["reviewer.yaml: task 'a' (tasks[0]): review: unknown key 'reviewer' (did you mean 'reviewer_role'?)"],
        id="review-unknown-key",
    ),
    pytest.param(
        "rounds.json",
        '{"tasks": [{"id": "a", "review": {"max_rounds": "3"}}]}',
        ["rounds.json: task 'a' (tasks[0]): review.max_rounds: expected an integer, got string \"3\""],
        id="review-rounds-not-an-integer",
    ),
    pytest.param("broken.toml", '[[tasks]\nid = "a"\n', ["broken.toml: not valid TOML:", "line 1"], id="bad-toml"),
    pytest.param("broken.json", '{"tasks": [{"id": "a"},', ["broken.json: not valid JSON:", "line 1"], id="bad-json"),
    pytest.param("broken.yaml", "tasks:\n  - id: [a\n", ["broken.yaml: not valid YAML:", "line"], id="bad-yaml"),
    pytest.param("empty.yaml", "tasks: []\n", ["empty.yaml: no tasks"], id="no-tasks"),
    pytest.param("tasks.txt", "whatever", ["tasks.txt: cannot tell the format", "--format"], id="unknown-suffix"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("name", "text", "expected"), REFUSED_BY_THE_DAEMON)
def test_daemon_refusal_points_at_the_task_and_field_and_writes_nothing(
    shared_daemon, make_cli, write_file, error_line, name, text, expected
):
    lead, state_dir = shared_daemon
    result = make_cli(state_dir)("tasks", "add", str(write_file(name, text)))
    assert result.exit_code == 1, result.output
    line = error_line(result)
    for fragment in expected:
        assert fragment in line, line
    assert list(lead.list_tasks()) == []


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("name", "text", "expected"), REFUSED_BY_THE_CLI)
def test_bad_file_is_refused_before_any_daemon_is_contacted(
    tmp_path, make_cli, write_file, error_line, name, text, expected
):
    # No daemon at all: the file's own problems are reported first.
    result = make_cli(tmp_path / "no-daemon-here")("tasks", "add", str(write_file(name, text)))
    assert result.exit_code == 1, result.output
    line = error_line(result)
    for fragment in expected:
        assert fragment in line, line


@pytest.mark.timeout(60)
def test_a_different_spec_for_an_existing_id_names_the_task(cli, write_file, error_line, lead):
    lead.create_tasks([corral.TaskSpec("a", title="original")])
    result = cli("tasks", "add", str(write_file("dag.yaml", "tasks:\n  - id: b\n  - id: a\n    title: changed\n")))
    line = error_line(result)
    assert "dag.yaml: task 'a' (tasks[1]): id:" in line and "different spec" in line
    assert [task.id for task in lead.list_tasks()] == ["a"]


@pytest.mark.timeout(60)
def test_missing_file_is_one_line(cli, tmp_path, error_line):
    result = cli("tasks", "add", str(tmp_path / "absent.toml"))
    assert result.exit_code == 1
    assert "absent.toml: cannot read" in error_line(result)


@pytest.mark.timeout(60)
def test_format_option_overrides_the_suffix(cli, write_file, lead):
    path = write_file("tasks.txt", '{"tasks": [{"id": "a"}]}')
    result = cli("tasks", "add", str(path), "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert [task.id for task in lead.list_tasks()] == ["a"]


# ---------------------------------------------------------------- the parser alone


@pytest.mark.timeout(10)
def test_parser_applies_defaults_and_converts_fields():
    dag = parse_dag(
        "defaults:\n  lease_seconds: 2.5\n  priority: 4\ntasks:\n"
        "  - id: a\n    payload: héllo\n  - id: b\n    priority: -1\n    depends_on: [a]\n    max_attempts: 7\n",
        "yaml",
        name="x.yaml",
    )
    a, b = dag.specs
    assert a == corral.TaskSpec(
        "a", payload="héllo".encode(), priority=4, lease_duration=datetime.timedelta(seconds=2.5)
    )
    assert b.priority == -1 and b.depends_on == ("a",) and b.max_attempts == 7


@pytest.mark.timeout(10)
def test_parser_accepts_a_bare_list_and_refuses_unknown_top_level_keys():
    assert [spec.id for spec in parse_dag('[{"id": "a"}, {"id": "b"}]', "json", name="x").specs] == ["a", "b"]
    with pytest.raises(DagError, match="unknown top-level key 'task' \\(did you mean 'tasks'\\?\\)"):
        parse_dag('[[task]]\nid = "a"\n', "toml", name="x")
    with pytest.raises(DagError, match="defaults: unknown key 'title'"):
        parse_dag('[defaults]\ntitle = "t"\n[[tasks]]\nid = "a"\n', "toml", name="x")
    with pytest.raises(DagError, match="max_attempts: expected an integer, got boolean true"):
        parse_dag('[[tasks]]\nid = "a"\nmax_attempts = true\n', "toml", name="x")


@pytest.mark.timeout(10)
def test_parser_reads_a_review_table_as_the_tasks_review_policy():
    dag = parse_dag(
        '[[tasks]]\nid = "a"\nreview = { reviewer_role = "qa", max_rounds = 2 }\n'
        '[[tasks]]\nid = "b"\nreview = {}\n[[tasks]]\nid = "c"\n',
        "toml",
        name="x.toml",
    )
    a, b, c = dag.specs
    assert a.review == corral.ReviewPolicy("qa", 2)
    assert b.review == corral.ReviewPolicy(), "an empty table: the Lead reviews, with the daemon's max_rounds"
    assert c.review is None
