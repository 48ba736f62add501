"""The PostgreSQL server restarted under two daemons of one board while teammates work through
both: writes in flight fail with UNAVAILABLE, never success without a COMMIT; health says
NOT_SERVING while the server is away; both daemons reconnect by themselves; and the clients'
retries (the same request id, the same claim token) then succeed. Every task is completed
once, and the reliability suite's history checker finds every invariant kept.

The test runs a server of its own (`ThrowawayServer`): the server the other tests share is
never stopped."""

from __future__ import annotations

import collections
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from corral.v1 import corral_pb2 as pb
from tests.contract.wire import Client, Daemon, rpc_error, spec
from tests.reliability.rel_history import Recorder, check
from tests.support import wait_until

from .team import Worker

pytestmark = pytest.mark.timeout(150)

TASKS = 300
LATE = 20  # the last tasks, asked for while the server is down and again once it is back
LEASE_S = 30.0  # every completion sent again after the restart comes within its claim's lease
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _health(daemon: Daemon) -> int:
    return health_pb2_grpc.HealthStub(daemon.channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status


def _serving_again(daemon: Daemon) -> bool:
    """Health SERVING (the listener is back), and a read of the board answered."""
    return _health(daemon) == SERVING and daemon.stats().postgres.listener_connected


def _hold_a_claim(a: Daemon, b: Daemon, recorder: Recorder) -> tuple[Client, pb.Claim]:
    """A claim the test holds itself (on a task only its holder may take), to complete by hand."""
    holder = a.add_teammate("holder", roles=["holder"])
    a.create_tasks(spec("held", lease=LEASE_S, required_role="holder"))
    stream = b.client(holder.token, "holder").idle()
    held = stream.next_event("claim")
    recorder.claim("holder", held, stream=1)
    stream.cancel()
    return holder, held


def _complete(client: Client, held: pb.Claim, recorder: Recorder) -> pb.CompleteTaskResponse | grpc.RpcError:
    """The held claim's completion, recorded as the workers record theirs; its answer or error."""
    request = pb.CompleteTaskRequest(task_id=held.task.id, claim_token=held.claim_token, result=b"held")
    record = recorder.begin("complete", client.name, held.task.id, held.claim_token)
    try:
        done = client.teammate.CompleteTask(request)
    except grpc.RpcError as error:
        recorder.end(record, "error", code=error.code().name)
        return error
    recorder.end(record, "ok", result=done.task.result.hex())
    return done


def test_a_server_restarted_mid_run_loses_no_write_and_every_retry_then_succeeds(own_server, own_board):
    server, board = own_server, own_board
    a, b = board.daemon("a"), board.daemon("b")
    recorder = Recorder()
    holder, held = _hold_a_claim(a, b, recorder)
    stop = threading.Event()
    deadline = time.monotonic() + 120
    workers = []
    for index in range(8):
        mate = a.add_teammate(f"r{index}")
        daemons = [a, b] if index % 2 else [b, a]
        workers.append(Worker(mate.name, mate.token, daemons, recorder, stop, deadline, resend=True))
    for worker in workers:
        worker.start()
    a.create_tasks(*(spec(f"r{i}", lease=LEASE_S) for i in range(TASKS - LATE)), request_id="early")
    late = [spec(f"r{i}", lease=LEASE_S) for i in range(TASKS - LATE, TASKS)]
    wait_until(lambda: sum(w.completed for w in workers) >= 60, 60, "60 tasks completed")

    server.stop("fast")
    recorder.note("server_stopped")  # not "restart": to the checker that is a daemon's, which extends leases
    for daemon in (a, b):
        wait_until(lambda daemon=daemon: _health(daemon) == NOT_SERVING, 10, "health NOT_SERVING while it is down")
    refused = rpc_error(a.create_tasks, *late, request_id="late")
    assert refused.code() == grpc.StatusCode.UNAVAILABLE, refused
    refused = _complete(a.client(holder.token, "holder"), held, recorder)
    assert isinstance(refused, grpc.RpcError) and refused.code() == grpc.StatusCode.UNAVAILABLE, refused

    server.start()
    recorder.note("server_started")
    for daemon in (a, b):
        wait_until(lambda daemon=daemon: _serving_again(daemon), 30, "health SERVING and reads answered again")
    # The same requests again, through either daemon: each applied once.
    assert [t.id for t in a.create_tasks(*late, request_id="late")] == [s.id for s in late]
    assert [t.id for t in b.create_tasks(*late, request_id="late")] == [s.id for s in late]
    done = _complete(b.client(holder.token, "holder"), held, recorder)
    assert isinstance(done, pb.CompleteTaskResponse) and done.task.state == pb.TASK_STATE_COMPLETED, done

    everything = TASKS + 1
    wait_until(
        lambda: b.stats().tasks_by_state.get("TASK_STATE_COMPLETED", 0) == everything, 60, "every task completed"
    )
    stop.set()
    for worker in workers:
        worker.join(15)
    assert [e for w in workers for e in w.errors] == []
    assert [w.mate for w in workers if w.unanswered is not None] == [], "a completion left unanswered"
    # A completion refused was refused UNAVAILABLE, and sent again with its token it succeeded.
    completions = [e for e in recorder.events if e["kind"] == "complete"]
    assert {e["code"] for e in completions if e["outcome"] != "ok"} <= {"UNAVAILABLE"}
    succeeded = {e["token"] for e in completions if e["outcome"] == "ok"}
    assert {e["token"] for e in completions if e["outcome"] != "ok"} <= succeeded
    # Every task once, completed once; no acknowledged write lost, no invariant broken.
    assert board.sql("SELECT count(*) FROM tasks") == [(everything,)]
    completed = collections.Counter(
        row[0] for row in board.sql("SELECT task_seq FROM claims WHERE outcome = %s", ("completed",))
    )
    assert len(completed) == everything and set(completed.values()) == {1}
    with board.connection() as conn:
        _, violations = check(recorder.events, conn)
    assert violations == [], violations[:10]
    for daemon in (a, b):
        postgres = daemon.stats().postgres
        assert postgres.listener_connected and postgres.listener_reconnects >= 1, postgres
