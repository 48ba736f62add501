"""The page against hostile strings, the Lead's actions with --web-actions, and a
board of 10,000 tasks, in Chromium, on one daemon (the big board comes last)."""

from __future__ import annotations

import json
import threading

import aiohttp
import pytest

import corral
from tests.support.teammates import TeammateThread
from tests.support.waiting import wait_until
from tests.web.board_support import VIEWPORT, open_board, run, screenshot, start_web_daemon, stop_web_daemon

pytestmark = pytest.mark.timeout(90)

HOSTILE = [
    "<img src=x onerror=\"window.__pwned='img'\">",
    "<script>window.__pwned='script'</script>",
    "javascript:window.__pwned='href'",
    "\u202egnp.exe\u202c <svg onload=\"window.__pwned='svg'\">",
    "</td></tr><tr><td><iframe src=\"javascript:parent.__pwned='frame'\"></iframe>",
]
EVIL = " | ".join(HOSTILE)


@pytest.fixture(scope="module")
def acting(tmp_path_factory):
    daemon = start_web_daemon(tmp_path_factory.mktemp("acting") / "state", ["--web-actions"])
    try:
        yield daemon
    finally:
        stop_web_daemon(daemon)


def test_the_login_form_and_the_link_log_in_and_leave_no_token_in_the_address_bar(acting, browser):
    page = browser.new_context(viewport=VIEWPORT).new_page()
    page.goto(f"{acting.url}/")
    assert page.url == f"{acting.url}/login"
    page.wait_for_selector("#login-form")
    screenshot(page, "login")
    page.fill("#login-token", "not-a-token")
    page.click("#login-form button[type='submit']")
    page.wait_for_selector("#login-error:has-text('not a lead or viewer credential')")
    page.fill("#login-token", acting.token)
    page.click("#login-form button[type='submit']")
    page.wait_for_selector("body[data-ready='true']")
    assert page.url == f"{acting.url}/"
    page.context.close()

    linked = open_board(browser, acting)  # through /login#token=...
    assert acting.token not in linked.url and linked.url == f"{acting.url}/"
    linked.context.close()


def test_hostile_strings_run_no_script_and_break_no_policy(acting, browser):
    lead = acting.lead
    page = open_board(browser, acting)
    lead.create_tasks(
        [
            corral.TaskSpec(id="evil-done", title=HOSTILE[0], description=EVIL, payload=EVIL.encode()),
            corral.TaskSpec(id="evil-failed", title=HOSTILE[1], max_attempts=1),
            # Titles are one printable line (the daemon refuses bidi controls in them);
            # descriptions, results, errors, messages and plans carry them too.
            *[corral.TaskSpec(id=f"evil-{i}", title=text) for i, text in enumerate(HOSTILE) if "\u202e" not in text],
        ]
    )

    def handler(task: corral.Task) -> str:
        if task.id == "evil-failed":
            raise corral.PermanentFailure(EVIL)
        return EVIL

    mate = TeammateThread(lead, "evil-mate", handler, max_idle_polls=4).start()
    mate.result(timeout=30)
    with corral.Teammate.connect(acting.lead.address, lead.add_teammate("evil-writer").token) as writer:
        writer.send_message("lead", EVIL)
        writer.submit_plan(EVIL)
    wait_until(lambda: page.locator("#tasks tr[data-state='FAILED']").count() == 1, 10, "the failure shown")
    wait_until(lambda: page.locator("#plans li[data-plan-id]").count() == 1, 10, "the plan shown")
    for tab in ("failures", "events", "teammates", "tasks"):
        page.click(f"button[data-tab='{tab}']")
    page.click("#tasks tr[data-task-id='evil-done']")
    page.wait_for_selector("#drawer[data-task-id='evil-done']")
    assert page.locator("#d-title").inner_text() == HOSTILE[0]
    assert page.locator("#d-result").inner_text() == EVIL
    assert EVIL in page.locator("#events").inner_text()
    page.click("button[data-tab='events']")
    page.select_option("#event-kind", "message")  # the kept events, filtered by kind
    kinds = page.eval_on_selector_all("#events li", "items => items.map((item) => item.dataset.kind)")
    assert kinds == ["message"] and EVIL in page.locator("#events").inner_text()
    assert page.evaluate("window.__pwned") is None
    assert page.evaluate("window.__csp") == []
    assert page.locator("#board img, #board script, #board iframe, #board svg").count() == 0
    page.context.close()


def test_a_plan_decided_elsewhere_leaves_the_page(acting, browser):
    lead = acting.lead
    page = open_board(browser, acting)
    page.click("button[data-tab='failures']")
    with corral.Teammate.connect(lead.address, lead.add_teammate("outside-planner").token) as planner:
        plan_id = planner.submit_plan("a plan the Lead decides from its own client")
    shown = page.locator(f"#plans li[data-plan-id='{plan_id}']")
    wait_until(lambda: shown.count() == 1, 10, "the plan shown")
    lead.decide_plan(plan_id, approve=False, feedback="not this one")  # not through the page
    wait_until(lambda: shown.count() == 0, 10, "the decided plan gone from the page")
    page.click("button[data-tab='events']")
    page.select_option("#event-kind", "plan")  # the filter for plans shows their decisions too
    wait_until(
        lambda: "plan_decided" in page.eval_on_selector_all("#events li", "items => items.map((i) => i.dataset.kind)"),
        10,
        "the decision among the plan events",
    )
    assert f"plan {plan_id} of outside-planner rejected: not this one" in page.locator("#events").inner_text()
    page.context.close()


def test_actions_go_through_the_lead_service_with_csrf_and_origin_checked(acting, browser):
    lead = acting.lead
    page = open_board(browser, acting)
    lead.create_tasks([corral.TaskSpec(id="gated", title="waits for a plan")])

    # Approve: the teammate's gate opens and it takes the gated task.
    planner = TeammateThread(
        lead, "planner", lambda task: b"done", require_plan_approval=True, plan="do it", max_idle_polls=10
    ).start()
    page.click("button[data-tab='failures']")
    approve = page.locator("#plans li[data-author='planner'] button[data-action='decide-plan']").first
    approve.wait_for()
    assert approve.inner_text() == "approve"
    approve.click()
    # Approved: the plan leaves the list with its plan_decided event.
    wait_until(lambda: page.locator("#plans li[data-author='planner']").count() == 0, 10, "the approved plan gone")
    wait_until(lambda: lead.get_task("gated").state is corral.TaskState.COMPLETED, 20, "the gated task done")
    planner.result(timeout=30)
    lead.create_tasks([corral.TaskSpec(id="held", title="held")])

    # Revoke: the holder's stream gets its claim-ended notice.
    holder_token = lead.add_teammate("holder").token
    ended = threading.Event()
    notices: list[corral.ClaimEnded] = []

    def hold() -> None:
        with corral.Teammate.connect(lead.address, holder_token) as holder:
            for item in holder.idle(max_idle_polls=40, poll_interval=0.05):
                if isinstance(item, corral.Claim):
                    item.report_progress("halfway through", 0.5)
                if isinstance(item, corral.ClaimEnded):
                    notices.append(item)
                    ended.set()
                    return

    threading.Thread(target=hold, daemon=True).start()
    wait_until(lambda: lead.get_task("held").state is corral.TaskState.IN_PROGRESS, 10, "held is claimed")
    page.click("button[data-tab='tasks']")
    # The heartbeat's progress shows in the row and on the node.
    page.wait_for_selector("#tasks tr[data-task-id='held'] meter")
    assert "halfway through" in page.locator("#tasks tr[data-task-id='held']").inner_text()
    wait_until(lambda: "50%" in (page.evaluate("window.corral.graphLabel('held')") or ""), 5, "the node's progress")
    page.click("#tasks tr[data-task-id='held']")
    page.wait_for_selector("#drawer[data-task-id='held'] button[data-action='revoke-claim']")
    page.click("#drawer button[data-action='revoke-claim']")
    assert ended.wait(10) and notices[0].task_id == "held"

    # The same POST without the CSRF token, or from another origin, is refused.
    async def forged(http: aiohttp.ClientSession) -> list[int]:
        async with http.post(f"{acting.url}/login", json={"token": acting.token}) as response:
            assert response.status == 200
        async with http.get(f"{acting.url}/api/board") as response:
            csrf = json.loads(await response.text())["session"]["csrf"]
        url, body = f"{acting.url}/api/actions/cancel-task", {"task_id": "held"}
        statuses = []
        for headers in (
            {"Origin": acting.url},
            {"Origin": "http://evil.example", "X-Corral-CSRF": csrf},
            {"X-Corral-CSRF": csrf},
            {"Origin": acting.url, "X-Corral-CSRF": csrf + "x"},
        ):
            async with http.post(url, json=body, headers=headers) as response:
                statuses.append(response.status)
        async with http.post(url, json=body, headers={"Origin": acting.url, "X-Corral-CSRF": csrf}) as response:
            statuses.append(response.status)
        return statuses

    assert run(forged) == [403, 403, 403, 403, 200]
    assert lead.get_task("held").state is corral.TaskState.CANCELED

    # Raise a budget from the teammates table.
    page.on("dialog", lambda dialog: dialog.accept("250000"))
    page.click("button[data-tab='teammates']")
    page.click("#teammates tr[data-teammate='holder'] button[data-action='set-budget']")
    page.wait_for_selector("#teammates button[data-done='ok']")
    assert next(t for t in lead.list_teammates() if t.name == "holder").budget.max_tokens == 250_000

    # A viewer sees no buttons and may not act.
    viewer_page = open_board(browser, acting, lead.add_viewer("watcher"))
    viewer_page.click("button[data-tab='tasks']")
    viewer_page.click("#tasks tr[data-task-id='gated']")
    viewer_page.wait_for_selector("#drawer[data-task-id='gated']")
    assert viewer_page.locator("button[data-action]").count() == 0
    viewer_page.context.close()
    page.context.close()


def test_a_resized_window_refits_the_graph(acting, browser):
    chain = [corral.TaskSpec(id=f"chain-{i}", depends_on=[f"chain-{i - 1}"] if i else []) for i in range(12)]
    acting.lead.create_tasks(chain)
    page = open_board(browser, acting)

    def view() -> dict:
        return page.evaluate("window.corral.graphView || {}")

    wait_until(lambda: view().get("inside"), 10, "the graph laid out in sight")
    wide = view()["width"]
    page.set_viewport_size({"width": 640, "height": 420})
    wait_until(lambda: view()["width"] < wide and view()["inside"], 10, "the graph refit to the smaller window")
    page.context.close()


def test_a_board_of_ten_thousand_tasks_draws_its_frontier_and_pages_its_table(acting, browser):
    lead = acting.lead
    chain = [
        corral.TaskSpec(id=f"big-{i:05d}", title=f"big {i}", depends_on=[f"big-{i - 1:05d}"] if i % 50 else [])
        for i in range(10_000)
    ]
    lead.create_tasks(chain)
    page = open_board(browser, acting, ready_timeout_s=30)  # the layout of 2,000 nodes takes seconds here
    note = page.locator("#graph-note")
    assert note.is_visible() and "frontier" in note.inner_text()
    nodes = page.evaluate("window.corral.tasks.size")
    assert 0 < nodes <= 2000
    page.click("button[data-tab='tasks']")
    page.wait_for_selector("#tasks[data-page='1']")
    first = page.locator("#tasks tbody tr[data-task-id]").first.get_attribute("data-task-id")
    assert page.locator("#tasks tbody tr[data-task-id]").count() == 100
    page.click("#page-next")
    page.wait_for_selector("#tasks[data-page='2']")
    second = page.locator("#tasks tbody tr[data-task-id]").first.get_attribute("data-task-id")
    assert first != second
    assert "10,0" in page.locator("#page-text").inner_text()
    screenshot(page, "board-10k")
