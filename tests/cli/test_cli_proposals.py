"""Discovered work on the command line: `proposals list|approve|reject`, `tasks depend`,
`teammates task-creation`, `tasks list --state proposed`, the board's proposals for the
Lead, `watch`'s two events, `graph`'s dashed proposed state, and a DAG file that gives a
task already on the board new dependencies."""

from __future__ import annotations

import datetime
import io
import json

import pytest
from rich.console import Console

import corral
from corral._terminal.boardview import BoardModel, LiveBoard

LONG_LEASE = datetime.timedelta(seconds=30)
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def _propose(lead: corral.Lead, specs: list[corral.TaskSpec], *, block: bool = False, name: str = "ann") -> None:
    """Claims the only ready task as teammate `name` and proposes `specs` from it (the claim is then released,
    or split with `block`)."""
    new = lead.add_teammate(name)
    with corral.Teammate.connect(lead.address, new.token) as mate:
        events = mate.idle()
        claim = next(events)
        assert isinstance(claim, corral.Claim)
        claim.propose_tasks(specs, block=block)
        if not block:
            claim.release()
        events.close()


@pytest.mark.timeout(60)
def test_list_approve_and_reject_proposals_with_json(cli, lead, error_line):
    assert cli("proposals", "list").stdout == "no proposals waiting\n"
    lead.create_tasks([corral.TaskSpec("t", priority=3, lease_duration=LONG_LEASE)])
    _propose(
        lead,
        [
            corral.TaskSpec("fix", title="fix the flaky test"),
            corral.TaskSpec("docs"),
            corral.TaskSpec("more-docs", depends_on=("docs",)),
        ],
    )

    listed = cli.json("proposals", "list")
    assert [(t["id"], t["state"], t["proposed_by"], t["discovered_from"]) for t in listed] == [
        ("fix", "proposed", "ann", "t"),
        ("docs", "proposed", "ann", "t"),
        ("more-docs", "proposed", "ann", "t"),
    ]
    table = cli("proposals", "list")
    assert table.exit_code == 0
    assert all(word in table.stdout for word in ("proposed", "discovered", "fix", "flaky", "ann", "more-docs"))
    assert [t["id"] for t in cli.json("tasks", "list", "--state", "proposed")] == ["fix", "docs", "more-docs"]
    assert "t" not in [t["id"] for t in cli.json("tasks", "list", "--state", "PROPOSED")]

    approved = cli("proposals", "approve", "fix")
    assert approved.exit_code == 0, approved.stderr
    assert approved.stdout == "approved 1 proposed task(s): fix; pending now\n"
    rejected = cli("proposals", "reject", "docs", "--feedback", "not now")
    assert rejected.stdout == "rejected 1 proposed task(s): docs\ncanceled with them: more-docs\n"
    docs = cli.json("tasks", "show", "docs")
    assert (docs["state"], docs["error"]) == ("canceled", "proposal rejected: not now")
    assert cli.json("proposals", "list") == []

    refused = cli("proposals", "approve", "fix")
    assert refused.exit_code == 1 and error_line(refused).startswith("corral: FAILED_PRECONDITION: cannot approve: ")
    unknown = cli("proposals", "reject", "nope")
    assert unknown.exit_code == 1 and "nope" in error_line(unknown)
    assert cli("proposals", "approve").exit_code == 2, "at least one id"

    _propose(lead, [corral.TaskSpec("again")], name="bob")
    (decided,) = cli.json("proposals", "approve", "again")
    assert (decided["id"], decided["state"], decided["proposed_by"]) == ("again", "pending", "bob")


@pytest.mark.timeout(60)
def test_rejecting_a_split_says_which_task_is_ready_again(cli, lead):
    lead.create_tasks([corral.TaskSpec("t", lease_duration=LONG_LEASE)])
    _propose(lead, [corral.TaskSpec("prep")], block=True)
    assert cli.json("tasks", "show", "t")["depends_on"] == ["prep"]
    rejected = cli("proposals", "reject", "prep")
    assert rejected.stdout == "rejected 1 proposed task(s): prep\nsplit tasks ready again: t\n"
    shown = cli.json("tasks", "show", "t")
    assert shown["depends_on"] == [] and shown["attempts"][-1]["outcome"] == "split"


@pytest.mark.timeout(60)
def test_tasks_depend_adds_edges_and_refuses_a_cycle(cli, lead, error_line):
    lead.create_tasks([corral.TaskSpec("a"), corral.TaskSpec("b", depends_on=("a",)), corral.TaskSpec("c")])
    added = cli("tasks", "depend", "a", "--on", "c")
    assert added.exit_code == 0, added.stderr
    assert added.stdout == "a now depends on c\n"
    cycle = cli("tasks", "depend", "c", "--on", "b")
    assert cycle.exit_code == 1 and "dependency cycle: c → b → a → c" in error_line(cycle)
    lead.create_tasks([corral.TaskSpec("d"), corral.TaskSpec("e")])
    shown = cli.json("tasks", "depend", "e", "--on", "a,d")
    assert (shown["id"], shown["depends_on"]) == ("e", ["a", "d"])
    assert cli("tasks", "depend", "e", "--on", " , ").exit_code == 2
    lead.cancel_tasks(["d"])
    finished = cli("tasks", "depend", "d", "--on", "a")
    assert finished.exit_code == 1
    assert error_line(finished).startswith("corral: FAILED_PRECONDITION: cannot add dependencies: ")


@pytest.mark.timeout(60)
def test_teammates_task_creation_sets_the_policy(cli, lead, error_line):
    lead.add_teammate("ann")
    lead.add_teammate("bob")
    assert cli("teammates", "task-creation", "ann", "deny").stdout == "task creation of 'ann': deny\n"
    assert cli("teammates", "task-creation", "*", "ALLOW").stdout == "the default task creation: allow\n"
    assert cli.json("teammates", "task-creation", "bob", "propose") == {"teammate": "bob", "task_creation": "propose"}
    listed = {t["name"]: t["task_creation"] for t in cli.json("teammates", "list")}
    assert listed == {"ann": "deny", "bob": "propose"}
    assert cli("teammates", "task-creation", "ann", "maybe").exit_code == 2
    unknown = cli("teammates", "task-creation", "nobody", "allow")
    assert unknown.exit_code == 1 and "nobody" in error_line(unknown)


@pytest.mark.timeout(60)
def test_board_watch_and_graph_show_proposals(cli, lead):
    lead.create_tasks([corral.TaskSpec("t", lease_duration=LONG_LEASE)])
    _propose(lead, [corral.TaskSpec("fix", title="fix it")], block=True)
    board = cli("board", "--until-done", "--timeout", "1")
    assert board.exit_code == 1, "a proposal waits: the board is not done"
    assert "fix waits for the lead's decision: proposed by ann from t: fix it" in board.stdout
    stats = cli.json("stats")
    assert stats["tasks_by_state"]["proposed"] == 1 and stats["active_tasks"] == 2
    mermaid = cli("graph").stdout
    assert '"]:::proposed' in mermaid and "classDef proposed" in mermaid and "stroke-dasharray" in mermaid
    assert "proposed · by ann" in mermaid
    dot = cli("graph", "--format", "dot").stdout
    assert 'style="rounded,filled,dashed"' in dot

    cli("proposals", "reject", "fix", "--feedback", "no")
    lines = [json.loads(line) for line in cli("watch", "--no-follow", "--json").stdout.splitlines()]
    (proposed,) = [line for line in lines if line["type"] == "tasks_proposed"]
    assert proposed == {
        **proposed,
        "teammate": "ann",
        "task_ids": ["fix"],
        "discovered_from": "t",
        "needs_decision": True,
        "split": True,
    }
    (decided,) = [line for line in lines if line["type"] == "proposals_decided"]
    assert decided == {**decided, "task_ids": ["fix"], "approve": False, "feedback": "no"}
    text = cli("watch", "--no-follow").stdout
    assert "ann proposed tasks fix from t (split; waiting for the lead)" in text
    assert "proposed tasks fix rejected: no" in text


@pytest.mark.timeout(10)
def test_the_live_board_lists_proposals_and_notes_the_split_and_the_decision() -> None:
    model = BoardModel()
    model.apply(corral.TaskChanged(seq=1, time=NOW, task=corral.Task("t", corral.TaskState.IN_PROGRESS, owner="ann")))
    proposed = corral.Task("p", corral.TaskState.PROPOSED, proposed_by="ann", discovered_from="t")
    model.apply(corral.TaskChanged(seq=2, time=NOW, task=proposed))
    split = corral.Task("t", corral.TaskState.PENDING, depends_on=("p",))
    model.apply(corral.TaskChanged(seq=3, time=NOW, task=split))
    model.apply(corral.TasksProposed(4, NOW, "ann", ("p",), "t", needs_decision=True, split=True))
    assert model.proposals() == {"p": proposed} and model.failed_attempts == 0, "a split is no failure"
    assert "ann split t: it waits for p" in model.history

    out = io.StringIO()
    LiveBoard(model, "demo", console=Console(file=out, width=120, force_terminal=False)).close()
    shown = out.getvalue()
    assert "proposals for the lead" in shown and "proposed by ann from t" in shown and "proposed 1" in shown

    model.apply(corral.ProposalsDecidedEvent(5, NOW, ("p",), True, ""))
    model.apply(corral.TaskChanged(seq=6, time=NOW, task=corral.Task("p", corral.TaskState.PENDING)))
    assert model.proposals() == {}
    assert model.drain_notable()[-1] == "the lead approved the proposed p"


@pytest.mark.timeout(60)
def test_a_dag_file_gives_a_task_on_the_board_new_dependencies(cli, lead, write_file, error_line):
    first = write_file("first.toml", '[[tasks]]\nid = "deploy"\ntitle = "deploy"\n[[tasks]]\nid = "build"\n')
    assert cli("tasks", "add", str(first)).exit_code == 0
    more = write_file(
        "more.toml",
        '[[tasks]]\nid = "deploy"\ntitle = "deploy"\ndepends_on = ["migrate", "build"]\n'
        '[[tasks]]\nid = "migrate"\n[[tasks]]\nid = "build"\n',
    )
    added = cli("tasks", "add", str(more))
    assert added.exit_code == 0, added.stderr
    assert added.stdout == (
        f"added 1 new task(s) from {more}; 1 already existed unchanged\n"
        "deploy (on the board already) now also depends on migrate, build\n"
    )
    assert lead.get_task("deploy").depends_on == ("migrate", "build")
    again = cli("tasks", "add", str(more))
    assert again.exit_code == 0, again.stderr
    assert again.stdout == f"added 0 new task(s) from {more}; 3 already existed unchanged\n", "a re-run changes nothing"

    changed = write_file("changed.toml", '[[tasks]]\nid = "deploy"\ntitle = "ship"\ndepends_on = ["migrate"]\n')
    refused = cli("tasks", "add", str(changed))
    assert refused.exit_code == 1 and error_line(refused).startswith(f"corral: {changed}: task 'deploy' (tasks[0])")

    cycle = write_file(
        "cycle.toml",
        '[[tasks]]\nid = "build"\ndepends_on = ["lint"]\n[[tasks]]\nid = "lint"\ndepends_on = ["deploy"]\n',
    )
    looped = cli("tasks", "add", str(cycle))
    assert looped.exit_code == 1 and "dependency cycle: build → lint → deploy → build" in error_line(looped)
    assert lead.get_task("lint").state is corral.TaskState.PENDING, "the file's new task was added first"
    assert lead.get_task("build").depends_on == ()
