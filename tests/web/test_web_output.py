"""A task's live output in the drawer, in Chromium: a teammate's appends shown in order as
they commit, the attempt's end, hostile output shown as text and never run, a character
split across appends drawn whole, the last 256 KiB of a long output with a note, the
reader's scroll kept, and a new attempt replacing the view."""

from __future__ import annotations

import datetime

import pytest

import corral
from tests.support.waiting import wait_until
from tests.web.board_support import Mate, WebDaemon, board_get, open_board, screenshot

pytestmark = pytest.mark.timeout(90)

WINDOW = 256 * 1024


def open_drawer(page, task_id: str) -> None:
    page.click("button[data-tab='tasks']")
    page.click(f"#tasks tr[data-task-id='{task_id}']")
    page.wait_for_selector(f"#drawer[data-task-id='{task_id}']")


def shown(page) -> str:
    return page.eval_on_selector("#d-output", "n => n.textContent")


def outputs_open(daemon: WebDaemon) -> int:
    return board_get(daemon, "/api/board")["stats"]["outputs_open"]


def claimed(daemon: WebDaemon, task_id: str, mate_name: str, **options) -> tuple[Mate, corral.Claim]:
    spec = corral.TaskSpec(id=task_id, title=f"{task_id} writes output", required_role=task_id, **options)
    daemon.lead.create_tasks([spec])
    mate = Mate(daemon, mate_name, [task_id])
    return mate, mate.claim()


def test_the_drawer_follows_appends_in_order_and_shows_the_attempts_end(web_daemon, browser):
    mate, claim = claimed(web_daemon, "follow-1", "writer-follow")
    page = open_board(browser, web_daemon)
    open_drawer(page, "follow-1")
    page.wait_for_selector("#d-output[data-state='live']")
    assert shown(page) == ""
    sent = ""
    for i in range(5):
        line = f"step {i}: {'ok ' * i}\n"
        mate.append(claim, line.encode())
        sent += line
        wait_until(lambda sent=sent: shown(page) == sent, 10, f"the text after append {i}")
    mate.complete(claim, b"done")
    page.wait_for_selector("#d-output[data-state='ended']")
    assert shown(page) == sent
    assert page.inner_text("#d-output-state") == "attempt 1 ended"
    screenshot(page, "drawer-output")
    # The stream ended with the attempt: no follower is left on the daemon.
    wait_until(lambda: outputs_open(web_daemon) == 0, 10, "no output stream open")
    mate.close()
    page.context.close()


HOSTILE = [
    b"<script>window.__pwned = 'script'</script>\n",
    b"<img src=x onerror=\"window.__pwned = 'img'\">\n",
    b"\x1b[31mred\x1b[0m <b>bold</b> &amp; &lt;\n",
    b"long " + b"x" * 20_000 + b"\n",
    b"split: \xe2\x82",  # the first two bytes of a euro sign ...
    b"\xac, a bad byte: \xff\n",  # ... and its last, then a byte that is no UTF-8
]


def test_hostile_output_is_shown_verbatim_as_text_and_nothing_runs(web_daemon, browser):
    mate, claim = claimed(web_daemon, "hostile-1", "writer-hostile")
    page = open_board(browser, web_daemon)
    open_drawer(page, "hostile-1")
    page.wait_for_selector("#d-output[data-state='live']")
    for data in HOSTILE[:-1]:
        mate.append(claim, data)
    before_split = b"".join(HOSTILE[:-2]).decode() + "split: "
    # Half a character is held back, never drawn as a replacement character.
    wait_until(lambda: shown(page) == before_split, 10, "the text up to the split character")
    mate.append(claim, HOSTILE[-1])
    expected = b"".join(HOSTILE).decode("utf-8", errors="replace")
    assert "split: €, a bad byte: \ufffd\n" in expected
    wait_until(lambda: shown(page) == expected, 10, "the hostile output, verbatim")
    assert page.evaluate("window.__pwned") is None
    assert page.eval_on_selector("#d-output", "n => n.childElementCount") == 0
    assert page.locator("#drawer img, #drawer script").count() == 0
    assert page.evaluate("window.__csp") == []
    # The long line wraps inside the box: the drawer does not grow past a 1280 px window.
    box = page.locator("#d-output").bounding_box()
    assert box is not None and box["x"] + box["width"] <= 1280
    # Closing the drawer stops its follower on the daemon.
    wait_until(lambda: outputs_open(web_daemon) == 1, 10, "the drawer's output stream open")
    page.click("#drawer-close")
    wait_until(lambda: outputs_open(web_daemon) == 0, 10, "the closed drawer's stream gone")
    mate.close()
    page.context.close()


def at_bottom(page) -> bool:
    return page.eval_on_selector("#d-output", "n => n.scrollTop + n.clientHeight >= n.scrollHeight - 4")


def test_a_long_output_shows_its_last_256_kib_keeps_the_readers_place_and_a_new_attempt_replaces_it(
    web_daemon, browser
):
    mate, claim = claimed(web_daemon, "long-1", "writer-long", retry_backoff=datetime.timedelta(0), max_attempts=3)
    lines = [f"line {n:06d} of a long run\n".encode() for n in range(12_000)]  # about 330 KiB
    whole = b"".join(lines)
    for start in range(0, len(whole), 60_000):
        mate.append(claim, whole[start : start + 60_000])
    page = open_board(browser, web_daemon)
    open_drawer(page, "long-1")
    wait_until(lambda: shown(page) == whole[-WINDOW:].decode(), 10, "the last 256 KiB")
    assert page.is_visible("#d-output-note")
    assert "corral tasks output long-1" in page.inner_text("#d-output-note")
    wait_until(lambda: at_bottom(page), 5, "the box at its end")
    # A reader who scrolled up keeps their place while output comes.
    page.eval_on_selector("#d-output", "n => { n.scrollTop = 0; }")
    more = b"".join(f"more {n}\n".encode() for n in range(200))
    mate.append(claim, more)
    wait_until(lambda: shown(page).endswith("more 199\n"), 10, "the new lines")
    assert page.eval_on_selector("#d-output", "n => n.scrollTop") == 0
    assert len(shown(page)) == WINDOW  # older text dropped as new text came
    # Back at the end, it follows again.
    page.eval_on_selector("#d-output", "n => { n.scrollTop = n.scrollHeight; }")
    mate.append(claim, b"last line\n")
    wait_until(lambda: shown(page).endswith("last line\n"), 10, "the last line")
    wait_until(lambda: at_bottom(page), 5, "the box following its end")
    # The attempt fails and the task is claimed again: the second attempt's output replaces the view.
    claim.fail("try again", retryable=True)
    page.wait_for_selector("#d-output[data-state='ended']")
    second = mate.claim()
    assert second.attempt == 2
    page.wait_for_selector("#d-output[data-attempt='2'][data-state='live']")
    assert shown(page) == ""
    assert page.is_hidden("#d-output-note")
    mate.append(second, b"second attempt\n")
    wait_until(lambda: shown(page) == "second attempt\n", 10, "the second attempt's output")
    second.complete(b"ok")
    page.wait_for_selector("#d-output[data-state='ended']")
    mate.close()
    page.context.close()


def test_a_task_not_claimed_yet_says_so_and_follows_once_it_is(web_daemon, browser):
    web_daemon.lead.create_tasks([corral.TaskSpec(id="later-1", title="claimed later", required_role="later-1")])
    page = open_board(browser, web_daemon)
    open_drawer(page, "later-1")
    page.wait_for_selector("#d-output[data-state='none']")
    assert page.inner_text("#d-output-state") == "no output: not claimed yet"
    mate = Mate(web_daemon, "writer-later", ["later-1"])
    claim = mate.claim()
    page.wait_for_selector("#d-output[data-state='live']")
    mate.append(claim, b"now claimed\n")
    wait_until(lambda: shown(page) == "now claimed\n", 10, "the output of the new claim")
    claim.complete(b"ok")
    mate.close()
    page.context.close()
