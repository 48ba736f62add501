"""Questions to the Lead on the command line: `tasks list --state needs_input` finds the
tasks waiting for an answer, `tasks answer ID TEXT` gives it (text and --json), and the
board, `watch` and `graph` show the new state and events."""

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


def _ask(lead: corral.Lead, task_id: str, question: str) -> corral.Claim:
    """Claims `task_id` as a fresh teammate and asks `question` with it; returns the ended claim."""
    new = lead.add_teammate(f"asker-{task_id}")
    with corral.Teammate.connect(lead.address, new.token) as mate:
        events = mate.idle()
        claim = next(events)
        assert isinstance(claim, corral.Claim) and claim.task.id == task_id
        claim.ask(question)
        events.close()
    return claim


@pytest.mark.timeout(60)
def test_list_needs_input_then_answer_with_json(cli, lead, error_line):
    lead.create_tasks([corral.TaskSpec("build", lease_duration=LONG_LEASE)])
    _ask(lead, "build", "which branch?")
    lead.create_tasks([corral.TaskSpec("other")])

    (waiting,) = cli.json("tasks", "list", "--state", "needs_input")
    assert (waiting["id"], waiting["state"], waiting["question"]) == ("build", "needs_input", "which branch?")
    assert waiting["owner"] == "" and waiting["attempts_used"] == 0
    table = cli("tasks", "list", "--state", "NEEDS_INPUT")
    assert table.exit_code == 0 and "build" in table.stdout and "needs_input" in table.stdout
    assert "other" not in table.stdout
    shown = cli("tasks", "show", "build")
    assert shown.exit_code == 0 and "which branch?" in shown.stdout and "asked" in shown.stdout
    assert cli.json("tasks", "show", "build")["attempts"][0]["outcome"] == "asked"

    answered = cli.json("tasks", "answer", "build", "main, please")
    assert (answered["id"], answered["state"], answered["question"]) == ("build", "pending", "")
    assert cli.json("tasks", "list", "--state", "needs_input") == []

    refused = cli("tasks", "answer", "build", "again")
    assert error_line(refused).startswith("corral: FAILED_PRECONDITION: cannot answer: ")
    assert "PENDING" in error_line(refused) and refused.exit_code == 1
    assert error_line(cli("tasks", "answer", "nope", "x")) == "corral: TASK_NOT_FOUND: no task 'nope'"

    new = lead.add_teammate("ann")
    with corral.Teammate.connect(lead.address, new.token) as ann:
        events = ann.idle()
        claim = next(events)
        assert isinstance(claim, corral.Claim) and claim.task.id == "build"
        assert [(qa.question, qa.answer) for qa in claim.answers] == [("which branch?", "main, please")]
        claim.release()
        events.close()


@pytest.mark.timeout(60)
def test_answer_in_text_says_the_task_is_pending_again(cli, lead):
    lead.create_tasks([corral.TaskSpec("build", lease_duration=LONG_LEASE)])
    _ask(lead, "build", "which branch?")
    result = cli("tasks", "answer", "build", "main")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "answered the question on build; it is pending again\n"
    assert lead.get_task("build").state is corral.TaskState.PENDING
    assert "answer" in cli("tasks", "--help", connect=False).stdout


@pytest.mark.timeout(60)
def test_the_board_counts_and_lists_the_questions_waiting(cli, lead):
    lead.create_tasks([corral.TaskSpec("build", lease_duration=LONG_LEASE), corral.TaskSpec("ship")])
    lead.cancel_tasks(["ship"])
    _ask(lead, "build", "which branch?")
    board = cli("board", "--until-done", "--timeout", "1")
    assert board.exit_code == 1, "a question waiting: the board is not done"
    assert "build waits for an answer: which branch?" in board.stdout
    assert "0/2 completed | canceled 1, needs_input 1" in board.stdout

    stats = cli.json("stats")
    assert stats["tasks_by_state"]["needs_input"] == 1 and stats["active_tasks"] == 1

    lines = [json.loads(line) for line in cli("watch", "--no-follow", "--json").stdout.splitlines()]
    (asked,) = [line for line in lines if line["type"] == "question_asked"]
    assert (asked["task_id"], asked["question"], asked["asked_by"]) == ("build", "which branch?", "asker-build")
    mermaid = cli("graph").stdout
    assert '"]:::needs_input' in mermaid and "classDef needs_input" in mermaid
    assert 'label="build\\nneeds_input"' in cli("graph", "--format", "dot").stdout

    cli("tasks", "answer", "build", "main")
    text = cli("watch", "--no-follow").stdout
    assert "asker-build asked about task build: which branch?" in text
    assert "question on task build answered: main" in text
    assert "task build needs_input" in text and "question='which branch?'" in text


@pytest.mark.timeout(10)
def test_the_live_board_shows_a_waiting_question_and_notes_the_answer() -> None:
    model = BoardModel()
    asking = corral.Task("build", corral.TaskState.IN_PROGRESS, owner="ann", attempt=1)
    model.apply(corral.TaskChanged(seq=1, time=NOW, task=asking))
    waiting = corral.Task("build", corral.TaskState.NEEDS_INPUT, attempt=1, question="which branch?")
    model.apply(corral.TaskChanged(seq=2, time=NOW, task=waiting))
    model.apply(corral.QuestionAsked(seq=3, time=NOW, task_id="build", question="which branch?", asked_by="ann"))
    assert model.questions() == {"build": "which branch?"}
    assert model.counts()[corral.TaskState.NEEDS_INPUT] == 1 and not model.all_final()
    assert "ann asked about build: which branch?" in model.drain_notable()

    out = io.StringIO()
    LiveBoard(model, "demo", console=Console(file=out, width=120, force_terminal=False)).close()
    shown = out.getvalue()
    assert "questions for the lead" in shown and "which branch?" in shown and "needs_input 1" in shown

    model.apply(corral.TaskChanged(seq=4, time=NOW, task=corral.Task("build", corral.TaskState.PENDING, attempt=1)))
    model.apply(corral.QuestionAnswered(seq=5, time=NOW, task_id="build", question="which branch?", answer="main"))
    assert model.questions() == {}
    assert model.drain_notable() == ["the lead answered build: main"]
