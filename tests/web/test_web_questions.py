"""Questions to the Lead on the web board, with --web-actions: a NEEDS_INPUT task is
coloured and counted like every state, its drawer shows the question, a lead
session answers it there, and bad answers get the actions' HTTP statuses and write
nothing. One daemon; the teammate side is the SDK (`Claim.ask`, `Claim.answers`).
"""

from __future__ import annotations

import pytest

import corral
from tests.support.waiting import wait_until
from tests.web.board_support import (
    ActionSession,
    Mate,
    assert_state_shown,
    open_board,
    run,
    screenshot,
    start_web_daemon,
    stop_web_daemon,
    task_state,
)

pytestmark = pytest.mark.timeout(90)

QUESTION = "Should the report cover <b>March</b> too, or only February?"
TEAL = "#14b8a6"  # needs input, on the graph and the timeline alike


@pytest.fixture(scope="module")
def acting(tmp_path_factory):
    daemon = start_web_daemon(tmp_path_factory.mktemp("questions") / "state", ["--web-actions"])
    try:
        yield daemon
    finally:
        stop_web_daemon(daemon)


def test_a_question_is_coloured_counted_shown_in_the_drawer_and_answered_from_it(acting, browser):
    lead = acting.lead
    lead.create_tasks([corral.TaskSpec(id="report", title="monthly report", required_role="writer")])
    mate = Mate(acting, "writer-1", ["writer"])
    try:
        page = open_board(browser, acting)
        claim = mate.claim()
        asked = mate.ask(claim, QUESTION)
        assert asked.state is corral.TaskState.NEEDS_INPUT and asked.question == QUESTION

        row = assert_state_shown(page, "report", "NEEDS_INPUT", TEAL)

        # The claim that asked ends as "asked" on the timeline.
        page.click("button[data-tab='timeline']")
        page.check("#timeline-all")
        wait_until(
            lambda: (
                [(b["kind"], b["color"]) for b in page.evaluate("window.corral.timelineBars") if b["task"] == "report"]
                == [("asked", TEAL)]
            ),
            10,
            "the asked claim's bar",
        )
        assert "asked the lead" in page.locator("#timeline-legend").inner_text()

        # The question in the drawer, as text; the answer typed there.
        page.click("button[data-tab='tasks']")
        row.click()
        page.wait_for_selector("#drawer[data-task-id='report'] #d-question-box:not([hidden])")
        assert page.locator("#d-question").inner_text() == QUESTION
        assert page.locator("#d-question b").count() == 0
        page.fill("#d-answer-text", "Only February.")
        page.click("#drawer button[data-action='answer-question']")
        page.wait_for_selector("#drawer button[data-action='answer-question'][data-done='ok']")
        wait_until(lambda: row.get_attribute("data-state") == "PENDING", 10, "the answered task PENDING")
        assert page.locator("#counts .count.needs_input").inner_text() == "0 needs input"

        # The events panel shows the question and its answer.
        page.click("button[data-tab='events']")
        page.select_option("#event-kind", "question")
        wait_until(
            lambda: (
                page.eval_on_selector_all("#events li", "items => items.map((i) => i.dataset.kind)")
                == ["question_answered", "question"]
            ),
            10,
            "the question events",
        )
        events = page.locator("#events").inner_text()
        assert f"writer-1 asked about report: {QUESTION}" in events and "report answered: Only February." in events
        screenshot(page, "question-answered")

        # The task's next claim carries the answer typed on the page.
        again = mate.claim()
        assert again.task.id == "report" and again.previous_attempt is not None
        assert again.previous_attempt.outcome is corral.AttemptOutcome.ASKED
        assert [(a.question, a.answer, a.asked_by) for a in again.answers] == [(QUESTION, "Only February.", "writer-1")]
        mate.complete(again, b"the February report")
        wait_until(lambda: task_state(acting, "report") == "COMPLETED", 10, "the report done")

        # Once answered, the drawer offers no answer any more.
        page.click("button[data-tab='tasks']")
        row.click()
        page.wait_for_selector("#drawer[data-task-id='report']")
        wait_until(lambda: page.locator("#d-question-box").is_hidden(), 5, "no question box")
        assert page.locator("#d-answer-text").count() == 0
        assert page.evaluate("window.__csp") == []
        page.context.close()
    finally:
        mate.close()


def test_a_viewer_sees_the_question_and_no_answer_form(acting, browser):
    lead = acting.lead
    lead.create_tasks([corral.TaskSpec(id="watched", required_role="asker")])
    mate = Mate(acting, "asker-1", ["asker"])
    try:
        mate.ask(mate.claim(), "Which branch?")
        viewer = open_board(browser, acting, lead.add_viewer("question-watcher"))
        viewer.click("button[data-tab='tasks']")
        row = viewer.locator("#tasks tr[data-task-id='watched']")
        wait_until(lambda: row.get_attribute("data-state") == "NEEDS_INPUT", 10, "the row NEEDS_INPUT")
        row.click()
        viewer.wait_for_selector("#drawer[data-task-id='watched'] #d-question-box:not([hidden])")
        assert viewer.locator("#d-question").inner_text() == "Which branch?"
        assert viewer.locator("#d-answer-text, button[data-action]").count() == 0
        viewer.context.close()
    finally:
        mate.close()


def test_bad_answers_get_the_actions_statuses_and_write_nothing(acting):
    lead = acting.lead
    lead.create_tasks(
        [
            corral.TaskSpec(id="asked-one", required_role="http-asker"),
            corral.TaskSpec(id="never-claimed", required_role="nobody-here"),
            corral.TaskSpec(id="held-one", required_role="http-holder"),
        ]
    )
    asker, holder = Mate(acting, "http-asker", ["http-asker"]), Mate(acting, "http-holder", ["http-holder"])
    try:
        asker.ask(asker.claim(), "Tabs or spaces?")
        holder.claim()  # held: IN_PROGRESS, no question
        viewer_token = lead.add_viewer("http-viewer")

        async def body(http):
            session = ActionSession(http, acting.url, "answer-question")
            await session.log_in(acting.token)
            answer = session.post

            before = await session.seq()
            refused = []
            for sent in (
                {"task_id": "", "answer": "spaces"},
                {"answer": "spaces"},
                {"task_id": "asked-one", "answer": 7},
                {"task_id": ["asked-one"], "answer": "spaces"},
                {"task_id": "asked-one", "answer": "x" * (64 * 1024 + 1)},
                {"task_id": "no-such-task", "answer": "spaces"},
                {"task_id": "never-claimed", "answer": "spaces"},
                {"task_id": "held-one", "answer": "spaces"},
                [],
            ):
                status, answered = await answer(sent)
                refused.append((status, answered.get("error", "")))
            no_csrf, _ = await answer({"task_id": "asked-one", "answer": "spaces"}, {"Origin": acting.url})
            after = await session.seq()
            good = await answer({"task_id": "asked-one", "answer": "spaces"})
            twice, _ = await answer({"task_id": "asked-one", "answer": "tabs"})
            await session.log_in(viewer_token)  # a viewer's own session, with its own CSRF token
            as_viewer, _ = await answer({"task_id": "asked-one", "answer": "tabs"})
            return refused, before, after, good, twice, no_csrf, as_viewer

        refused, before, after, good, twice, no_csrf, as_viewer = run(body)
        statuses = [status for status, _ in refused]
        assert statuses == [400, 400, 400, 400, 413, 404, 409, 409, 400], refused
        assert refused[0][1].startswith("task_id:") and refused[2][1].startswith("answer:"), refused
        assert "PENDING" in refused[6][1] and "IN_PROGRESS" in refused[7][1], refused
        assert no_csrf == 403
        assert after == before  # nothing written by any refused answer
        assert good == (200, {"task_id": "asked-one", "state": "PENDING"})
        assert twice == 409  # answered already: PENDING, no question waits
        assert as_viewer == 403
        claim = asker.claim()
        assert [(a.question, a.answer) for a in claim.answers] == [("Tabs or spaces?", "spaces")]
        asker.complete(claim, b"spaces")
    finally:
        asker.close()
        holder.close()
