"""SIGTERM: stop accepting, end streams, drain, checkpoint, exit 0 within 5 s (design §6)."""

from __future__ import annotations

import signal
import time

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.support import STOP_TIMEOUT_S, wait_until

from .wire import assert_status, rpc_error, spec, status_details

STREAM_END_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.OK)


@pytest.mark.timeout(60)
def test_sigterm_with_open_streams_exits_zero_and_leaves_a_clean_state_dir(corrald):
    daemon = corrald()
    holder = daemon.add_teammate("holder")
    daemon.create_tasks(spec("held"), spec("waiting", "held"))
    holder_stream = holder.idle()
    claim = holder_stream.next_event("claim")
    idlers = [daemon.add_teammate(f"idle{i}").idle() for i in range(8)]
    watch = daemon.watch(0)
    watch.next(5)
    daemon.wait_open_streams(9)
    socket = daemon.state_dir / "corral.sock"
    assert socket.exists()

    code, took = daemon.terminate()
    assert code is not None, f"corrald did not exit within {STOP_TIMEOUT_S}s of SIGTERM\n{daemon.stderr_tail()}"
    assert code == 0, f"exit code {code}\n{daemon.stderr_tail()}"
    assert took < STOP_TIMEOUT_S
    for stream in [holder_stream, *idlers, watch]:
        end, details = stream.wait_end(5)
        assert end in STREAM_END_CODES, f"{stream.label} ended with {end}: {details}"
    assert not socket.exists(), "the socket file must be removed on SIGTERM"
    wal = daemon.state_dir / "corral.sqlite3-wal"  # absent on PostgreSQL
    assert not wal.exists() or wal.stat().st_size == 0, f"WAL left with {wal.stat().st_size} bytes"

    # The next daemon finds everything, including the claim, which is re-sent unchanged.
    again = corrald(daemon.state_dir)
    assert again.get_task("held").state == pb.TASK_STATE_IN_PROGRESS
    assert again.get_task("waiting").state == pb.TASK_STATE_PENDING
    resumed = again.client(holder.token, "holder").idle()
    resent = resumed.next_event("claim")
    assert (resent.task.id, resent.claim_token, resent.attempt, resent.fence) == (
        claim.task.id,
        claim.claim_token,
        claim.attempt,
        claim.fence,
    )
    resumed.cancel()


@pytest.mark.timeout(30)
def test_sigterm_on_an_idle_daemon(corrald):
    daemon = corrald()
    code, took = daemon.terminate()
    assert code == 0 and took < STOP_TIMEOUT_S, (code, took, daemon.stderr_tail())
    assert not (daemon.state_dir / "corral.sock").exists()
    wal = daemon.state_dir / "corral.sqlite3-wal"
    assert not wal.exists() or wal.stat().st_size == 0


# A job of caller `slow` holds the writer this long (longer than the server's stop grace, 2 s);
# SIGTERM comes while it runs.
LONG_JOB_MS = 3000


@pytest.mark.timeout(90)
def test_sigterm_during_a_long_job_answers_every_write_with_what_the_restart_finds(corrald):
    """The batch that is running commits and is answered OK; every write still queued is answered
    UNAVAILABLE with ErrorInfo and is not stored; a call made while draining is refused and not stored."""
    daemon = corrald()
    workers = [daemon.add_teammate(f"worker{i}") for i in range(5)]
    daemon.create_tasks(*(spec(f"job{i}") for i in range(len(workers))))
    claims = {}
    for worker in workers:
        stream = worker.idle()
        claims[worker.name] = stream.next_event("claim")
        stream.cancel()
    slow = daemon.add_teammate("slow")
    reader = daemon.add_teammate("reader")
    code, _ = daemon.terminate()
    assert code == 0, daemon.stderr_tail()

    daemon = corrald(daemon.state_dir, failpoints=f"job:slow=sleep:{LONG_JOB_MS}:1")
    slow, reader = daemon.client(slow.token, "slow"), daemon.client(reader.token, "reader")
    workers = [daemon.client(worker.token, worker.name) for worker in workers]
    long_write = slow.board.SendMessage.future(pb.SendMessageRequest(to="reader", body="long"))
    wait_until(lambda: "failpoint: sleeping" in daemon.latest_log(), 10, "the long job to start")

    # What each write stores when it succeeds: (what, how to find it after the restart).
    writes: list[tuple[str, grpc.Future]] = [("message long", long_write)]
    for i in range(4):
        request = pb.SendMessageRequest(to="reader", body=f"queued{i}")
        writes.append((f"message queued{i}", daemon.lead.board.SendMessage.future(request)))
        batch = pb.CreateTasksRequest(tasks=[spec(f"new{i}")])
        writes.append((f"task new{i}", daemon.lead.lead.CreateTasks.future(batch)))
    for worker in workers:
        claim = claims[worker.name]
        request = pb.CompleteTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token, result=b"r")
        writes.append((f"completed {claim.task.id}", worker.teammate.CompleteTask.future(request)))
    queued = len(writes) - 1
    wait_until(lambda: daemon.stats().writer.queue_depth == queued, 10, f"{queued} writes queued")

    daemon.process.send_signal(signal.SIGTERM)
    started = time.monotonic()
    late = rpc_error(daemon.lead.board.SendMessage, pb.SendMessageRequest(to="reader", body="late"))
    outcomes = {}
    for what, future in writes:
        try:
            future.result(10)
            outcomes[what] = grpc.StatusCode.OK
        except grpc.RpcError as error:
            assert_status(error, grpc.StatusCode.UNAVAILABLE, reason="UNAVAILABLE")
            outcomes[what] = error.code()
    code = daemon.wait_exit(STOP_TIMEOUT_S)
    took = time.monotonic() - started
    assert code == 0, f"exit {code} after {took:.1f}s\n{daemon.stderr_tail()}"
    assert took < STOP_TIMEOUT_S
    # A call sent as the GOAWAY goes out is refused by gRPC (CANCELLED by the
    # server's core, or UNAVAILABLE when the client finds no listener) or, had it
    # arrived first, by the daemon with its ErrorInfo; it is never applied (below).
    assert late.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE), late
    if status_details(late):
        assert_status(late, grpc.StatusCode.UNAVAILABLE, reason="UNAVAILABLE")
    assert outcomes["message long"] == grpc.StatusCode.OK, outcomes  # it was running: it finishes
    assert list(outcomes.values()).count(grpc.StatusCode.UNAVAILABLE) == queued, outcomes

    again = corrald(daemon.state_dir)
    stored = {f"task {task.id}" for task in again.all_tasks()}
    stored |= {f"completed {task.id}" for task in again.all_tasks() if task.state == pb.TASK_STATE_COMPLETED}
    inbox = again.client(reader.token, "reader").idle()
    stored |= {f"message {message.body}" for message in _messages_until_quiet(inbox)}
    inbox.cancel()
    found = {what: what in stored for what in outcomes}
    assert found == {what: code == grpc.StatusCode.OK for what, code in outcomes.items()}
    assert "message late" not in stored


def _messages_until_quiet(stream, quiet_s: float = 1.0) -> list:
    """The messages a new Idle stream sends at once (all of the inbox, in one check)."""
    messages = []
    while (item := stream.try_next(quiet_s)) is not None:
        if item.WhichOneof("event") == "message":
            messages.append(item.message)
    return messages
