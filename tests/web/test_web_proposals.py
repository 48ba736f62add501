"""Discovered work on the web board, with --web-actions: a PROPOSED task is coloured
and counted like every state and drawn dashed in the graph, its drawer (and its
node's tip) names who proposed it and from which task, a lead session approves or
rejects it there (decide-proposals), a split claim ends split on the timeline, the
Events panel shows tasks_proposed and proposals_decided, and bad requests get the
actions' HTTP statuses and write nothing. One daemon; the teammates propose on the
wire (TeammateService.ProposeTasks with their own credential).
"""

from __future__ import annotations

import pytest

import corral
from corral.v1 import corral_pb2 as pb
from tests.support.waiting import wait_until
from tests.web.board_support import (
    ActionSession,
    Mate,
    WebDaemon,
    assert_state_shown,
    board_get,
    open_board,
    run,
    screenshot,
    start_web_daemon,
    stop_web_daemon,
    task_state,
)

pytestmark = pytest.mark.timeout(90)

PINK = "#f472b6"  # proposed on the graph
LIME = "#a3e635"  # a split claim's bar on the timeline


@pytest.fixture(scope="module")
def acting(tmp_path_factory):
    daemon = start_web_daemon(tmp_path_factory.mktemp("proposals") / "state", ["--web-actions"])
    try:
        yield daemon
    finally:
        stop_web_daemon(daemon)


def create(daemon: WebDaemon, task_id: str, role: str) -> None:
    daemon.lead.create_tasks([corral.TaskSpec(id=task_id, title=f"{task_id} (the lead's)", required_role=role)])


def spec(task_id: str, title: str = "") -> pb.TaskSpec:
    return pb.TaskSpec(id=task_id, title=title or f"{task_id} (proposed)", required_role="nobody-takes-these")


def open_drawer(page, task_id: str) -> None:
    page.click("button[data-tab='tasks']")
    page.locator(f"#tasks tr[data-task-id='{task_id}']").click()
    page.wait_for_selector(f"#drawer[data-task-id='{task_id}']")


def proposed_count(page) -> int:
    count, words = page.locator("#counts .count.proposed").inner_text().split(" ", 1)
    assert words == "proposed"
    return int(count)


def proposal_fields(page) -> list[str]:
    return page.locator("#d-proposal").inner_text().split("\n")


def event_lines(page, kind: str, *about: str) -> list[str]:
    """The Events panel's lines of `kind` (a filter) that name one of `about`, newest first."""
    page.click("button[data-tab='events']")
    page.select_option("#event-kind", kind)
    lines = page.eval_on_selector_all("#events li .text", "items => items.map((i) => i.textContent)")
    return [line for line in lines if any(word in line for word in about)]


def test_a_proposal_is_counted_dashed_and_names_its_proposer_and_source(acting, browser):
    create(acting, "survey", "surveyor")
    mate = Mate(acting, "surveyor-1", ["surveyor"])
    try:
        page = open_board(browser, acting)
        claim = mate.claim()
        answer = mate.propose(spec("fix-flaky", "Fix the flaky test first"), claim=claim)
        assert [t.state for t in answer.tasks] == [pb.TASK_STATE_PROPOSED]

        assert_state_shown(page, "fix-flaky", "PROPOSED", PINK)
        assert page.locator("#page-text").inner_text() == "2 tasks"
        assert page.evaluate("window.corral.graphBorder('fix-flaky')") == "dashed"
        assert page.evaluate("window.corral.graphBorder('survey')") == "solid"
        # The header keeps its one line at 1280 px with every state's count and the writer's health.
        page.wait_for_selector("#health div")
        tops = page.eval_on_selector_all(
            "header.top > *", "items => items.map((i) => Math.round(i.getBoundingClientRect().top))"
        )
        assert max(tops) < 30, tops
        assert page.eval_on_selector("header.top", "h => h.getBoundingClientRect().height") < 48

        # The node's tip names who proposed it and from which task.
        box = next(b for b in page.evaluate("window.corral.labelBoxes()") if b["id"] == "fix-flaky")
        graph = page.locator("#graph").bounding_box()
        assert graph is not None
        page.mouse.move(graph["x"] + box["x"], graph["y"] + box["y"])
        tip = page.locator("#graph-tip")
        wait_until(
            lambda: tip.inner_text() == "Fix the flaky test first (fix-flaky) · proposed by surveyor-1 from survey",
            10,
            "the proposal's tip",
        )
        screenshot(page, "proposal-graph")
        page.mouse.move(1, 1)
        tip.wait_for(state="hidden")

        # The drawer: the proposer, the source (a link to its drawer), the decision form.
        open_drawer(page, "fix-flaky")
        page.wait_for_selector("#d-proposal-box:not([hidden])")
        assert proposal_fields(page) == [
            "proposed by",
            "surveyor-1",
            "discovered from",
            "survey",
            "decision",
            "waiting for the lead",
        ]
        assert page.locator("#d-state").inner_text() == "proposed"
        assert page.locator("#d-decision button[data-decision]").count() == 2
        screenshot(page, "proposal-drawer")
        page.click("#d-proposal button[data-open-task='survey']")
        page.wait_for_selector("#drawer[data-task-id='survey']")
        assert page.locator("#d-proposal-box").is_hidden()  # the lead's own task

        wait_until(
            lambda: (
                event_lines(page, "proposals", "fix-flaky")
                == ["surveyor-1 proposed fix-flaky from survey: waiting for the lead"]
            ),
            10,
            "the tasks_proposed event",
        )
        assert page.evaluate("window.__csp") == []
        page.context.close()
    finally:
        mate.close()


def test_the_lead_approves_one_proposal_and_rejects_another_from_the_drawer(acting, browser):
    create(acting, "build", "builder")
    mate = Mate(acting, "builder-1", ["builder"])
    try:
        page = open_board(browser, acting)
        waiting = proposed_count(page)  # the module's other tests' proposals
        mate.propose(spec("add-lib"), spec("rewrite"), claim=mate.claim())
        page.click("button[data-tab='tasks']")
        rows = {task_id: page.locator(f"#tasks tr[data-task-id='{task_id}']") for task_id in ("add-lib", "rewrite")}
        for task_id, row in rows.items():
            wait_until(lambda row=row: row.get_attribute("data-state") == "PROPOSED", 10, f"{task_id} PROPOSED")
        assert proposed_count(page) == waiting + 2

        open_drawer(page, "add-lib")
        page.click("#d-decision button[data-decision='approve']")
        page.wait_for_selector("#d-decision button[data-decision='approve'][data-done='ok']")
        wait_until(lambda: rows["add-lib"].get_attribute("data-state") == "PENDING", 10, "add-lib approved")
        assert task_state(acting, "add-lib") == "PENDING"
        border = "window.corral.graphBorder('add-lib')"
        wait_until(lambda: page.evaluate(border) == "solid", 10, "add-lib drawn solid")

        open_drawer(page, "rewrite")
        page.wait_for_selector("#d-proposal-feedback")
        page.fill("#d-proposal-feedback", "Out of scope <b>for now</b>.")
        page.click("#d-decision button[data-decision='reject']")
        page.wait_for_selector("#d-decision button[data-decision='reject'][data-done='ok']")
        wait_until(lambda: rows["rewrite"].get_attribute("data-state") == "CANCELED", 10, "rewrite rejected")
        assert proposed_count(page) == waiting
        detail = board_get(acting, "/api/tasks/rewrite")
        assert detail["state"] == "CANCELED"
        assert detail["error"] == "proposal rejected: Out of scope <b>for now</b>."

        # Decided: the drawer still names the proposer, and offers no decision any more.
        open_drawer(page, "add-lib")
        wait_until(lambda: proposal_fields(page)[-1] == "approved", 5, "the decision shown")
        assert proposal_fields(page)[:4] == ["proposed by", "builder-1", "discovered from", "build"]
        assert page.locator("#d-proposal-feedback, #d-decision button").count() == 0
        open_drawer(page, "rewrite")
        wait_until(lambda: proposal_fields(page)[-1] == "rejected", 5, "the rejection shown")
        assert "Out of scope <b>for now</b>." in page.locator("#d-fields").inner_text()

        expected = ["rewrite rejected: Out of scope <b>for now</b>.", "add-lib approved"]
        wait_until(
            lambda: event_lines(page, "proposals", "add-lib", "rewrite")[:2] == expected,
            10,
            "the proposals_decided events",
        )
        assert page.locator("#events b").count() == 0  # text, never markup
        screenshot(page, "proposals-decided")
        page.context.close()
    finally:
        mate.close()


def test_a_split_claim_ends_split_and_a_rejected_split_frees_its_task(acting, browser):
    create(acting, "port", "porter")
    mate = Mate(acting, "porter-1", ["porter"])
    try:
        page = open_board(browser, acting)
        claim = mate.claim()
        page.click("button[data-tab='tasks']")
        port = page.locator("#tasks tr[data-task-id='port']")
        wait_until(lambda: port.get_attribute("data-state") == "IN_PROGRESS", 10, "port held")
        answer = mate.propose(spec("shim"), claim=claim, block=True)
        assert answer.claimed_task.state == pb.TASK_STATE_PENDING

        # Split: the task waits for its proposal (blocked), the claim's bar ends split.
        wait_until(lambda: port.get_attribute("data-shown") == "blocked", 10, "port blocked on shim")
        assert page.evaluate("window.corral.tasks.get('port').depends_on") == ["shim"]
        edge = "window.corral.graphEdges().includes('shim->port')"
        wait_until(lambda: page.evaluate(edge), 10, "the split's edge drawn")
        page.click("button[data-tab='timeline']")
        page.check("#timeline-all")

        def bars() -> list[tuple[str, str, str]]:
            return [
                (b["teammate"], b["kind"], b["color"])
                for b in page.evaluate("window.corral.timelineBars")
                if b["task"] == "port"
            ]

        wait_until(lambda: bars() == [("porter-1", "split", LIME)], 10, "the split bar")
        assert "split" in page.locator("#timeline-legend").inner_text()
        # A reload reads the same bar from the board's claim history.
        page.reload()
        page.wait_for_selector("#conn[data-conn='live']")
        page.click("button[data-tab='timeline']")
        page.check("#timeline-all")
        wait_until(lambda: bars() == [("porter-1", "split", LIME)], 10, "the split bar after a reload")
        page.click("button[data-tab='tasks']")

        # Rejected, the split's dependency goes: port is ready again, its split claim says why.
        open_drawer(page, "shim")
        page.fill("#d-proposal-feedback", "Do it inline.")
        page.click("#d-decision button[data-decision='reject']")
        page.wait_for_selector("#d-decision button[data-decision='reject'][data-done='ok']")
        wait_until(lambda: port.get_attribute("data-shown") == "ready", 10, "port ready again")
        wait_until(lambda: not page.evaluate(edge), 10, "the rejected split's edge gone")
        open_drawer(page, "port")
        claims = page.eval_on_selector_all(
            "#d-attempts tr", "rows => rows.map((r) => [...r.cells].slice(4).map((c) => c.textContent))"
        )
        assert claims == [["split", "split rejected: proposal rejected: Do it inline."]]
        assert task_state(acting, "port") == "PENDING"
        wait_until(
            lambda: (
                event_lines(page, "proposals", "shim")
                == [
                    "shim rejected: Do it inline.",
                    "porter-1 proposed shim from port, splitting it: waiting for the lead",
                ]
            ),
            10,
            "the proposal events",
        )
        page.context.close()
    finally:
        mate.close()


def test_a_viewer_sees_the_proposal_and_no_decision_form(acting, browser):
    mate = Mate(acting, "viewed-proposer", ["viewed-proposer"])
    try:
        mate.propose(spec("watched-proposal"))  # from no claim: no source task
        viewer = open_board(browser, acting, acting.lead.add_viewer("proposal-watcher"))
        open_drawer(viewer, "watched-proposal")
        viewer.wait_for_selector("#d-proposal-box:not([hidden])")
        fields = viewer.locator("#d-proposal").inner_text().split("\n")
        assert fields[:4] == ["proposed by", "viewed-proposer", "discovered from", "— (none named)"]
        assert viewer.locator("#d-proposal-feedback, button[data-action]").count() == 0
        viewer.context.close()
    finally:
        mate.close()


def test_bad_decisions_get_the_actions_statuses_and_write_nothing(acting):
    acting.lead.create_tasks([corral.TaskSpec(id="http-plain", required_role="nobody-here")])
    mate = Mate(acting, "http-proposer", ["http-proposer"])
    try:
        mate.propose(spec("http-p1"), spec("http-p2"))
        viewer_token = acting.lead.add_viewer("http-proposal-viewer")

        async def body(http):
            session = ActionSession(http, acting.url, "decide-proposals")
            await session.log_in(acting.token)
            decide = session.post

            before = await session.seq()
            refused = []
            for sent in (
                {"task_ids": ["http-p1"]},
                {"task_ids": ["http-p1"], "approve": "yes"},
                {"task_ids": "http-p1", "approve": True},
                {"task_ids": [7], "approve": True},
                {"task_ids": [], "approve": True},
                {"approve": True},
                {"task_ids": [""], "approve": True},
                {"task_ids": ["x"] * 1001, "approve": True},
                {"task_ids": ["http-p1"], "approve": False, "feedback": 7},
                {"task_ids": ["http-p1"], "approve": False, "feedback": "x" * (64 * 1024 + 1)},
                {"task_ids": ["http-p1", "no-such-task"], "approve": True},
                {"task_ids": ["http-p1", "http-plain"], "approve": False},
                [],
            ):
                status, answered = await decide(sent)
                refused.append((status, answered.get("error", "")))
            no_csrf, _ = await decide({"task_ids": ["http-p1"], "approve": True}, {"Origin": acting.url})
            other_origin, _ = await decide(
                {"task_ids": ["http-p1"], "approve": True},
                {"Origin": "http://evil.example", "X-Corral-CSRF": session.csrf},
            )
            after = await session.seq()
            good = await decide({"task_ids": ["http-p1", "http-p2"], "approve": True})
            twice, _ = await decide({"task_ids": ["http-p1"], "approve": False})
            await session.log_in(viewer_token)  # a viewer's own session, with its own CSRF token
            as_viewer, _ = await decide({"task_ids": ["http-p2"], "approve": False})
            return refused, before, after, good, twice, no_csrf, other_origin, as_viewer

        refused, before, after, good, twice, no_csrf, other_origin, as_viewer = run(body)
        statuses = [status for status, _ in refused]
        assert statuses == [400, 400, 400, 400, 400, 400, 400, 400, 400, 413, 404, 409, 400], refused
        assert refused[0][1].startswith("approve:") and refused[2][1].startswith("task_ids:"), refused
        assert refused[4][1].startswith("task_ids:") and refused[8][1].startswith("feedback:"), refused
        assert "no-such-task" in refused[10][1] and "PENDING" in refused[11][1], refused
        assert (no_csrf, other_origin, as_viewer) == (403, 403, 403)
        assert after == before  # nothing written by any refused decision
        decided = [{"task_id": "http-p1", "state": "PENDING"}, {"task_id": "http-p2", "state": "PENDING"}]
        assert good == (200, {"tasks": decided, "omitted": 0})
        assert twice == 409  # decided already: PENDING
        assert task_state(acting, "http-p2") == "PENDING"
    finally:
        mate.close()
