"""Reviews before done on the web board, with --web-actions: an IN_REVIEW task is
coloured and counted like every state, its drawer shows the review policy, the
rounds so far, the result under review and each review's verdict (a rejection's
feedback), a lead session approves or rejects it there (review-task), review
claims end approved or rejected on the timeline, the Events panel shows each
review_decided, and bad requests get the actions' HTTP statuses and write nothing.
One daemon; the teammate side is the SDK (`Claim.decide`, `Claim.rejected_result`).
"""

from __future__ import annotations

import pytest

import corral
from tests.support.waiting import wait_until
from tests.web.board_support import (
    ActionSession,
    Mate,
    WebDaemon,
    assert_state_shown,
    open_board,
    run,
    screenshot,
    start_web_daemon,
    stop_web_daemon,
    task_state,
)

pytestmark = pytest.mark.timeout(90)

INDIGO = "#818cf8"  # in review on the graph, and an approved review's bar on the timeline
ORANGE = "#fb923c"  # a rejected review's bar on the timeline
DRAFT = b"A draft with <i>markup</i> that stays text."


@pytest.fixture(scope="module")
def acting(tmp_path_factory):
    daemon = start_web_daemon(tmp_path_factory.mktemp("reviews") / "state", ["--web-actions"])
    try:
        yield daemon
    finally:
        stop_web_daemon(daemon)


def create_reviewed(daemon: WebDaemon, task_id: str, role: str, reviewer_role: str = "", max_rounds: int = 3) -> None:
    """A task that needs a review before it is COMPLETED."""
    policy = corral.ReviewPolicy(reviewer_role=reviewer_role, max_rounds=max_rounds)
    daemon.lead.create_tasks(
        [corral.TaskSpec(id=task_id, title=f"{task_id} (reviewed)", required_role=role, review=policy)]
    )


def open_drawer(page, task_id: str) -> None:
    page.click("button[data-tab='tasks']")
    page.locator(f"#tasks tr[data-task-id='{task_id}']").click()
    page.wait_for_selector(f"#drawer[data-task-id='{task_id}']")


def review_rows(page) -> list[str]:
    return page.eval_on_selector_all(
        "#d-attempts tr[data-review='yes']",
        "rows => rows.map((r) => [...r.cells].slice(4).map((c) => c.textContent).join(' | '))",
    )


def test_the_lead_rejects_and_approves_a_result_from_the_drawer(acting, browser):
    create_reviewed(acting, "essay", "essayist", max_rounds=2)
    author = Mate(acting, "essayist-1", ["essayist"])
    try:
        page = open_board(browser, acting)
        author.complete(author.claim(), DRAFT)

        row = assert_state_shown(page, "essay", "IN_REVIEW", INDIGO)
        # The header keeps its one line at 1280 px with every state's count and the writer's health.
        page.wait_for_selector("#health div")
        tops = page.eval_on_selector_all(
            "header.top > *", "items => items.map((i) => Math.round(i.getBoundingClientRect().top))"
        )
        assert max(tops) < 30, tops  # a second line would start below 40 px
        assert page.eval_on_selector("header.top", "h => h.getBoundingClientRect().height") < 48

        # The drawer: the policy, the rounds, the result under review (as text), the verdict form.
        open_drawer(page, "essay")
        page.wait_for_selector("#d-review-box:not([hidden])")
        assert page.locator("#d-review").inner_text().split("\n") == [
            "reviewer",
            "the lead",
            "rounds",
            "0 rejected of 2",
            "author",
            "essayist-1",
        ]
        assert page.locator("#d-result-title").text_content() == "Result under review"
        assert page.locator("#d-result").inner_text() == DRAFT.decode()
        assert page.locator("#d-result i").count() == 0
        screenshot(page, "review-drawer")

        # A rejection needs feedback: refused without, and the task still waits.
        reject = page.locator("#d-verdict button[data-verdict='reject']")
        reject.click()
        page.wait_for_selector("#d-verdict button[data-verdict='reject'][data-done='refused']")
        assert "feedback" in reject.inner_text()
        assert task_state(acting, "essay") == "IN_REVIEW"

        # Typed feedback rejects it: PENDING for rework, round 1 in the drawer's claims.
        open_drawer(page, "essay")
        page.wait_for_selector("#d-feedback-text")
        page.fill("#d-feedback-text", "Cite your sources.")
        page.click("#d-verdict button[data-verdict='reject']")
        page.wait_for_selector("#d-verdict button[data-verdict='reject'][data-done='ok']")
        wait_until(lambda: row.get_attribute("data-state") == "PENDING", 10, "the rejected task PENDING")
        assert page.locator("#counts .count.in_review").inner_text() == "0 in review"

        # The rework carries the rejected result and the feedback typed on the page.
        rework = author.claim()
        assert rework.task.id == "essay" and rework.rejected_result == DRAFT
        assert rework.previous_attempt is not None
        assert rework.previous_attempt.outcome is corral.AttemptOutcome.REJECTED
        assert rework.previous_attempt.feedback == "Cite your sources."
        author.complete(rework, b"A draft with sources.")
        wait_until(lambda: row.get_attribute("data-state") == "IN_REVIEW", 10, "the rework IN_REVIEW")

        open_drawer(page, "essay")
        page.wait_for_selector("#d-verdict button[data-verdict='approve']")
        assert page.locator("#d-review").inner_text().split("\n")[3] == "1 rejected of 2"
        assert review_rows(page) == ["review 1: rejected | Cite your sources."]
        page.click("#d-verdict button[data-verdict='approve']")
        page.wait_for_selector("#d-verdict button[data-verdict='approve'][data-done='ok']")
        wait_until(lambda: row.get_attribute("data-state") == "COMPLETED", 10, "the approved task COMPLETED")

        # Approved: the drawer shows both verdicts and offers no verdict any more.
        open_drawer(page, "essay")
        wait_until(lambda: len(review_rows(page)) == 2, 5, "both reviews in the drawer")
        assert review_rows(page) == ["review 1: rejected | Cite your sources.", "review 2: approved | "]
        assert page.locator("#d-result-title").text_content() == "Result"
        assert page.locator("#d-result").inner_text() == "A draft with sources."
        assert page.locator("#d-feedback-text, #d-verdict button").count() == 0

        # The Events panel shows both decisions.
        page.click("button[data-tab='events']")
        page.select_option("#event-kind", "review")
        wait_until(
            lambda: (
                page.eval_on_selector_all("#events li", "items => items.map((i) => i.dataset.kind)")
                == ["review_decided", "review_decided"]
            ),
            10,
            "the review events",
        )
        events = page.locator("#events").inner_text()
        assert "essay rejected by lead (round 1): Cite your sources." in events
        assert "essay approved by lead (round 2)" in events
        screenshot(page, "review-approved")
        assert page.evaluate("window.__csp") == []
        page.context.close()
    finally:
        author.close()


def test_a_teammates_review_claims_end_approved_and_rejected_on_the_timeline(acting, browser):
    create_reviewed(acting, "patch", "coder", reviewer_role="critic")
    author, critic = Mate(acting, "coder-1", ["coder"]), Mate(acting, "critic-1", ["critic"])
    try:
        page = open_board(browser, acting)
        author.complete(author.claim(), b"patch v1")
        review = critic.claim()
        assert review.task.id == "patch" and review.review is not None
        assert (review.review.author, review.review.round) == ("coder-1", 1)

        # Held by the reviewer: IN_REVIEW with an owner, a running bar in the critic's lane.
        page.click("button[data-tab='tasks']")
        row = page.locator("#tasks tr[data-task-id='patch']")
        wait_until(lambda: row.locator("td").nth(3).inner_text() == "critic-1", 10, "the review held")
        assert row.get_attribute("data-state") == "IN_REVIEW"
        page.click("button[data-tab='timeline']")
        page.check("#timeline-all")

        def bars() -> list[tuple[str, str, str]]:
            return [
                (b["teammate"], b["kind"], b["color"])
                for b in page.evaluate("window.corral.timelineBars")
                if b["task"] == "patch"
            ]

        wait_until(lambda: ("critic-1", "running", "#f59e0b") in bars(), 10, "the review's running bar")
        critic.review(review, approve=False, feedback="Add a test.")
        rework = author.claim()
        assert rework.rejected_result == b"patch v1"
        assert rework.previous_attempt is not None and rework.previous_attempt.feedback == "Add a test."
        author.complete(rework, b"patch v2")
        critic.review(critic.claim(), approve=True)
        wait_until(lambda: task_state(acting, "patch") == "COMPLETED", 10, "the patch approved")
        expected = [  # lane by lane
            ("coder-1", "completed", "#22c55e"),
            ("coder-1", "completed", "#22c55e"),
            ("critic-1", "rejected", ORANGE),
            ("critic-1", "approved", INDIGO),
        ]
        try:
            wait_until(lambda: bars() == expected, 10, "the claims' bars")
        except AssertionError:
            raise AssertionError(f"the bars: {bars()}") from None
        legend = page.locator("#timeline-legend").inner_text()
        assert "review approved" in legend and "review rejected" in legend

        # The drawer names the reviewer role and each review's verdict, with the feedback.
        open_drawer(page, "patch")
        page.wait_for_selector("#d-review-box:not([hidden])")
        assert page.locator("#d-review dd").first.inner_text() == "a teammate holding critic"
        wait_until(lambda: len(review_rows(page)) == 2, 5, "both reviews in the drawer")
        assert review_rows(page) == ["review 1: rejected | Add a test.", "review 2: approved | "]
        owners = page.eval_on_selector_all(
            "#d-attempts tr[data-review='yes']", "rows => rows.map((r) => r.cells[1].textContent)"
        )
        assert owners == ["critic-1", "critic-1"]

        # A reload reads the same bars from the board's claim history.
        page.reload()
        page.wait_for_selector("#conn[data-conn='live']")
        page.click("button[data-tab='timeline']")
        page.check("#timeline-all")
        wait_until(lambda: bars() == expected, 10, "bars")
        page.context.close()
    finally:
        author.close()
        critic.close()


def test_the_lead_approving_a_review_a_teammate_holds_takes_it_from_the_reviewer(acting, browser):
    create_reviewed(acting, "taken", "taken-author", reviewer_role="slow-critic")
    author, critic = Mate(acting, "taken-author-1", ["taken-author"]), Mate(acting, "slow-critic-1", ["slow-critic"])
    try:
        page = open_board(browser, acting)
        author.complete(author.claim(), b"waiting on a slow critic")
        held = critic.claim()
        assert held.review is not None and held.task.id == "taken"
        page.click("button[data-tab='tasks']")
        row = page.locator("#tasks tr[data-task-id='taken']")
        wait_until(lambda: row.locator("td").nth(3).inner_text() == "slow-critic-1", 10, "the review held")

        # Held by the critic, the review is still the lead's to decide from the drawer.
        open_drawer(page, "taken")
        assert page.locator("#d-review dd").first.inner_text() == "a teammate holding slow-critic"
        page.click("#d-verdict button[data-verdict='approve']")
        page.wait_for_selector("#d-verdict button[data-verdict='approve'][data-done='ok']")
        wait_until(lambda: row.get_attribute("data-state") == "COMPLETED", 10, "the task approved")

        # The critic's claim ended under it (revoked): its bar says so, not "approved".
        page.click("button[data-tab='timeline']")
        page.check("#timeline-all")
        wait_until(
            lambda: (
                [
                    (b["teammate"], b["kind"])
                    for b in page.evaluate("window.corral.timelineBars")
                    if b["task"] == "taken"
                ]
                == [("taken-author-1", "completed"), ("slow-critic-1", "released")]
            ),
            10,
            "the bars",
        )
        open_drawer(page, "taken")
        wait_until(lambda: len(review_rows(page)) == 2, 5, "both review rows")
        assert review_rows(page) == ["review 1: revoked | the lead decided the review", "review 1: approved | "]
        page.context.close()
    finally:
        author.close()
        critic.close()


def test_a_viewer_sees_the_review_and_no_verdict_form(acting, browser):
    create_reviewed(acting, "watched-review", "viewed-author")
    author = Mate(acting, "viewed-author-1", ["viewed-author"])
    try:
        author.complete(author.claim(), b"for the lead")
        viewer = open_board(browser, acting, acting.lead.add_viewer("review-watcher"))
        open_drawer(viewer, "watched-review")
        viewer.wait_for_selector("#d-review-box:not([hidden])")
        assert viewer.locator("#d-result").inner_text() == "for the lead"
        assert viewer.locator("#d-feedback-text, button[data-action]").count() == 0
        viewer.context.close()
    finally:
        author.close()


def test_bad_reviews_get_the_actions_statuses_and_write_nothing(acting):
    create_reviewed(acting, "http-review", "http-author")
    create_reviewed(acting, "http-held", "http-holder")
    acting.lead.create_tasks([corral.TaskSpec(id="http-unreviewed", required_role="nobody-here")])
    author, holder = Mate(acting, "http-author", ["http-author"]), Mate(acting, "http-holder", ["http-holder"])
    try:
        author.complete(author.claim(), b"to review")
        holder.claim()  # held: IN_PROGRESS, not yet in review
        viewer_token = acting.lead.add_viewer("http-review-viewer")

        async def body(http):
            session = ActionSession(http, acting.url, "review-task")
            await session.log_in(acting.token)
            review = session.post

            before = await session.seq()
            refused = []
            for sent in (
                {"task_id": "http-review"},
                {"task_id": "http-review", "approve": "yes"},
                {"task_id": "", "approve": True},
                {"approve": True},
                {"task_id": ["http-review"], "approve": True},
                {"task_id": "http-review", "approve": False, "feedback": 7},
                {"task_id": "http-review", "approve": False, "feedback": ""},
                {"task_id": "http-review", "approve": False, "feedback": "x" * (64 * 1024 + 1)},
                {"task_id": "no-such-task", "approve": True},
                {"task_id": "http-unreviewed", "approve": True},
                {"task_id": "http-held", "approve": False, "feedback": "not yet"},
                [],
            ):
                status, answered = await review(sent)
                refused.append((status, answered.get("error", "")))
            no_csrf, _ = await review({"task_id": "http-review", "approve": True}, {"Origin": acting.url})
            other_origin, _ = await review(
                {"task_id": "http-review", "approve": True},
                {"Origin": "http://evil.example", "X-Corral-CSRF": session.csrf},
            )
            after = await session.seq()
            good = await review({"task_id": "http-review", "approve": True})
            twice, _ = await review({"task_id": "http-review", "approve": False, "feedback": "too late"})
            await session.log_in(viewer_token)  # a viewer's own session, with its own CSRF token
            as_viewer, _ = await review({"task_id": "http-review", "approve": True})
            return refused, before, after, good, twice, no_csrf, other_origin, as_viewer

        refused, before, after, good, twice, no_csrf, other_origin, as_viewer = run(body)
        statuses = [status for status, _ in refused]
        assert statuses == [400, 400, 400, 400, 400, 400, 400, 413, 404, 409, 409, 400], refused
        assert refused[0][1].startswith("approve:") and refused[2][1].startswith("task_id:"), refused
        assert refused[5][1].startswith("feedback:") and refused[6][1].startswith("feedback:"), refused
        assert "PENDING" in refused[9][1] and "IN_PROGRESS" in refused[10][1], refused
        assert (no_csrf, other_origin, as_viewer) == (403, 403, 403)
        assert after == before  # nothing written by any refused review
        assert good == (200, {"task_id": "http-review", "state": "COMPLETED"})
        assert twice == 409  # decided already: COMPLETED
        assert task_state(acting, "http-review") == "COMPLETED"
    finally:
        author.close()
        holder.close()
