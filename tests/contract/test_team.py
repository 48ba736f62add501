"""Teammates' life: inbox acknowledgement, shutdown answers and the forced path,
statuses and stats (design §4 TeammateService / BoardService, §5)."""

from __future__ import annotations

import time

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.support import wait_until

from .wire import assert_status, duration, rpc_error, spec, ts_seconds


@pytest.mark.timeout(30)
def test_unacknowledged_inbox_items_are_resent_on_a_new_stream_after_held_claims(daemon):
    mate = daemon.add_teammate()

    def send(body: str) -> None:
        daemon.lead.board.SendMessage(pb.SendMessageRequest(to=mate.name, body=body))

    for body in ("m1", "m2", "m3"):
        send(body)
    first = mate.idle()
    delivered = [first.next_event("message") for _ in range(3)]
    assert [m.body for m in delivered] == ["m1", "m2", "m3"]
    assert [m.seq for m in delivered] == sorted({m.seq for m in delivered})
    assert mate.ack(delivered[0].seq) == delivered[0].seq
    daemon.create_tasks(spec("job"))
    claim = first.next_event("claim")
    first.cancel()

    second = mate.idle()
    assert second.next_event("claim").claim_token == claim.claim_token  # held claims come first
    again = [second.next_event("message"), second.next_event("message")]
    assert [(m.seq, m.body) for m in again] == [(m.seq, m.body) for m in delivered[1:]]
    assert again[0].send_time == delivered[1].send_time
    # Nothing else is resent: the next item is a message sent now.
    m4 = second.expect_quiet(0.3, then=lambda: send("m4"), arrives="message")
    assert m4.body == "m4"
    # Acknowledging is monotonic: a lower sequence does not move the mark back.
    assert mate.ack(m4.seq) == m4.seq
    assert mate.ack(delivered[0].seq) == m4.seq
    second.cancel()
    third = mate.idle()
    assert third.next_event("claim").claim_token == claim.claim_token
    assert third.expect_quiet(0.3, then=lambda: send("m5"), arrives="message").body == "m5"
    third.cancel()


@pytest.mark.timeout(30)
def test_broadcast_reaches_every_teammate_but_the_sender(daemon):
    ann, bob = daemon.add_teammate("ann"), daemon.add_teammate("bob")
    daemon.add_teammate("cat")
    daemon.lead.lead.RemoveTeammate(pb.RemoveTeammateRequest(name="cat"))
    recipients = ann.board.SendMessage(pb.SendMessageRequest(to="*", body="hello all")).recipients
    assert sorted(recipients) == ["bob"]
    message = bob.idle().next_event("message")
    assert (message.sender, message.body) == ("ann", "hello all")
    everyone = daemon.lead.board.SendMessage(pb.SendMessageRequest(to="*", body="from lead")).recipients
    assert sorted(everyone) == ["ann", "bob"]
    assert_status(
        rpc_error(daemon.lead.board.SendMessage, pb.SendMessageRequest(to="cat", body="x")), grpc.StatusCode.NOT_FOUND
    )


@pytest.mark.timeout(30)
def test_approving_shutdown_releases_claims_and_ends_the_stream(daemon):
    mate = daemon.add_teammate()
    daemon.create_tasks(spec("in-hand", max_attempts=2))
    stream = mate.idle()
    claim = stream.next_event("claim")
    request_id = daemon.lead.lead.RequestShutdown(pb.RequestShutdownRequest(name=mate.name)).request_id
    request = stream.next_event("shutdown_request")
    assert request.request_id == request_id
    mate.teammate.RespondShutdown(pb.RespondShutdownRequest(request_id=request_id, approve=True, reason="bye"))
    code, details = stream.wait_end(5)
    assert code in (grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED), details
    task = daemon.get_task("in-hand")
    assert task.state == pb.TASK_STATE_PENDING and task.owner == ""
    assert_status(rpc_error(mate.complete, claim), grpc.StatusCode.FAILED_PRECONDITION)
    # Answering twice is refused.
    error = rpc_error(mate.teammate.RespondShutdown, pb.RespondShutdownRequest(request_id=request_id, approve=True))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error.details()
    # The released task does not count as an attempt for the next holder.
    other_stream = daemon.add_teammate().idle()
    again = other_stream.next_event("claim")
    assert again.task.id == "in-hand" and again.attempt == claim.attempt
    other_stream.cancel()


@pytest.mark.timeout(30)
def test_only_the_addressee_can_answer_a_shutdown_request(daemon):
    target, other = daemon.add_teammate("target"), daemon.add_teammate("other")
    request_id = daemon.lead.lead.RequestShutdown(pb.RequestShutdownRequest(name="target")).request_id
    error = rpc_error(other.teammate.RespondShutdown, pb.RespondShutdownRequest(request_id=request_id, approve=True))
    assert error.code() == grpc.StatusCode.NOT_FOUND, error.details()
    assert daemon.teammate("target").status == pb.TEAMMATE_STATUS_SHUTTING_DOWN
    target.teammate.RespondShutdown(pb.RespondShutdownRequest(request_id=request_id, approve=False))
    assert daemon.teammate("target").status != pb.TEAMMATE_STATUS_SHUTTING_DOWN


@pytest.mark.timeout(30)
def test_unanswered_shutdown_past_its_grace_removes_the_teammate(daemon):
    mate = daemon.add_teammate("stubborn")
    daemon.create_tasks(spec("stuck"))
    stream = mate.idle()
    claim = stream.next_event("claim")
    requested_at = time.time()
    response = daemon.lead.lead.RequestShutdown(pb.RequestShutdownRequest(name="stubborn", grace=duration(1)))
    assert abs(ts_seconds(response.deadline_time) - (requested_at + 1.0)) < 1.0
    request = stream.next_event("shutdown_request")
    assert request.deadline_time == response.deadline_time
    code, _ = stream.wait_end(5)  # about one second later the forced path removes it
    assert time.time() >= ts_seconds(response.deadline_time) - 0.05
    assert code != grpc.StatusCode.OK
    assert daemon.teammate("stubborn").status == pb.TEAMMATE_STATUS_REMOVED
    task = daemon.get_task("stuck")
    assert task.state == pb.TASK_STATE_PENDING and task.owner == ""
    assert_status(rpc_error(mate.renew, claim), grpc.StatusCode.UNAUTHENTICATED)


@pytest.mark.timeout(30)
def test_statuses_held_claims_and_stats_follow_the_board(daemon):
    mate = daemon.add_teammate("worker", roles=["a", "b"])
    assert daemon.teammate("worker").status == pb.TEAMMATE_STATUS_OFFLINE
    assert list(daemon.teammate("worker").roles) == ["a", "b"]
    stream = mate.idle(slots=2)
    wait_until(lambda: daemon.teammate("worker").status == pb.TEAMMATE_STATUS_IDLE, what="idle")
    daemon.create_tasks(spec("x"), spec("y"), spec("z", "x"))
    first, second = stream.next_event("claim"), stream.next_event("claim")
    worker = daemon.teammate("worker")
    assert worker.status == pb.TEAMMATE_STATUS_BUSY
    assert sorted(worker.held_task_ids) == ["x", "y"]
    stats = daemon.stats()
    assert stats.tasks_by_state["TASK_STATE_IN_PROGRESS"] == 2
    assert stats.tasks_by_state["TASK_STATE_PENDING"] == 1
    assert stats.teammates_by_status["TEAMMATE_STATUS_BUSY"] == 1
    assert stats.open_streams == 1
    assert stats.writer.commits > 0
    owned = daemon.lead.board.ListTasks(pb.ListTasksRequest(owner="worker")).tasks
    assert sorted(t.id for t in owned) == ["x", "y"]
    mate.complete(first)
    mate.complete(second)
    third = stream.next_event("claim")
    assert third.task.id == "z"
    mate.complete(third)
    wait_until(lambda: daemon.teammate("worker").status == pb.TEAMMATE_STATUS_IDLE, what="idle again")
    assert daemon.stats().tasks_by_state["TASK_STATE_COMPLETED"] == 3
    done = daemon.lead.board.ListTasks(pb.ListTasksRequest(states=[pb.TASK_STATE_COMPLETED])).tasks
    assert [t.id for t in done] == ["x", "y", "z"]
    stream.cancel()
    wait_until(lambda: daemon.teammate("worker").status == pb.TEAMMATE_STATUS_OFFLINE, what="offline")
    assert daemon.stats().open_streams == 0


@pytest.mark.timeout(30)
def test_dependency_on_a_completed_task_is_ready_at_once(daemon):
    mate = daemon.add_teammate()
    daemon.create_tasks(spec("old"))
    stream = mate.idle()
    mate.complete(stream.next_event("claim"))
    daemon.create_tasks(spec("new", "old"))
    assert stream.next_event("claim").task.id == "new"
    stream.cancel()
