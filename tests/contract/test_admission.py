"""Per-identity limits (issue: one identity must not starve the others): a caller past its
running and waiting limits is refused with RESOURCE_EXHAUSTED / OVERLOADED + RetryInfo,
nothing is written for a refused call, and other identities are not held up."""

from __future__ import annotations

import concurrent.futures

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.support import wait_until

from .wire import assert_status, rpc_error, spec

BURST = 200


@pytest.mark.timeout(60)
def test_calls_past_one_identitys_limits_are_refused_and_write_nothing(corrald):
    daemon = corrald(extra_args=["--calls-per-identity", "1", "--waiting-per-identity", "0"])
    lead = daemon.lead.lead
    # The lead's writes race for its one place; the losers are refused at once.
    futures = [lead.CreateTasks.future(pb.CreateTasksRequest(tasks=[spec(f"t{i}")])) for i in range(BURST)]
    created, refusals = set(), []
    for i, future in enumerate(futures):
        try:
            assert [t.id for t in future.result(timeout=30).tasks] == [f"t{i}"]
            created.add(f"t{i}")
        except grpc.RpcError as error:
            refusals.append(error)
    assert refusals, f"{BURST} concurrent calls never exceeded a limit of one running call"
    for error in refusals:
        found = assert_status(error, grpc.StatusCode.RESOURCE_EXHAUSTED, reason="OVERLOADED")
        retry = found.get("retry_info")
        assert retry is not None and (retry.retry_delay.seconds or retry.retry_delay.nanos), "no RetryInfo delay"
    assert {t.id for t in daemon.all_tasks()} == created  # a refused call wrote nothing
    stats = daemon.stats()
    assert stats.refused_calls == len(refusals)
    assert stats.writer.refused_jobs == 0  # the writer itself was never full


@pytest.mark.timeout(60)
def test_a_flooding_identity_does_not_hold_up_another(corrald):
    daemon = corrald(extra_args=["--calls-per-identity", "1", "--waiting-per-identity", "0"])
    hog, calm = daemon.add_teammate("hog"), daemon.add_teammate("calm")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        flood = [pool.submit(_send_until_refused, hog) for _ in range(8)]
        # While the hog is being refused, the calm teammate's every call succeeds.
        for i in range(20):
            assert list(calm.board.SendMessage(pb.SendMessageRequest(to="lead", body=f"calm {i}")).recipients) == [
                "lead"
            ]
        hog_refused = sum(f.result(timeout=30) for f in flood)
    assert hog_refused > 0


def _send_until_refused(client, attempts: int = 200) -> int:
    for i in range(attempts):
        try:
            client.board.SendMessage(pb.SendMessageRequest(to="lead", body=f"flood {i}"))
        except grpc.RpcError as error:
            assert_status(error, grpc.StatusCode.RESOURCE_EXHAUSTED, reason="OVERLOADED")
            return 1
    return 0


@pytest.mark.timeout(60)
def test_streams_past_the_limit_wait_for_a_place_then_are_refused(corrald):
    daemon = corrald(extra_args=["--streams-per-identity", "1", "--waiting-per-identity", "1"])
    daemon.create_tasks(spec("a"))  # something for the Watch feed to send
    first = daemon.watch(0)
    first.next(5)  # the first stream holds the lead's one stream place
    second = daemon.watch(0)  # waits in line (the waiting limit is one)
    # The second still waits in line: a third finds no room there and is refused at once.
    code, details = second.expect_quiet(0.3, then=lambda: daemon.watch(0).wait_end(5))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details
    # Another identity's stream is not affected by the lead's limit.
    mate = daemon.add_teammate("mate")
    idle = mate.idle()
    assert idle.next_event("claim").task.id == "a"
    idle.cancel()
    # The first stream ends; the waiting one takes its place and is served.
    first.cancel()
    assert second.next(5).seq >= 1
    second.cancel()
    assert daemon.stats().refused_calls == 1


@pytest.mark.timeout(60)
def test_a_refused_call_is_answered_without_parsing_its_request(corrald):
    """The waiting line sits before parsing: a malformed request from a caller at its limit is
    refused for the limit; once a place is free the same bytes get INVALID_ARGUMENT."""
    daemon = corrald(extra_args=["--streams-per-identity", "1", "--waiting-per-identity", "0"])
    daemon.create_tasks(spec("a"))
    holder = daemon.watch(0)
    holder.next(5)
    raw = daemon.channel.unary_stream("/corral.v1.LeadService/Watch")
    metadata = daemon.lead.metadata
    refused = rpc_error(lambda: list(raw(b"\xff\xff\xff", metadata=metadata, timeout=5)))
    assert_status(refused, grpc.StatusCode.RESOURCE_EXHAUSTED, reason="OVERLOADED")
    holder.cancel()  # the place frees once the daemon sees the stream end

    def parsed_and_refused() -> bool:
        error = rpc_error(lambda: list(raw(b"\xff\xff\xff", metadata=metadata, timeout=5)))
        if error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return False
        assert_status(error, grpc.StatusCode.INVALID_ARGUMENT)
        return True

    wait_until(parsed_and_refused, timeout=5, what="the malformed request to reach the parser")


@pytest.mark.timeout(60)
def test_a_waiting_call_is_refused_before_its_deadline_not_left_to_time_out(corrald):
    """A call waits for a place for at most three quarters of its deadline, then hears
    OVERLOADED with RetryInfo: the caller learns when to come back, not just that time ran out."""
    daemon = corrald(extra_args=["--streams-per-identity", "1"])
    daemon.create_tasks(spec("a"))
    holder = daemon.watch(0)
    holder.next(5)  # holds the lead's one stream place; the default wait is far longer than 1 s
    raw = daemon.channel.unary_stream("/corral.v1.LeadService/Watch")
    request = pb.WatchRequest().SerializeToString()
    refused = rpc_error(lambda: list(raw(request, metadata=daemon.lead.metadata, timeout=1.0)))
    found = assert_status(refused, grpc.StatusCode.RESOURCE_EXHAUSTED, reason="OVERLOADED")
    assert found.get("retry_info") is not None
    holder.cancel()
    assert daemon.stats().refused_calls == 1
