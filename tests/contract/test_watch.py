"""The Watch feed (design §4 Watch, WatchResponse): ordered, resumable by seq,
replays identical, complete enough to redraw the board."""

from __future__ import annotations

import pytest

from corral.v1 import corral_pb2 as pb

from .wire import spec, ts_seconds


def _kind(event: pb.WatchResponse) -> str:
    return event.WhichOneof("event")


def _read(watch, count: int) -> list[pb.WatchResponse]:
    return [watch.next(5) for _ in range(count)]


def _read_through(watch, last_seq: int) -> list[pb.WatchResponse]:
    events = []
    while not events or events[-1].seq < last_seq:
        events.append(watch.next(5))
    return events


@pytest.mark.timeout(40)
def test_watch_is_ordered_resumable_and_replays_identically(daemon):
    live = daemon.watch(0)
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("a", description="first", payload=b"p"), spec("b", "a", priority=2))
    stream = ann.idle()
    claim_a = stream.next_event("claim")
    ann.complete(claim_a, b"result-a")
    claim_b = stream.next_event("claim")
    ann.teammate.FailTask(
        pb.FailTaskRequest(task_id="b", claim_token=claim_b.claim_token, error="nope", retryable=False)
    )
    ann.board.SendMessage(pb.SendMessageRequest(to="lead", body="b failed"))
    plan_id = ann.teammate.SubmitPlan(pb.SubmitPlanRequest(plan="retry b differently")).plan_id
    request_id = daemon.lead.lead.RequestShutdown(pb.RequestShutdownRequest(name="ann", reason="done")).request_id
    ann.teammate.RespondShutdown(pb.RespondShutdownRequest(request_id=request_id, approve=False, reason="wait"))

    live.next_matching(lambda e: _kind(e) == "shutdown_answered", timeout=10, what="shutdown_answered")
    while live.try_next(0.3) is not None:  # trailing status changes
        pass
    full = list(live.received)
    seqs = [e.seq for e in full]
    assert seqs == sorted(set(seqs)) and seqs[0] > 0, f"seq must strictly increase: {seqs}"
    times = [ts_seconds(e.time) for e in full]
    assert times == sorted(times) and all(e.HasField("time") for e in full)

    # The contents: task changes carry the task after the change.
    a_events = [e.task_changed for e in full if _kind(e) == "task_changed" and e.task_changed.id == "a"]
    assert [t.state for t in a_events] == [pb.TASK_STATE_PENDING, pb.TASK_STATE_IN_PROGRESS, pb.TASK_STATE_COMPLETED]
    created, claimed, completed = a_events
    assert created.owner == "" and created.title == "task a" and created.description == "first"
    assert created.payload == b"p" and not created.HasField("lease_expire_time") and created.result == b""
    assert claimed.owner == "ann" and claimed.attempt == 1
    assert claimed.lease_expire_time == claim_a.lease_expire_time
    assert completed.result == b"result-a" and completed.HasField("finish_time")
    assert not completed.HasField("lease_expire_time")
    b_events = [e.task_changed for e in full if _kind(e) == "task_changed" and e.task_changed.id == "b"]
    assert [t.state for t in b_events] == [pb.TASK_STATE_PENDING, pb.TASK_STATE_IN_PROGRESS, pb.TASK_STATE_FAILED]
    assert list(b_events[0].depends_on) == ["a"] and b_events[0].priority == 2
    assert b_events[-1].error == "nope" and b_events[-1].HasField("finish_time")

    message = next(e.message for e in full if _kind(e) == "message")
    assert (message.sender, message.body) == ("ann", "b failed")
    submitted = next(e.plan_submitted for e in full if _kind(e) == "plan_submitted")
    assert (submitted.plan_id, submitted.author, submitted.plan) == (plan_id, "ann", "retry b differently")
    answered = next(e.shutdown_answered for e in full if _kind(e) == "shutdown_answered")
    assert (answered.request_id, answered.teammate, answered.approve, answered.reason) == (
        request_id,
        "ann",
        False,
        "wait",
    )
    reasons = [
        e.teammate_changed.reason
        for e in full
        if _kind(e) == "teammate_changed" and e.teammate_changed.teammate.name == "ann"
    ]
    assert pb.TEAMMATE_CHANGE_REASON_JOINED in reasons
    assert pb.TEAMMATE_CHANGE_REASON_SHUTTING_DOWN in reasons

    # Order of cause and effect on the feed.
    position = {id(e): i for i, e in enumerate(full)}
    assert (
        position[id(next(e for e in full if _kind(e) == "plan_submitted"))]
        < position[id(next(e for e in full if _kind(e) == "shutdown_answered"))]
    )

    # A full replay gives the same events with the same seq.
    replay = daemon.watch(0)
    assert _read(replay, len(full)) == full
    # Resuming after any N gives exactly the events after N, and then the next change.
    resumed = []
    for index in (0, len(full) // 3, len(full) // 2, len(full) - 2):
        after = full[index].seq
        resumed.append(daemon.watch(after))
        assert _read_through(resumed[-1], full[-1].seq) == full[index + 1 :], f"resume after {after}"
    # Resuming at the end waits, then delivers the next change live, to every watcher.
    tail = daemon.watch(full[-1].seq)
    created = tail.expect_quiet(0.2, then=lambda: daemon.create_tasks(spec("c")), arrives="task_changed")
    assert created.id == "c" and tail.received[-1].seq > full[-1].seq
    for watcher in resumed:
        assert watcher.next(5) == tail.received[-1], f"{watcher.label}: not the next change"
    for watcher in (live, replay):
        event = watcher.next_matching(
            lambda e: _kind(e) == "task_changed" and e.task_changed.id == "c", what="task c created"
        )
        assert event.seq > full[-1].seq and event.task_changed.state == pb.TASK_STATE_PENDING
    for watcher in (tail, live, replay, *resumed):
        watcher.cancel()
    stream.cancel()


@pytest.mark.timeout(40)
def test_a_long_feed_replays_completely_across_pages(daemon):
    count = 600  # several pages of the daemon's feed
    daemon.create_tasks(*(spec(f"bulk-{i:04d}") for i in range(count)))
    watch = daemon.watch(0)
    events = _read(watch, count)
    assert [e.task_changed.id for e in events] == [f"bulk-{i:04d}" for i in range(count)]
    seqs = [e.seq for e in events]
    assert seqs == sorted(set(seqs))
    resumed = daemon.watch(events[299].seq)
    assert watch.expect_quiet(0.2, then=lambda: _read(resumed, count - 300)) == events[300:]
    # The next change is the next item of both.
    assert (
        resumed.expect_quiet(0.2, then=lambda: daemon.create_tasks(spec("next")), arrives="task_changed").id == "next"
    )
    assert watch.next(5) == resumed.received[-1]
    watch.cancel()
    resumed.cancel()


@pytest.mark.timeout(30)
def test_watch_after_the_end_of_the_feed_waits(daemon):
    daemon.create_tasks(spec("only"))
    first = daemon.watch(0)
    last = first.next(5).seq
    first.cancel()
    beyond = daemon.watch(last + 5)
    # It waits until the feed passes its seq: of six changes, the first delivered is beyond it.
    beyond.expect_quiet(
        0.3, then=lambda: daemon.create_tasks(*(spec(f"next-{i}") for i in range(6))), arrives="task_changed"
    )
    assert beyond.received[-1].seq > last + 5
    beyond.cancel()
