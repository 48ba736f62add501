"""`corral stats|graph|watch|board` on a board a real team worked."""

from __future__ import annotations

import datetime
import json
import re

import pytest

import corral

SPECS = [
    corral.TaskSpec("fetch", title='Fetch "sources"'),
    corral.TaskSpec("build", depends_on=("fetch",)),
    corral.TaskSpec("test", depends_on=("build",)),
    corral.TaskSpec("docs", depends_on=("fetch",)),
]


def flaky_once(task: corral.Task) -> str:
    if task.id == "build" and corral.current_claim().attempt == 1:
        raise RuntimeError("flaky")
    return f"ok {task.id}"


@pytest.fixture
def worked_board(lead, start_teammate):
    """Four tasks done by one teammate (build failed once), which then shut down."""
    lead.create_tasks(SPECS)
    mate = start_teammate("ann", flaky_once)
    lead.wait_until_done(timeout=20)
    lead.request_shutdown("ann", reason="done")
    mate.result()
    return lead


@pytest.mark.timeout(60)
def test_stats_json_shape(cli, worked_board):
    stats = cli.json("stats")
    assert set(stats) == {
        "tasks_by_state",
        "teammates_by_status",
        "active_tasks",
        "writer",
        "open_streams",
        "usage",
        "store",
    }
    assert stats["store"] == "sqlite"  # a PostgreSQL board adds "postgres" (tests/postgres)
    assert stats["tasks_by_state"] == {
        "pending": 0,
        "in_progress": 0,
        "completed": 4,
        "failed": 0,
        "canceled": 0,
        "needs_input": 0,
        "in_review": 0,
        "proposed": 0,
    }
    assert set(stats["teammates_by_status"]) == {s.name.lower() for s in corral.TeammateStatus}
    assert stats["active_tasks"] == 0
    writer = stats["writer"]
    assert writer["commits"] > 0 and writer["jobs"] >= writer["commits"]
    assert {"queue_depth", "queue_depth_p99", "commit_latency_p99_ms", "refused_jobs"} <= set(writer)
    text = cli("stats")
    assert text.exit_code == 0 and "completed 4" in text.stdout


@pytest.mark.timeout(60)
def test_graph_mermaid_and_dot_show_edges_and_states(cli, worked_board):
    result = cli("graph")
    assert result.exit_code == 0, result.stderr
    mermaid = result.stdout
    assert mermaid.startswith("flowchart TD\n")
    nodes = dict(re.findall(r'^\s+(t\d+)\["([^"]*)"\]:::completed$', mermaid, re.MULTILINE))
    assert len(nodes) == 4
    ids = {label.split("<br/>")[0]: node for node, label in nodes.items()}
    assert set(ids) == {"fetch", "build", "test", "docs"}
    assert "#quot;sources#quot;" in nodes[ids["fetch"]]  # quotes escaped
    assert "attempt 2" in nodes[ids["build"]]
    for dep, task in [("fetch", "build"), ("build", "test"), ("fetch", "docs")]:
        assert f"    {ids[dep]} --> {ids[task]}\n" in mermaid

    dot = cli("graph", "--format", "dot").stdout
    assert dot.startswith("digraph corral {") and dot.rstrip().endswith("}")
    assert dot.count("->") == 3 and dot.count('fillcolor="#d4f7d4"') == 4
    assert '\\"sources\\"' in dot


@pytest.mark.timeout(60)
def test_graph_of_a_filtered_board_stubs_missing_dependencies(cli, lead):
    lead.create_tasks(SPECS)
    lead.cancel_tasks(["build"])
    mermaid = cli("graph", "--state", "canceled").stdout
    assert mermaid.count(":::canceled") == 2
    assert '(["fetch"])' in mermaid  # the pending dependency outside the selection is a stub


@pytest.mark.timeout(60)
def test_watch_no_follow_json_replays_every_event_in_order(cli, worked_board):
    result = cli("watch", "--no-follow", "--json")
    assert result.exit_code == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    seqs = [event["seq"] for event in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs) and seqs[0] == 1
    types = {event["type"] for event in events}
    assert {"task_changed", "teammate_changed", "shutdown_answered"} <= types
    completed = [e["task"]["id"] for e in events if e["type"] == "task_changed" and e["task"]["state"] == "completed"]
    assert sorted(completed) == ["build", "docs", "fetch", "test"]
    answer = next(e for e in events if e["type"] == "shutdown_answered")
    assert answer["teammate"] == "ann" and answer["approve"] is True

    tail = cli("watch", "--no-follow", "--json", "--after-seq", str(seqs[-3]))
    assert [json.loads(line)["seq"] for line in tail.stdout.splitlines()] == seqs[-2:]
    text = cli("watch", "--no-follow")
    assert text.exit_code == 0
    failed_line = r"^#\d+ \d\d:\d\d:\d\d\.\d{3} task build pending attempt=1/3 error='RuntimeError: flaky'$"
    assert re.search(failed_line, text.stdout, re.MULTILINE)


@pytest.mark.timeout(60)
def test_watch_follow_stops_at_its_timeout(cli, worked_board):
    result = cli("watch", "--timeout", "0.5", "--json")
    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) >= 8


@pytest.mark.timeout(60)
def test_board_until_done_on_a_finished_board_starts_from_the_current_state(cli, worked_board):
    result = cli("board", "--until-done", "--timeout", "20")
    assert result.exit_code == 0, result.stderr
    # The board as it is now, once: no progress from 0/4 up, no history replayed as news.
    lines = [line.split("] ", 1)[1] for line in result.stdout.splitlines() if line.strip()]
    assert lines == ["4/4 completed | completed 4"], result.stdout


@pytest.mark.timeout(60)
def test_board_times_out_on_an_unfinished_board(cli, lead, error_line):
    lead.create_tasks(SPECS)
    result = cli("board", "--until-done", "--timeout", "1")
    assert result.exit_code == 1
    assert "0/4 completed | pending 4" in result.stdout
    assert error_line(result) == "corral: the board was not done within 1s"


@pytest.mark.timeout(60)
def test_board_tasks_show_and_json_carry_a_holders_progress(cli, lead):
    lead.create_tasks([corral.TaskSpec("fetch", lease_duration=datetime.timedelta(seconds=30))])
    new = lead.add_teammate("ann")
    with corral.Teammate.connect(lead.address, new.token) as ann:
        for event in ann.idle(poll_interval=datetime.timedelta(milliseconds=50)):
            if isinstance(event, corral.Claim):
                event.report_progress("running tests, 3/5", 0.6)
                board = cli("board", "--until-done", "--timeout", "1")
                shown = cli("tasks", "show", "fetch")
                (listed,) = cli.json("tasks", "list")
                event.release()
                break
    assert board.exit_code == 1  # still in progress when the timeout came
    assert "ann on fetch: 60% running tests, 3/5" in board.stdout
    assert re.search(r"progress\s+60% running tests, 3/5 \(at \d{4}-", shown.stdout), shown.stdout
    assert (listed["progress"], listed["progress_fraction"]) == ("running tests, 3/5", 0.6)
    assert listed["progress_time"].startswith(str(datetime.datetime.now(datetime.UTC).year))


@pytest.mark.timeout(60)
def test_board_says_why_a_task_that_looks_ready_is_not_claimed(cli, lead):
    lead.create_tasks(
        [corral.TaskSpec("review", required_role="reviewer"), corral.TaskSpec("ship", depends_on=("review",))]
    )
    result = cli("board", "--until-done", "--timeout", "1")
    assert result.exit_code == 1
    assert "review waits for no teammate with role 'reviewer'" in result.stdout
    # A task held only by its dependencies is the normal case, not a line of its own.
    assert "ship waits for" not in result.stdout
