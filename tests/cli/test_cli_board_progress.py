"""How the board folds a holder's progress: one line per change, no repeated
"claimed", and the live table's current task with its progress."""

from __future__ import annotations

import dataclasses
import datetime
import io

import pytest
from rich.console import Console

import corral
from corral._terminal.boardview import BoardModel, LiveBoard
from corral._terminal.output import waiting_text

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def _changed(seq: int, **fields) -> corral.TaskChanged:
    task = corral.Task("fetch", corral.TaskState.IN_PROGRESS, owner="ann", attempt=1, **fields)
    return corral.TaskChanged(seq=seq, time=NOW, task=task)


@pytest.mark.timeout(10)
def test_progress_events_note_each_change_and_the_live_board_shows_it() -> None:
    model = BoardModel()
    model.apply(
        corral.TeammateChanged(
            seq=1,
            time=NOW,
            teammate=corral.TeammateInfo("ann"),
            status=corral.TeammateStatus.BUSY,
            reason=corral.TeammateChangeReason.BUSY,
        )
    )
    model.apply(_changed(2))
    model.apply(_changed(3, progress="running tests, 3/5", progress_fraction=0.6, progress_time=NOW))
    model.apply(_changed(4, progress="running tests, 3/5", progress_fraction=0.6, progress_time=NOW))  # no change
    model.apply(_changed(5, progress_fraction=1.0, progress_time=NOW))
    assert [line for line in model.history if "fetch" in line] == [
        "ann claimed fetch (attempt 1)",
        "ann on fetch: 60% running tests, 3/5",
        "ann on fetch: 100%",
    ]
    assert model.mates["ann"].current == "fetch"
    out = io.StringIO()
    board = LiveBoard(model, "demo", console=Console(file=out, width=120, force_terminal=False))
    board.close()
    assert "fetch: 100%" in out.getvalue()


@pytest.mark.timeout(10)
def test_the_live_board_lists_what_pending_tasks_wait_for_and_notes_each_new_reason_once() -> None:
    model = BoardModel()
    nobody = corral.WaitingFor(teammates=corral.TeammateAvailability.NONE_REGISTERED)
    review = corral.Task("review", corral.TaskState.PENDING, required_role="reviewer", waiting_for=nobody)
    ship = corral.Task("ship", corral.TaskState.PENDING, waiting_for=corral.WaitingFor(dependencies=("review",)))
    model.set_waiting([review, ship])
    model.set_waiting([review, ship])  # the same answer again: nothing new to say
    assert model.drain_notable() == ["review waits for no teammate with role 'reviewer'"]
    out = io.StringIO()
    LiveBoard(model, "demo", console=Console(file=out, width=120, force_terminal=False)).close()
    shown = out.getvalue()
    assert "no teammate with role 'reviewer'" in shown and "dependencies review" in shown
    assert shown.index("no teammate") < shown.index("dependencies review"), "the surprising reason comes first"
    model.set_waiting([])  # everything claimed: the panel goes
    assert model.waiting == {}


@pytest.mark.timeout(10)
def test_what_a_task_waits_for_reads_as_a_sentence_with_or_without_a_role() -> None:
    offline = corral.WaitingFor(teammates=corral.TeammateAvailability.NONE_ONLINE)
    nobody = corral.WaitingFor(teammates=corral.TeammateAvailability.NONE_REGISTERED)
    task = corral.Task("fetch", corral.TaskState.PENDING, waiting_for=offline)
    assert waiting_text(task) == "a teammate online"
    assert waiting_text(dataclasses.replace(task, required_role="reviewer")) == "a teammate with role 'reviewer' online"
    assert waiting_text(dataclasses.replace(task, waiting_for=nobody)) == "no teammate (none is registered)"
