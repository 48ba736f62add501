"""Large payloads and results at the §7 limits, seen by clients with gRPC's
default 4 MiB receive limit (the default of every standard gRPC library)."""

from __future__ import annotations

import contextlib

import grpc
import pytest

from corral.v1 import corral_pb2 as pb

from .wire import Client, spec

MIB = 1024 * 1024


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
