"""Idle polls and idle_timeout (design §5, last paragraph)."""

from __future__ import annotations

import functools
import time

import grpc
import pytest

from corral.v1 import corral_pb2 as pb

from .wire import spec


@pytest.mark.timeout(30)
def test_idle_timeout_is_sent_then_the_stream_ends_ok(daemon):
    mate = daemon.add_teammate()
    watch = daemon.watch()
    started = time.monotonic()
    stream = mate.idle(max_idle_polls=3, poll_interval=0.1)
    timeout = stream.next_event("idle_timeout", timeout=5)
    elapsed = time.monotonic() - started
    assert timeout.idle_polls == 3
    assert elapsed >= 0.3 - 0.05, f"three 100 ms polls took only {elapsed:.3f}s"
    code, details = stream.wait_end(5)
    assert code == grpc.StatusCode.OK, details
    assert len(stream.received) == 1, "nothing but idle_timeout was expected"
    changed = watch.next_matching(
        lambda e: (
            e.WhichOneof("event") == "teammate_changed"
            and e.teammate_changed.reason == pb.TEAMMATE_CHANGE_REASON_IDLE_TIMEOUT
        ),
        what="idle_timeout event",
    )
    assert changed.teammate_changed.teammate.name == mate.name
    watch.cancel()


@pytest.mark.timeout(30)
def test_wake_ups_and_deliveries_do_not_use_up_the_idle_budget(daemon):
    mate = daemon.add_teammate()
    stream = mate.idle(max_idle_polls=3, poll_interval=0.3)  # would time out after ~0.9 s of nothing
    started = time.monotonic()

    def ping(round_number: int) -> None:
        daemon.lead.board.SendMessage(pb.SendMessageRequest(to=mate.name, body=f"ping {round_number}"))

    ping(0)
    message = stream.next_event("message", timeout=2)
    for round_number in range(1, 11):  # ~1.5 s of traffic: well past 3 x 300 ms
        assert message.body == f"ping {round_number - 1}"
        mate.ack(message.seq)
        # No idle_timeout while the teammate is being woken: the next ping is the next item.
        message = stream.expect_quiet(0.15, then=functools.partial(ping, round_number), arrives="message", within=2)
    last_delivery = time.monotonic()
    assert message.body == "ping 10"
    mate.ack(message.seq)
    assert time.monotonic() - started >= 1.5
    timeout = stream.next_event("idle_timeout", timeout=5)
    quiet_for = time.monotonic() - last_delivery
    assert timeout.idle_polls == 3
    assert quiet_for >= 0.9 - 0.2, f"timed out {quiet_for:.2f}s after the last delivery; the budget was not reset"
    code, details = stream.wait_end(5)
    assert code == grpc.StatusCode.OK, details


@pytest.mark.timeout(30)
def test_idle_polls_do_not_count_while_a_claim_is_held(daemon):
    mate = daemon.add_teammate()
    daemon.create_tasks(spec("long-job"))
    stream = mate.idle(max_idle_polls=2, poll_interval=0.1)
    claim = stream.next_event("claim")
    # Six poll intervals with a claim held: not idle; idle_timeout comes only after the completion.
    assert stream.expect_quiet(0.6, then=lambda: mate.complete(claim), arrives="idle_timeout").idle_polls == 2
    assert stream.wait_end(5)[0] == grpc.StatusCode.OK


@pytest.mark.timeout(30)
def test_a_task_arriving_before_the_timeout_is_claimed_and_resets_the_budget(daemon):
    mate = daemon.add_teammate()
    stream = mate.idle(max_idle_polls=10, poll_interval=0.1)  # ~1 s of budget
    claim = stream.expect_quiet(0.25, then=lambda: daemon.create_tasks(spec("just-in-time")), arrives="claim", within=2)
    assert claim.task.id == "just-in-time"
    mate.complete(claim)
    started = time.monotonic()
    assert stream.next_event("idle_timeout", timeout=5).idle_polls == 10
    assert time.monotonic() - started >= 1.0 - 0.1, "the claim did not restart the idle count"


@pytest.mark.timeout(30)
def test_a_teammate_waits_while_work_it_may_take_is_still_to_come(daemon):
    """The idle budget is spent only on a board with nothing left for this teammate."""
    ann = daemon.add_teammate()
    reviewer = daemon.add_teammate(roles=["reviewer"])
    watch = daemon.watch()
    daemon.create_tasks(spec("fetch"), spec("review", "fetch", required_role="reviewer"))
    ann_stream = ann.idle()
    fetch = ann_stream.next_event("claim")
    assert fetch.task.id == "fetch"
    waiting = reviewer.idle(max_idle_polls=2, poll_interval=0.05)
    # Twelve poll intervals while `review` waits on `fetch`, held by ann: no idle_timeout.
    assert waiting.try_next(0.6) is None
    # ... and the board says the reviewer is waiting, and for what.
    listed = {t.name: t for t in daemon.lead.board.ListTeammates(pb.ListTeammatesRequest()).teammates}
    assert listed[reviewer.name].status == pb.TEAMMATE_STATUS_WAITING
    # fetch, held by ann, may come back; review waits on it. Both are open to a reviewer.
    assert list(listed[reviewer.name].waiting_for_task_ids) == ["fetch", "review"]
    assert listed[ann.name].status == pb.TEAMMATE_STATUS_BUSY and not listed[ann.name].waiting_for_task_ids
    watch.next_matching(
        lambda e: (
            e.WhichOneof("event") == "teammate_changed"
            and e.teammate_changed.teammate.name == reviewer.name
            and e.teammate_changed.reason == pb.TEAMMATE_CHANGE_REASON_WAITING
            and e.teammate_changed.status == pb.TEAMMATE_STATUS_WAITING
        ),
        what="the reviewer waiting",
    )
    ann.complete(fetch)
    review = waiting.next_event("claim", timeout=5)
    assert review.task.id == "review"
    reviewer.complete(review)
    # Now nothing is left: the reviewer is idle again and its budget runs out as before.
    assert waiting.next_event("idle_timeout", timeout=5).idle_polls == 2
    assert waiting.wait_end(5)[0] == grpc.StatusCode.OK
    ann_stream.call.cancel()
    watch.cancel()


@pytest.mark.timeout(30)
def test_work_for_another_role_does_not_keep_a_teammate(daemon):
    plain = daemon.add_teammate()
    daemon.create_tasks(spec("only-for-reviewers", required_role="reviewer"))
    stream = plain.idle(max_idle_polls=2, poll_interval=0.05)
    assert stream.next_event("idle_timeout", timeout=5).idle_polls == 2
    assert stream.wait_end(5)[0] == grpc.StatusCode.OK
