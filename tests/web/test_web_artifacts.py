"""A task's artifacts in the drawer, in Chromium: each listed with its media type, size,
SHA-256 and attempt, its name shown as text (never markup), a click on its link a
download of the right bytes under the right file name with nothing rendered or run
(an HTML artifact whose script would mark the page), and a new upload listed while
the drawer is open, without a reload."""

from __future__ import annotations

import hashlib
import pathlib

import pytest

import corral
from tests.support.waiting import wait_until
from tests.web.board_support import Mate, WebDaemon, open_board, screenshot

pytestmark = pytest.mark.timeout(90)

HTML_NAME = "<b>bold</b>/page.html"  # a name that would make a <b> if drawn as markup
HTML = b"<!doctype html><script>window.__pwned = 'artifact'; parent.__pwned = 'artifact'</script><p>pwned</p>"
BINARY_NAME = "data/blob.bin"
BINARY = bytes(range(256)) * 300 + b"\x00\xff"  # 76,802 bytes: "75 KiB"


def claimed(daemon: WebDaemon, task_id: str) -> tuple[Mate, corral.Claim]:
    daemon.lead.create_tasks([corral.TaskSpec(id=task_id, title=f"{task_id} makes files", required_role=task_id)])
    mate = Mate(daemon, f"maker-{task_id}", [task_id])
    return mate, mate.claim()


def open_drawer(page, task_id: str) -> None:
    page.click("button[data-tab='tasks']")
    page.click(f"#tasks tr[data-task-id='{task_id}']")
    page.wait_for_selector(f"#drawer[data-task-id='{task_id}']")


def rows(page) -> list[list[str]]:
    """The artifacts table as the reader sees it: each row's cells' text."""
    return page.eval_on_selector_all(
        "#d-artifacts tr", "rows => rows.map((r) => [...r.cells].map((c) => c.textContent))"
    )


def link(page, name: str):
    """The download link of the artifact `name` (found by its text, which is the name)."""
    found = page.locator("#d-artifacts a.artifact-link").filter(has_text=name)
    assert found.count() == 1, name
    return found


def test_the_drawer_lists_artifacts_as_text_and_a_click_downloads_without_rendering(web_daemon, browser, tmp_path):
    mate, claim = claimed(web_daemon, "files-1")
    html = mate.put_artifact(claim, HTML_NAME, HTML, "text/html")
    binary = mate.put_artifact(claim, BINARY_NAME, BINARY, "application/octet-stream")
    page = open_board(browser, web_daemon)
    open_drawer(page, "files-1")
    wait_until(lambda: len(rows(page)) == 2, 10, "both artifacts listed")
    when = page.evaluate("(ms) => new Date(ms).toLocaleTimeString()", html.create_time.ToMilliseconds())
    when_binary = page.evaluate("(ms) => new Date(ms).toLocaleTimeString()", binary.create_time.ToMilliseconds())
    # Sorted by name; the sizes readable, the digests short (the whole one in the cell's title).
    assert rows(page) == [
        [HTML_NAME, "text/html", f"{len(HTML)} B", html.sha256[:12], "1", when],
        [BINARY_NAME, "application/octet-stream", "75 KiB", binary.sha256[:12], "1", when_binary],
    ]
    assert page.locator(f"#d-artifacts td[title='{binary.sha256}']").count() == 1
    assert page.locator("#drawer b").count() == 0  # the name is text: no element came of it
    assert page.is_hidden("#d-artifacts-none")
    # The table fits the drawer: every column is seen without scrolling sideways.
    table, drawer = page.locator("#d-artifacts-table").bounding_box(), page.locator("#drawer").bounding_box()
    assert table is not None and drawer is not None and table["x"] + table["width"] <= drawer["x"] + drawer["width"]
    screenshot(page, "drawer-artifacts")
    start_url = page.url
    page.evaluate("window.__marker = 'still this page'")

    for name, data, filename in ((HTML_NAME, HTML, "page.html"), (BINARY_NAME, BINARY, "blob.bin")):
        with page.expect_download() as started:
            link(page, name).click()
        download = started.value
        assert download.suggested_filename == filename
        saved = pathlib.Path(tmp_path / filename)
        download.save_as(saved)
        assert saved.read_bytes() == data
        assert hashlib.sha256(saved.read_bytes()).hexdigest() == (html if name == HTML_NAME else binary).sha256
    # Nothing rendered, nothing ran: the board is the same page, at the same address.
    assert page.url == start_url
    assert page.evaluate("window.__marker") == "still this page"
    assert page.evaluate("window.__pwned") is None
    assert page.context.pages == [page]
    assert page.evaluate("window.__csp") == []
    mate.close()
    page.context.close()


def test_an_artifact_uploaded_while_the_drawer_is_open_is_listed_without_a_reload(web_daemon, browser):
    mate, claim = claimed(web_daemon, "files-2")
    page = open_board(browser, web_daemon)
    open_drawer(page, "files-2")
    page.wait_for_selector("#d-artifacts-none", state="visible")
    assert rows(page) == []
    page.evaluate("window.__marker = 'no reload'")

    first = mate.put_artifact(claim, "logs/run.log", b"first run\n", "text/plain")
    wait_until(lambda: [r[0] for r in rows(page)] == ["logs/run.log"], 10, "the new artifact listed")
    assert rows(page)[0][3] == first.sha256[:12]
    assert page.is_hidden("#d-artifacts-none")
    # A second upload of the name supersedes the first in place; another name is added.
    second = mate.put_artifact(claim, "logs/run.log", b"second run, longer\n", "text/x-log")
    mate.put_artifact(claim, "a-first.txt", b"sorted first", "text/plain")
    wait_until(lambda: [r[0] for r in rows(page)] == ["a-first.txt", "logs/run.log"], 10, "both names listed")
    wait_until(lambda: rows(page)[1][1:4] == ["text/x-log", "19 B", second.sha256[:12]], 10, "the newer upload shown")
    with page.expect_download() as started:
        link(page, "logs/run.log").click()
    assert pathlib.Path(started.value.path()).read_bytes() == b"second run, longer\n"
    assert page.evaluate("window.__marker") == "no reload"
    # An artifact of another task does not reach this drawer.
    other_mate, other = claimed(web_daemon, "files-3")
    other_mate.put_artifact(other, "other.txt", b"not here", "text/plain")
    page.click("button[data-tab='events']")
    events = page.locator("#events")
    wait_until(lambda: "attached other.txt (text/plain) to files-3" in events.inner_text(), 10, "the event listed")
    assert [r[0] for r in rows(page)] == ["a-first.txt", "logs/run.log"]
    other_mate.close()
    mate.close()
    page.context.close()
