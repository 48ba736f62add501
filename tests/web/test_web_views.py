"""What the board's views draw, in Chromium: the demo's DAG laid out with no two labels
meeting and fitted to its panel (a long title cut, its full text on hover), timeline
bars coloured by how each claim ended (on a page open during the claims and on one
opened after them), and the Events panel's history on a page opened after the run,
newest first and paged back with "older"."""

from __future__ import annotations

import contextlib
import datetime
import itertools
from collections.abc import Iterator

import pytest

import corral
from corral.demo import load_sample_dag
from tests.support.waiting import wait_until
from tests.web.board_support import WebDaemon, open_board, screenshot, start_web_daemon, stop_web_daemon, watch_log

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def daemon(tmp_path) -> Iterator[WebDaemon]:
    started = start_web_daemon(tmp_path / "state")
    try:
        yield started
    finally:
        stop_web_daemon(started)


# ---------------------------------------------------------------- graph


def overlapping(boxes: list[dict]) -> list[tuple[str, str]]:
    return [
        (a["id"], b["id"])
        for a, b in itertools.combinations(boxes, 2)
        if a["x1"] < b["x2"] and b["x1"] < a["x2"] and a["y1"] < b["y2"] and b["y1"] < a["y2"]
    ]


def laid_out(page, count: int) -> list[dict]:
    def ready():
        view = page.evaluate("window.corral.graphView || {}")
        boxes = page.evaluate("window.corral.labelBoxes ? window.corral.labelBoxes() : []")
        return view.get("inside") and len(boxes) == count and boxes

    return wait_until(ready, 15, f"{count} nodes laid out in sight")


def test_the_demo_dag_draws_no_two_labels_over_each_other_and_fills_its_panel(daemon, browser):
    specs = load_sample_dag().specs
    daemon.lead.create_tasks(specs)
    page = open_board(browser, daemon)
    boxes = laid_out(page, len(specs))
    assert overlapping(boxes) == []
    assert all(box["x2"] > box["x1"] and box["y2"] > box["y1"] for box in boxes)
    view = page.evaluate("window.corral.graphView")
    assert view["fill"] > 0.8, view  # the drawing spans the panel in one direction at least
    screenshot(page, "graph-demo-dag")

    # A title too long for its box is cut, and shows whole on hover.
    title = "Reconcile the staging and production database schemas, table by table, before the release"
    daemon.lead.create_tasks([corral.TaskSpec(id="long", title=title, depends_on=["plan"])])
    boxes = laid_out(page, len(specs) + 1)
    assert overlapping(boxes) == []
    node = next(box for box in boxes if box["id"] == "long")
    assert node["label"].endswith("…") and len(node["label"].split("\n")) == 2
    graph = page.locator("#graph").bounding_box()
    page.mouse.move(graph["x"] + node["x"], graph["y"] + node["y"])
    page.wait_for_selector("#graph-tip[data-task-id='long']:not([hidden])")
    assert page.locator("#graph-tip").inner_text() == f"{title} (long)"
    page.context.close()


# ---------------------------------------------------------------- timeline

LONG_LEASE = datetime.timedelta(seconds=60)
EXPECTED = {
    "done": "completed",
    "broke": "failed",
    "lapsed": "expired",
    "taken": "released",
    "handed": "released",
    "stopped": "canceled",
    "held": "running",
}


def claim_for(lead: corral.Lead, name: str, spec: corral.TaskSpec, stack: contextlib.ExitStack) -> corral.Claim:
    """`spec`'s claim, taken by a new teammate `name`: the only stream open while the task is
    created, closed once the claim is in hand, so the task goes to nobody else."""
    new = lead.add_teammate(name)
    mate = stack.enter_context(corral.Teammate.connect(lead.address, new.token))
    lead.create_tasks([spec])
    with contextlib.closing(mate.idle()) as events:
        claim = next(item for item in events if isinstance(item, corral.Claim))
    assert claim.task.id == spec.id
    return claim


def bars_by_task(page) -> dict[str, str]:
    return {bar["task"]: bar["kind"] for bar in page.evaluate("window.corral.timelineBars || []")}


def drawn_colours(page) -> dict[str, tuple[str, str]]:
    """Each bar's outcome colour and the colour of the canvas pixel at its centre, as #rrggbb."""
    return page.evaluate(
        """() => {
          const canvas = document.getElementById("timeline"), ratio = window.devicePixelRatio || 1;
          const g = canvas.getContext("2d");
          const hex = (d) => "#" + [d[0], d[1], d[2]].map((v) => v.toString(16).padStart(2, "0")).join("");
          return Object.fromEntries(window.corral.timelineBars.map((b) => {
            const at = (v) => Math.floor(v * ratio);
            const px = g.getImageData(at(b.x + b.w / 2), at(b.y + b.h / 2), 1, 1).data;
            return [b.task, [b.color, hex(px)]];
          }));
        }"""
    )


def show_timeline(page) -> None:
    page.click("button[data-tab='timeline']")
    page.check("#timeline-all")


def test_timeline_bars_are_coloured_by_how_each_claim_ended(daemon, browser):
    lead = daemon.lead
    during = open_board(browser, daemon)
    show_timeline(during)
    with contextlib.ExitStack() as stack:
        # A task back to PENDING is canceled at once, so the next teammate's claim is its own.
        claim_for(lead, "ann", corral.TaskSpec(id="done"), stack).complete(b"ok")
        claim_for(lead, "bob", corral.TaskSpec(id="broke", max_attempts=1), stack).fail("disk full", retryable=False)
        claim_for(lead, "dee", corral.TaskSpec(id="taken", lease_duration=LONG_LEASE), stack)
        lead.revoke_claim("taken", "taken back")
        lead.cancel_tasks(["taken"])
        claim_for(lead, "eve", corral.TaskSpec(id="handed", lease_duration=LONG_LEASE), stack).release()
        lead.cancel_tasks(["handed"])
        claim_for(lead, "fay", corral.TaskSpec(id="stopped", lease_duration=LONG_LEASE), stack)
        lead.cancel_tasks(["stopped"])
        short = datetime.timedelta(seconds=1)
        claim_for(lead, "cid", corral.TaskSpec(id="lapsed", lease_duration=short, max_attempts=2), stack)
        wait_until(
            lambda: lead.get_task("lapsed").attempts[0].outcome is corral.AttemptOutcome.EXPIRED, 15, "the lease lapsed"
        )
        lead.cancel_tasks(["lapsed"])
        claim_for(lead, "gus", corral.TaskSpec(id="held", lease_duration=LONG_LEASE), stack)
        after = open_board(browser, daemon)
        show_timeline(after)
        for page in (during, after):
            wait_until(lambda page=page: bars_by_task(page) == EXPECTED, 10, "a bar per claim, coloured by its end")
            colours = drawn_colours(page)
            assert {task: drawn for task, (_, drawn) in colours.items()} == {
                task: colour for task, (colour, _) in colours.items()
            }
        kinds = page.evaluate("Object.fromEntries(window.corral.timelineBars.map((b) => [b.kind, b.color]))")
        assert len(set(kinds.values())) == len(kinds) == 6  # one colour per way a claim ends
        legend = after.locator("#timeline-legend .key").all_inner_texts()
        assert legend == [
            "running",
            "completed",
            "failed",
            "expired (reclaimed)",
            "revoked / released",
            "canceled",
            "asked the lead",
            "review approved",
            "review rejected",
            "split (waits for proposed tasks)",
        ]
        screenshot(after, "timeline-outcomes")
        during.context.close()
        after.context.close()


# ---------------------------------------------------------------- events


def shown_seqs(page) -> list[int]:
    return [int(seq) for seq in page.eval_on_selector_all("#events li", "items => items.map(i => i.dataset.seq)")]


def test_the_events_panel_shows_the_history_to_a_page_opened_after_the_run(daemon, browser):
    lead = daemon.lead
    lead.create_tasks([corral.TaskSpec(id=f"t{i:03d}") for i in range(150)])
    lead.cancel_tasks([f"t{i:03d}" for i in range(0, 150, 2)])
    log = watch_log(lead)
    assert len(log) > 200
    page = open_board(browser, daemon)
    page.click("button[data-tab='events']")
    newest = sorted(log, reverse=True)
    wait_until(lambda: shown_seqs(page) == [s for s in newest if s > log[-1] - 100], 10, "the newest page of history")
    page.click("#events-older")
    wait_until(lambda: shown_seqs(page) == [s for s in newest if s > log[-1] - 200], 10, "the page before it")
    older = page.locator("#events")
    while page.locator("#events-older").is_visible():
        before = older.get_attribute("data-older")
        page.click("#events-older")
        wait_until(lambda before=before: older.get_attribute("data-older") != before, 10, "an older page")
    assert shown_seqs(page) == newest
    assert page.locator("#events").get_attribute("data-older") == "none"
    # Live events go on top of the history.
    lead.create_tasks([corral.TaskSpec(id="later")])
    wait_until(lambda: shown_seqs(page)[0] > log[-1], 10, "the live event on top")
    assert page.locator("#events li").first.inner_text().count("later") == 1
    page.context.close()
