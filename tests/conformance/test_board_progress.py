"""Progress on renewals: stored on the task, kept or cleared by the claim's life,
refused when out of bounds, and sent to Watch at most once a second per task."""

from __future__ import annotations

import json
import math

import pytest

from corrald import errors
from corrald.model import Event
from corrald.service import watch_convert
from corrald.store.tasks import PROGRESS_EVENT_SPACING_MS
from tests.support.boardkit import spec

pytestmark = pytest.mark.timeout(30)


def _claimed(board, task_id: str = "t1", lease_ms: int = 10_000):
    board.create(spec(task_id, lease_ms=lease_ms))
    board.add("alice")
    grant = board.claim("alice")
    assert grant is not None and grant.task.id == task_id
    return grant


def _progress_events(board) -> list[dict]:
    return [json.loads(data) for _, _, data in board.events("task_progress")]


def test_a_renewal_with_progress_stores_it_with_the_daemon_time(board, clock):
    grant = _claimed(board)
    clock.advance(5)
    board.renew("alice", "t1", grant.token, "running tests, 3/5", 0.5)
    task = board.task("t1")
    assert (task.progress, task.progress_fraction, task.progress_ms) == ("running tests, 3/5", 0.5, clock.now_ms())
    board.renew("alice", "t1", grant.token, "writing the report")  # no fraction: stored as none
    assert (board.task("t1").progress, board.task("t1").progress_fraction) == ("writing the report", None)
    board.renew("alice", "t1", grant.token, "", 0.75)  # a fraction alone clears the text
    assert (board.task("t1").progress, board.task("t1").progress_fraction) == ("", 0.75)


def test_a_plain_renewal_keeps_the_progress_and_a_new_claim_clears_it(board, clock):
    grant = _claimed(board, lease_ms=1_000)
    board.renew("alice", "t1", grant.token, "half way", 0.5)
    stored_at = clock.now_ms()
    clock.advance(10)
    board.renew("alice", "t1", grant.token)
    task = board.task("t1")
    assert (task.progress, task.progress_fraction, task.progress_ms) == ("half way", 0.5, stored_at)
    assert task.lease_expire_ms == clock.now_ms() + 1_000
    clock.advance(1_000)
    board.reap()
    assert board.task("t1").progress == "half way"  # back to pending: the last attempt's note stays visible
    again = board.claim("alice")
    assert again is not None and again.attempt == 2
    task = board.task("t1")
    assert (task.progress, task.progress_fraction, task.progress_ms) == ("", None, None)
    assert again.task.progress == ""


def test_completion_and_failure_keep_the_last_progress(board, clock):
    board.create(spec("a"), spec("b", max_attempts=1))
    board.add("alice")
    first = board.claim("alice")
    board.renew("alice", "a", first.token, "almost", 0.9)
    board.complete("alice", "a", first.token)
    second = board.claim("alice")
    board.renew("alice", "b", second.token, "stuck", 0.1)
    board.fail("alice", "b", second.token)
    assert (board.task("a").progress, board.task("a").progress_fraction) == ("almost", pytest.approx(0.9))
    assert (board.task("b").progress, board.task("b").progress_fraction) == ("stuck", pytest.approx(0.1))


@pytest.mark.parametrize(
    ("progress", "fraction", "field"),
    [
        ("x" * 1025, None, "progress"),
        ("é" * 513, None, "progress"),  # 1026 bytes of UTF-8 in 513 characters
        ("ok", 1.5, "progress_fraction"),
        ("ok", -0.1, "progress_fraction"),
        ("ok", math.nan, "progress_fraction"),
        ("", math.inf, "progress_fraction"),
    ],
)
def test_bad_progress_is_refused_and_nothing_is_written(board, clock, progress, fraction, field):
    grant = _claimed(board)
    board.renew("alice", "t1", grant.token, "before", 0.25)
    before, dump = board.task("t1"), board.dump()
    clock.advance(50)
    with pytest.raises(errors.InvalidArgument) as refused:
        board.renew("alice", "t1", grant.token, progress, fraction)
    assert refused.value.field == field
    assert board.task("t1") == before  # lease end and progress as they were
    assert board.dump() == dump


def test_progress_at_the_limits_is_accepted(board):
    grant = _claimed(board)
    board.renew("alice", "t1", grant.token, "x" * 1024, 1.0)
    board.renew("alice", "t1", grant.token, "é" * 512, 0.0)
    assert (board.task("t1").progress, board.task("t1").progress_fraction) == ("é" * 512, 0.0)


def test_watch_hears_of_progress_at_most_once_a_second(board, clock):
    grant = _claimed(board)
    board.renew("alice", "t1", grant.token, "step 1", 0.1)
    assert [e["progress"] for e in _progress_events(board)] == ["step 1"]
    for step in range(2, 6):
        clock.advance(200)  # 800 ms after the first event at the last of these
        board.renew("alice", "t1", grant.token, f"step {step}", step / 10)
    assert [e["progress"] for e in _progress_events(board)] == ["step 1"]
    assert board.task("t1").progress == "step 5"  # stored all the same
    clock.advance(PROGRESS_EVENT_SPACING_MS - 800)
    board.renew("alice", "t1", grant.token, "step 6", 0.6)
    events = _progress_events(board)
    assert [e["progress"] for e in events] == ["step 1", "step 6"]
    assert events[-1]["progress_fraction"] == pytest.approx(0.6) and events[-1]["progress_ms"] == clock.now_ms()


def test_a_plain_renewal_after_the_second_sends_the_progress_held_back(board, clock):
    grant = _claimed(board)
    board.renew("alice", "t1", grant.token, "step 1")
    clock.advance(300)
    board.renew("alice", "t1", grant.token, "step 2", 0.2)
    stored_at = clock.now_ms()
    clock.advance(300)
    board.renew("alice", "t1", grant.token)  # inside the second: nothing goes out
    assert len(_progress_events(board)) == 1
    clock.advance(PROGRESS_EVENT_SPACING_MS)
    board.renew("alice", "t1", grant.token)
    board.renew("alice", "t1", grant.token)  # nothing new to send
    events = _progress_events(board)
    assert [(e["progress"], e["progress_fraction"]) for e in events] == [("step 1", None), ("step 2", 0.2)]
    assert events[-1]["progress_ms"] == stored_at
    sent_at = board.scalar("SELECT max(time_ms) FROM events WHERE kind = 'task_progress'")
    assert sent_at == clock.now_ms()


@pytest.mark.sqlite_only  # counts statements through SQLite's trace callback
def test_a_plain_renewal_writes_no_event_and_runs_no_extra_statement(board, clock):
    grant = _claimed(board)
    board.renew("alice", "t1", grant.token)  # warms the path
    count_before = len(board.events())
    statements: list[str] = []

    def traced_renew(tx):
        from corrald.store import tasks

        tx.conn.set_trace_callback(statements.append)
        try:
            return tasks.renew(tx, "alice", "t1", grant.token)
        finally:
            tx.conn.set_trace_callback(None)

    board.call(traced_renew)
    assert len(board.events()) == count_before
    assert len(statements) == 3  # the claim check, the lease update, the protocol-pending check


def test_the_feed_shows_each_events_progress_as_it_was(board, clock):
    grant = _claimed(board)
    board.renew("alice", "t1", grant.token, "first", 0.25)
    clock.advance(PROGRESS_EVENT_SPACING_MS)
    board.renew("alice", "t1", grant.token, "second")
    board.complete("alice", "t1", grant.token)
    page = board.run(board.board.read_feed(0, 100, 1 << 20))
    shown = [watch_convert.watch_response(*item) for item in page.items]
    tasks = [r.task_changed for r in shown if r.WhichOneof("event") == "task_changed"]
    progress = [(t.progress, t.progress_fraction if t.HasField("progress_fraction") else None) for t in tasks]
    # created, claimed, two progress events, completed (which keeps the last note)
    assert progress == [("", None), ("", None), ("first", 0.25), ("second", None), ("second", None)]
    assert tasks[2].progress_time.ToMilliseconds() == clock.now_ms() - PROGRESS_EVENT_SPACING_MS
    assert not tasks[0].HasField("progress_time")


def test_progress_survives_a_restart(board, clock):
    grant = _claimed(board)
    board.renew("alice", "t1", grant.token, "before the restart", 0.5)
    stored_at = clock.now_ms()
    board.restart()
    task = board.task("t1")
    assert (task.progress, task.progress_fraction, task.progress_ms) == ("before the restart", 0.5, stored_at)


def test_a_task_event_written_before_progress_existed_shows_none(board, clock):
    grant = _claimed(board)
    board.renew("alice", "t1", grant.token, "now", 0.5)  # the task itself has progress
    old = Event(1, clock.now_ms(), "task_changed", dict(_progress_events(board)[0]))
    for key in ("progress", "progress_fraction", "progress_ms"):
        del old.data[key]
    shown = watch_convert.watch_response(old, board.task("t1"), None).task_changed
    assert shown.progress == "" and not shown.HasField("progress_fraction") and not shown.HasField("progress_time")
