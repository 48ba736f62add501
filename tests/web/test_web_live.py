"""The live board in Chromium: a 50-task DAG worked by 6 teammates, watched from the page.

Every task's row goes PENDING -> IN_PROGRESS -> COMPLETED in the page's own DOM
(recorded by a MutationObserver as the page applies events) and ends equal to
ListTasks; teammate rows go busy and back; a task that fails shows under
failures with its error. Then the page's event stream is dropped by the server
mid-run (a failpoint) and the page resumes with Last-Event-ID: the events it
applied equal the Watch log, none missing, none twice.
"""

from __future__ import annotations

import time

import pytest

import corral
from tests.support.teammates import TeammateThread
from tests.support.waiting import wait_until
from tests.web.board_support import open_board, screenshot, start_web_daemon, stop_web_daemon, watch_log

pytestmark = pytest.mark.timeout(90)

ROWS = "[...document.querySelectorAll('#tasks tr[data-task-id]')].map(r => [r.dataset.taskId, r.dataset.state])"

WORK_S = 0.2  # each task's simulated work: long enough for a frame to show IN_PROGRESS
RECORDER = """
window.__rows = {}; window.__mates = {};
const seen = (table, key, value, into) => {
  new MutationObserver((records) => {
    for (const r of records) {
      const row = r.target; const k = row.getAttribute(key); const v = row.getAttribute(value);
      if (!k || !v) continue;
      const list = (into[k] = into[k] || []);
      if (list[list.length - 1] !== v) list.push(v);
    }
  }).observe(document.querySelector(table), { subtree: true, attributes: true, attributeFilter: [value] });
};
seen('#tasks tbody', 'data-task-id', 'data-state', window.__rows);
seen('#teammates tbody', 'data-teammate', 'data-status', window.__mates);
"""


def dag(width: int = 10, layers: int = 5) -> list[corral.TaskSpec]:
    specs = []
    for layer in range(layers):
        for i in range(width):
            deps = [] if layer == 0 else [f"L{layer - 1}-{i}", f"L{layer - 1}-{(i + 3) % width}"]
            specs.append(corral.TaskSpec(id=f"L{layer}-{i}", title=f"step {layer}.{i}", depends_on=sorted(set(deps))))
    return specs


def work(task: corral.Task) -> bytes:
    time.sleep(WORK_S)  # the task's work, not a wait for anything
    if task.id == "odd-one":
        raise corral.PermanentFailure("the odd one out: disk quota exceeded")
    return b"ok"


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    # The 60th event the viewer "resumer"'s stream sends drops it (once): its page must resume.
    daemon = start_web_daemon(
        tmp_path_factory.mktemp("live") / "state", env={"CORRAL_FAILPOINTS": "web_event_sent:viewer:resumer=error:60"}
    )
    try:
        yield daemon
    finally:
        stop_web_daemon(daemon)


def test_the_board_follows_a_dag_worked_by_six_teammates(live, browser):
    lead = live.lead
    page = open_board(browser, live)
    page.evaluate(RECORDER)
    resumer = open_board(browser, live, lead.add_viewer("resumer"))
    lead.create_tasks([*dag(), corral.TaskSpec(id="odd-one", title="a task that fails", max_attempts=1)])
    wait_until(lambda: page.locator("#tasks tr[data-state='PENDING']").count() == 51, 10, "51 pending rows")
    assert page.locator("#graph canvas").count() > 0
    screenshot(page, "graph-pending")

    mates = [TeammateThread(lead, f"mate-{i}", work, max_idle_polls=30, poll_interval=0.05).start() for i in range(6)]
    wait_until(lambda: page.locator("#tasks tr[data-state='COMPLETED']").count() >= 15, 30, "a third done")
    screenshot(page, "graph-mid-run")
    page.click("button[data-tab='teammates']")
    screenshot(page, "teammates")
    page.click("button[data-tab='timeline']")
    screenshot(page, "timeline")
    wait_until(lambda: page.locator("#tasks tr[data-state='COMPLETED']").count() == 50, 40, "all 50 completed")
    for mate in mates:
        mate.result(timeout=30)

    final = {task.id: task.state.name for task in lead.list_tasks()}
    start = page.evaluate("window.corral.snapshotSeq")
    log = watch_log(lead, start)
    wait_until(lambda: page.evaluate("window.corral.applied") == log[-1], 10, "the page caught up")
    shown = dict(page.evaluate(ROWS))
    assert shown == final

    # Each task's states as the page applied them, event by event...
    applied_states: dict[str, list[str]] = {}
    for _, kind, task_id, state in page.evaluate("window.corral.trace"):
        states = applied_states.setdefault(task_id, []) if kind == "task" else []
        if not states or states[-1] != state:
            states.append(state)
    rows = page.evaluate("window.__rows")
    for spec in dag():
        assert applied_states[spec.id] == ["PENDING", "IN_PROGRESS", "COMPLETED"], (spec.id, applied_states[spec.id])
    # ...and as its rows showed them, one frame at a time: on a busy machine a frame can
    # come after both a claim and its completion, but hardly ever for many tasks.
    showed_work = [spec.id for spec in dag() if rows[spec.id] == ["PENDING", "IN_PROGRESS", "COMPLETED"]]
    assert all(rows[spec.id][0] == "PENDING" and rows[spec.id][-1] == "COMPLETED" for spec in dag())
    assert len(showed_work) >= 45, rows
    assert rows["odd-one"] == ["PENDING", "IN_PROGRESS", "FAILED"]
    statuses = page.evaluate("window.__mates")
    busy_then_not = [name for name, seen in statuses.items() if "BUSY" in seen and seen[-1] != "BUSY"]
    assert len(busy_then_not) >= 5, statuses

    page.click("button[data-tab='failures']")
    failure = page.locator("#failures tr[data-task-id='odd-one']")
    assert "disk quota exceeded" in failure.inner_text()
    assert page.locator("#failure-count").inner_text() == "1"

    page.click("button[data-tab='tasks']")
    page.click("#tasks tr[data-task-id='L4-0']")
    page.wait_for_selector("#drawer[data-task-id='L4-0']")
    assert page.locator("#d-result").inner_text() == "ok"
    assert "mate-" in page.locator("#d-attempts").inner_text()
    assert page.locator("button[data-action]").count() == 0  # no --web-actions: no action is offered
    screenshot(page, "detail-drawer")

    assert page.evaluate("window.corral.seqs") == log

    # The failpoint dropped the viewer's stream once, at its 60th event: its page resumed.
    start = resumer.evaluate("window.corral.snapshotSeq")
    applied = resumer.evaluate("window.corral.seqs")
    assert len(log) > 100 and applied == watch_log(lead, start), "the Watch log: none missing, none twice"
    assert "ended a board event stream: OperationalError" in live.log_file.read_text()
    assert page.evaluate("window.__csp") == []


def test_the_page_reconnects_after_a_restart_and_catches_up(tmp_path, browser):
    state = tmp_path / "state"
    first = start_web_daemon(state)
    port = first.url.rsplit(":", 1)[1]
    page = open_board(browser, first)
    try:
        first.lead.create_tasks([corral.TaskSpec(id="before", title="before the restart")])
        page.wait_for_selector("#tasks tr[data-task-id='before']", state="attached")
    finally:
        stop_web_daemon(first)
    page.wait_for_selector("#conn[data-conn='reconnecting']")
    assert "reconnecting since" in page.locator("#conn").inner_text()
    second = start_web_daemon(state, web=f"127.0.0.1:{port}")  # the same board, at the same address
    try:
        second.lead.create_tasks([corral.TaskSpec(id="after", title="after the restart")])
        page.wait_for_selector("#tasks tr[data-task-id='after']", state="attached")
        page.wait_for_selector("#conn[data-conn='live']")
        start = page.evaluate("window.corral.snapshotSeq")
        assert page.evaluate("window.corral.seqs") == watch_log(second.lead, start)  # the session outlived it
    finally:
        stop_web_daemon(second)
        page.context.close()
