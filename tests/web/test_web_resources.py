"""Path leases on the web board, in Chromium: the resources a teammate's claims hold in
the teammate view and a task's in the task table, shown as text (a hostile name the daemon
accepts draws no element and runs nothing), wrapped to fit at 1280 px, gone once freed;
and the task drawer's resources and what a waiting task waits for (the holder). A name
with whitespace never reaches the board: the daemon refuses it."""

from __future__ import annotations

import pytest

import corral
from tests.web.board_support import Mate, board_get, open_board, screenshot

pytestmark = pytest.mark.timeout(90)

# Allowed by the daemon (no whitespace, no empty segment), and markup if ever parsed as HTML.
HOSTILE = "repo:<img/src=x/onerror=window.__pwned=1>"
SCRIPTED = "repo:<script>window.__pwned=2<" + "/script>"
LONG = "repo:" + "deep" * 48  # 197 characters, one segment: must wrap, not widen the table


def lease_texts(page, selector: str) -> list[tuple[str, str]]:
    return page.eval_on_selector_all(selector, "nodes => nodes.map((n) => [n.textContent, n.dataset.mode])")


def test_the_daemon_refuses_a_resource_with_whitespace_so_it_never_reaches_the_board(web_daemon):
    with pytest.raises(corral.InvalidArgument) as refused:
        web_daemon.lead.create_tasks([corral.TaskSpec("res-spaced", resources=("repo:<img src=x onerror=alert(1)>",))])
    assert refused.value.field_violations[0].field == "tasks[0].resources[0]"
    with pytest.raises(corral.NotFound):
        web_daemon.lead.get_task("res-spaced")


def test_held_resources_show_as_text_in_the_teammate_and_task_views_and_the_drawer(web_daemon, browser):
    lead = web_daemon.lead
    lead.create_tasks(
        [
            corral.TaskSpec("res-holder", title="holds", required_role="res", priority=5, resources=(HOSTILE,)),
            corral.TaskSpec("res-waiter", title="waits", required_role="res", resources=(f"{HOSTILE}/inner",)),
        ]
    )
    lead.create_tasks(
        [corral.TaskSpec("res-reader", title="reads", required_role="rr", shared_resources=(SCRIPTED, LONG))]
    )
    holder, reader = Mate(web_daemon, "res-mate", ["res"]), Mate(web_daemon, "res-reads", ["rr"])
    held, read = holder.claim(), reader.claim()
    assert (held.task.id, read.task.id) == ("res-holder", "res-reader")
    page = open_board(browser, web_daemon)

    page.wait_for_selector("#teammates tr[data-teammate='res-mate'] .lease")
    assert lease_texts(page, "#teammates tr[data-teammate='res-mate'] .lease") == [[HOSTILE, "exclusive"]]
    page.wait_for_selector("#teammates tr[data-teammate='res-reads'] .lease")
    reading = lease_texts(page, "#teammates tr[data-teammate='res-reads'] .lease")
    assert sorted(reading) == sorted([[SCRIPTED, "shared"], [LONG, "shared"]])
    assert page.locator("#teammates img, #teammates script, #tasks img, #tasks script").count() == 0
    # The teammate view fits its pane at 1280 px: the long name wraps inside its cell.
    widths = page.eval_on_selector("#tab-teammates", "n => [n.scrollWidth, n.clientWidth]")
    assert widths[0] <= widths[1], f"the teammate table is wider than its pane: {widths}"
    right = page.eval_on_selector_all(
        ".lease", "nodes => Math.max(...nodes.map((n) => n.getBoundingClientRect().right))"
    )
    assert right <= 1280
    screenshot(page, "held-resources-teammates")

    page.click("button[data-tab='tasks']")
    page.wait_for_selector("#tasks tr[data-task-id='res-holder'] .lease")
    assert lease_texts(page, "#tasks tr[data-task-id='res-holder'] .lease") == [[HOSTILE, "exclusive"]]
    assert page.locator("#tasks tr[data-task-id='res-waiter'] .lease").count() == 0, "a waiting task holds nothing"
    assert page.eval_on_selector("#tab-tasks", "n => n.scrollWidth <= n.clientWidth"), "the task table is too wide"

    page.click("#tasks tr[data-task-id='res-waiter']")
    page.wait_for_selector("#drawer[data-task-id='res-waiter']")
    fields = dict(
        zip(
            page.eval_on_selector_all("#d-fields dt", "nodes => nodes.map((n) => n.textContent)"),
            page.eval_on_selector_all("#d-fields dd", "nodes => nodes.map((n) => n.textContent)"),
            strict=True,
        )
    )
    assert fields["resources"] == f"{HOSTILE}/inner (exclusive)"
    assert f"{HOSTILE}/inner: task res-holder holds {HOSTILE} exclusively" in fields["waiting for"]
    assert page.locator("#drawer img, #drawer script").count() == 0
    detail = board_get(web_daemon, "/api/tasks/res-waiter")
    assert detail["waiting_for"]["resources"] == [
        {
            "resource": f"{HOSTILE}/inner",
            "held_by_task_id": "res-holder",
            "held_resource": HOSTILE,
            "held_exclusive": True,
        }
    ]
    screenshot(page, "held-resources-drawer")

    holder.complete(held, b"done")
    page.wait_for_selector("#teammates tr[data-teammate='res-mate'] .lease", state="detached")
    assert page.locator("#tasks tr[data-task-id='res-holder'] .lease").count() == 0
    assert page.evaluate("window.__pwned") is None
    assert page.evaluate("window.__csp") == []
    reader.complete(read, b"read")
    holder.close()
    reader.close()
    page.context.close()
