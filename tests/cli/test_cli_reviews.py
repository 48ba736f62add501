"""Reviews on the command line: `tasks list --state in_review` finds the results waiting
for a review, `tasks review ID --approve|--reject --feedback TEXT` decides one (text and
--json), and the board, `watch` and `graph` show the new state and events."""

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


def _submit(lead: corral.Lead, task_id: str, result: str, *, name: str = "") -> None:
    """Claims `task_id` as a teammate and completes it with `result`: it waits IN_REVIEW."""
    new = lead.add_teammate(name or f"author-{task_id}")
    with corral.Teammate.connect(lead.address, new.token) as mate:
        events = mate.idle()
        claim = next(events)
        assert isinstance(claim, corral.Claim) and claim.task.id == task_id
        assert claim.complete(result).state is corral.TaskState.IN_REVIEW
        events.close()


@pytest.mark.timeout(60)
def test_list_in_review_then_reject_and_approve_with_json(cli, lead, error_line):
    lead.create_tasks([corral.TaskSpec("docs", lease_duration=LONG_LEASE, review=corral.ReviewPolicy(max_rounds=2))])
    _submit(lead, "docs", "draft one", name="ann")
    lead.create_tasks([corral.TaskSpec("other")])

    (waiting,) = cli.json("tasks", "list", "--state", "in_review")
    assert (waiting["id"], waiting["state"], waiting["result"]) == ("docs", "in_review", "draft one")
    assert waiting["review"] == {"reviewer_role": "", "max_rounds": 2} and waiting["review_rounds"] == 0
    table = cli("tasks", "list", "--state", "IN_REVIEW")
    assert table.exit_code == 0 and "docs" in table.stdout and "in_review" in table.stdout
    assert "other" not in table.stdout
    shown = cli("tasks", "show", "docs")
    assert shown.exit_code == 0 and "by the lead; 0 of 2 rounds rejected" in shown.stdout

    usage = cli("tasks", "review", "docs")
    assert usage.exit_code == 2 and "--approve or --reject" in usage.stderr
    no_why = cli("tasks", "review", "docs", "--reject")
    assert no_why.exit_code == 2 and "--feedback" in no_why.stderr

    rejected = cli.json("tasks", "review", "docs", "--reject", "--feedback", "add the changelog")
    assert (rejected["state"], rejected["review_rounds"]) == ("pending", 1)
    assert cli.json("tasks", "list", "--state", "in_review") == []
    refused = cli("tasks", "review", "docs", "--approve")
    assert refused.exit_code == 1 and error_line(refused).startswith("corral: FAILED_PRECONDITION: cannot review: ")
    assert error_line(cli("tasks", "review", "nope", "--approve")) == "corral: TASK_NOT_FOUND: no task 'nope'"

    new = lead.add_teammate("bob")
    with corral.Teammate.connect(lead.address, new.token) as bob:
        events = bob.idle()
        claim = next(events)
        assert isinstance(claim, corral.Claim) and claim.task.id == "docs"
        assert claim.rejected_result == b"draft one"
        assert claim.previous_attempt is not None and claim.previous_attempt.feedback == "add the changelog"
        claim.complete("draft two")
        events.close()
    approved = cli.json("tasks", "review", "docs", "--approve", "--feedback", "good")
    assert (approved["state"], approved["result"]) == ("completed", "draft two")
    attempts = cli.json("tasks", "show", "docs")["attempts"]
    assert [(a["owner"], a["outcome"]) for a in attempts] == [
        ("ann", "completed"),
        ("lead", "rejected"),
        ("bob", "completed"),
        ("lead", "completed"),
    ]
    assert attempts[1]["verdict"] == {"approve": False, "feedback": "add the changelog"}
    assert attempts[1]["feedback"] == "add the changelog"
    assert attempts[3]["verdict"] == {"approve": True, "feedback": "good"} and attempts[0]["verdict"] is None
    shown = cli("tasks", "show", "docs").stdout
    assert "rejected: add the" in shown and "changelog" in shown and "approved: good" in shown


@pytest.mark.timeout(60)
def test_review_in_text_says_what_became_of_the_task(cli, lead):
    for task_id, rounds in (("a", 0), ("b", 1), ("c", 0)):
        lead.create_tasks(
            [corral.TaskSpec(task_id, lease_duration=LONG_LEASE, review=corral.ReviewPolicy(max_rounds=rounds))]
        )
        _submit(lead, task_id, f"result of {task_id}")
    approved = cli("tasks", "review", "a", "--approve")
    assert approved.exit_code == 0, approved.stderr
    assert approved.stdout == "approved a; it is completed\n"
    failed = cli("tasks", "review", "b", "--reject", "--feedback", "no")
    assert failed.stdout.startswith("rejected b for the last time; it failed: review rejected 1 times")
    again = cli("tasks", "review", "c", "--reject", "--feedback", "shorter")
    assert again.stdout == "rejected c (round 1); it is pending again for rework\n"
    assert "review" in cli("tasks", "--help", connect=False).stdout


@pytest.mark.timeout(60)
def test_the_board_counts_in_review_and_lists_the_leads_reviews(cli, lead):
    lead.create_tasks([corral.TaskSpec("ship")])
    lead.cancel_tasks(["ship"])
    lead.create_tasks([corral.TaskSpec("docs", lease_duration=LONG_LEASE, review=corral.ReviewPolicy())])
    _submit(lead, "docs", "the docs")
    lead.create_tasks([corral.TaskSpec("code", lease_duration=LONG_LEASE, review=corral.ReviewPolicy("qa"))])
    _submit(lead, "code", "the code")
    board = cli("board", "--until-done", "--timeout", "1")
    assert board.exit_code == 1, "results in review: the board is not done"
    assert "docs waits for the lead's review: the docs" in board.stdout
    assert "code waits for the lead" not in board.stdout, "a teammate with the role reviews that one"
    assert "0/3 completed | canceled 1, in_review 2" in board.stdout

    stats = cli.json("stats")
    assert stats["tasks_by_state"]["in_review"] == 2 and stats["active_tasks"] == 2
    mermaid = cli("graph").stdout
    assert '"]:::in_review' in mermaid and "classDef in_review" in mermaid
    assert 'label="docs\\nin_review"' in cli("graph", "--format", "dot").stdout

    cli("tasks", "review", "docs", "--reject", "--feedback", "too short")
    lines = [json.loads(line) for line in cli("watch", "--no-follow", "--json").stdout.splitlines()]
    (decided,) = [line for line in lines if line["type"] == "review_decided"]
    assert decided == {
        **decided,
        "task_id": "docs",
        "approve": False,
        "feedback": "too short",
        "reviewer": "lead",
        "round": 1,
    }
    text = cli("watch", "--no-follow").stdout
    assert "review round 1 of task docs rejected by lead: too short" in text
    assert "task docs pending" in text and "review_rounds=1" in text


@pytest.mark.timeout(10)
def test_the_live_board_shows_the_leads_reviews_and_notes_the_verdict() -> None:
    model = BoardModel()
    policy = corral.ReviewPolicy(max_rounds=3)
    working = corral.Task("docs", corral.TaskState.IN_PROGRESS, owner="ann", attempt=1, review=policy)
    model.apply(corral.TaskChanged(seq=1, time=NOW, task=working))
    in_review = corral.Task("docs", corral.TaskState.IN_REVIEW, attempt=1, result=b"the docs\nmore", review=policy)
    model.apply(corral.TaskChanged(seq=2, time=NOW, task=in_review))
    held = corral.Task("code", corral.TaskState.IN_REVIEW, owner="rev", review=corral.ReviewPolicy("qa", 3))
    model.apply(corral.TaskChanged(seq=3, time=NOW, task=held))
    assert model.lead_reviews() == {"docs": b"the docs\nmore"}
    assert model.counts()[corral.TaskState.IN_REVIEW] == 2 and not model.all_final()
    assert model.mates["rev"].current == "code" and model.mates["ann"].current == ""

    out = io.StringIO()
    LiveBoard(model, "demo", console=Console(file=out, width=120, force_terminal=False)).close()
    shown = out.getvalue()
    assert "reviews for the lead" in shown and "the docs" in shown and "in_review 2" in shown

    back = corral.Task("docs", corral.TaskState.PENDING, attempt=1, review=policy, review_rounds=1)
    model.apply(corral.TaskChanged(seq=4, time=NOW, task=back))
    model.apply(
        corral.ReviewDecided(seq=5, time=NOW, task_id="docs", approve=False, feedback="why", reviewer="lead", round=1)
    )
    model.apply(corral.TaskChanged(seq=6, time=NOW, task=corral.Task("code", corral.TaskState.COMPLETED)))
    assert model.lead_reviews() == {} and model.mates["rev"].current == ""
    assert model.drain_notable() == ["lead rejected docs (review round 1): why"]
