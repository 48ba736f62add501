"""Large payloads and results at the §7 limits, seen by clients with gRPC's
default 4 MiB receive limit (the default of every standard gRPC library); the
daemon's own receive limit (6 MiB a message, corrald.config.MESSAGE_MAX_BYTES)
holds the largest request the limits admit and refuses a bigger one unread."""

from __future__ import annotations

import contextlib

import grpc
import pytest

from corral.v1 import corral_pb2 as pb

from .wire import Client, assert_status, rpc_error, spec

MIB = 1024 * 1024
MESSAGE_MAX_BYTES = 6 * MIB  # the daemon's (corrald.config), as a client must know it


@contextlib.contextmanager
def wide_lead(daemon):
    """The lead over a channel that accepts any response size (to look behind a failed call)."""
    channel = grpc.insecure_channel(daemon.address, options=[("grpc.max_receive_message_length", 512 * MIB)])
    try:
        yield Client(channel, daemon.lead_token, "lead")
    finally:
        channel.close()


@pytest.mark.timeout(30)
def test_a_one_mib_payload_and_result_round_trip(daemon):
    mate = daemon.add_teammate()
    payload, result = bytes(range(256)) * (MIB // 256), b"r" * MIB
    daemon.create_tasks(spec("big", payload=payload))
    stream = mate.idle()
    claim = stream.next_event("claim")
    assert claim.task.payload == payload
    done = mate.complete(claim, result)
    assert done.result == result and done.payload == payload
    assert daemon.get_task("big").result == result
    stream.cancel()


@pytest.mark.timeout(30)
def test_creating_tasks_with_large_payloads_is_answered_within_the_default_limit(daemon):
    specs = [spec(f"big-{i}", payload=b"\x01" * MIB) for i in range(5)]  # each within §7, batch within §7
    try:
        created = daemon.create_tasks(*specs, request_id="big-batch")
    except grpc.RpcError as error:
        with wide_lead(daemon) as lead:
            stored = [t.id for t in lead.board.ListTasks(pb.ListTasksRequest()).tasks]
        pytest.fail(
            f"CreateTasks failed with {error.code().name} ({error.details()}) although it committed {len(stored)} tasks"
        )
    assert [t.id for t in created] == [s.id for s in specs]


@pytest.mark.timeout(30)
def test_list_tasks_pages_fit_the_default_message_limit(daemon):
    with wide_lead(daemon) as lead:
        for i in range(5):
            lead.lead.CreateTasks(pb.CreateTasksRequest(tasks=[spec(f"big-{i}", payload=b"\x02" * MIB)]))
    seen, token = [], ""
    for _ in range(10):
        page = daemon.lead.board.ListTasks(pb.ListTasksRequest(page_token=token))
        seen.extend(t.id for t in page.tasks)
        token = page.next_page_token
        if not token:
            break
    assert seen == [f"big-{i}" for i in range(5)]


@pytest.mark.timeout(30)
def test_a_request_over_the_daemons_limit_is_refused_and_nothing_is_written(daemon):
    specs = [spec(f"big-{i}", payload=b"\x03" * MIB) for i in range(6)]  # each within §7, together over 6 MiB
    request = pb.CreateTasksRequest(tasks=specs, request_id="too-big")
    assert request.ByteSize() > MESSAGE_MAX_BYTES
    error = rpc_error(daemon.lead.lead.CreateTasks, request)
    assert_status(error, grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert "larger than max" in error.details()
    assert daemon.all_tasks() == []
    # The same tasks in two requests within the limit: the request id of the refused one was never used.
    daemon.create_tasks(*specs[:3], request_id="too-big")
    daemon.create_tasks(*specs[3:])
    assert [t.id for t in daemon.all_tasks()] == [s.id for s in specs]


@pytest.mark.timeout(30)
def test_a_completion_over_the_limit_is_refused_and_the_claim_stays_as_it_was(daemon):
    mate = daemon.add_teammate()
    daemon.create_tasks(spec("t"))
    stream = mate.idle()
    claim = stream.next_event("claim")
    too_big = pb.CompleteTaskRequest(task_id="t", claim_token=claim.claim_token, result=b"r" * MESSAGE_MAX_BYTES)
    assert_status(rpc_error(mate.teammate.CompleteTask, too_big), grpc.StatusCode.RESOURCE_EXHAUSTED)
    held = daemon.get_task("t")
    assert held.state == pb.TASK_STATE_IN_PROGRESS and held.result == b"" and held.owner == mate.name
    assert mate.complete(claim, b"r" * MIB).state == pb.TASK_STATE_COMPLETED  # within §7, and within the limit
    stream.cancel()


@pytest.mark.timeout(30)
def test_a_session_message_over_the_limit_ends_the_stream_and_writes_nothing(daemon):
    mate = daemon.add_teammate()
    daemon.create_tasks(spec("t"))
    session = mate.session()
    claim = session.next_event("claim")
    session.send(
        pb.SessionRequest(
            op_id="big",
            complete=pb.CompleteTaskRequest(
                task_id="t", claim_token=claim.claim_token, result=b"r" * MESSAGE_MAX_BYTES
            ),
        )
    )
    code, details = session.wait_end(timeout=10)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details
    held = daemon.get_task("t")
    assert held.state == pb.TASK_STATE_IN_PROGRESS and held.result == b"" and held.owner == mate.name
    # A new stream hands the held claim again, and a completion within the limit is taken.
    again = mate.session()
    assert again.next_event("claim").claim_token == claim.claim_token
    assert again.complete(claim, b"r" * MIB).op_result.task.state == pb.TASK_STATE_COMPLETED
    again.cancel()


@pytest.mark.timeout(30)
def test_the_largest_legal_request_reaches_its_handler(daemon):
    """10,000 ids of 128 four-byte characters (4.9 MiB): answered by CancelTasks, not refused for its size."""
    ids = [chr(0x20000 + i) + "\U0001d11e" * 127 for i in range(10_000)]
    request = pb.CancelTasksRequest(ids=ids)
    assert 4 * MIB < request.ByteSize() <= MESSAGE_MAX_BYTES
    assert_status(rpc_error(daemon.lead.lead.CancelTasks, request), grpc.StatusCode.NOT_FOUND)
