"""Back-pressure (design §4 errors, §7): a full inbox is RESOURCE_EXHAUSTED /
OVERLOADED with RetryInfo, writes nothing, and acknowledging makes room."""

from __future__ import annotations

import collections

import grpc
import pytest

from corral.v1 import corral_pb2 as pb

from .wire import assert_status, rpc_error

UNACKED_INBOX_MAX = 10_000  # design §7


@pytest.mark.timeout(60)
def test_a_full_inbox_refuses_with_overloaded_and_retry_info(daemon):
    mate = daemon.add_teammate("swamped")
    in_flight: collections.deque = collections.deque()
    for i in range(UNACKED_INBOX_MAX):
        in_flight.append(daemon.lead.board.SendMessage.future(pb.SendMessageRequest(to="swamped", body=f"m{i}")))
        if len(in_flight) > 200:
            in_flight.popleft().result()
    while in_flight:
        in_flight.popleft().result()

    error = rpc_error(daemon.lead.board.SendMessage, pb.SendMessageRequest(to="swamped", body="one too many"))
    found = assert_status(error, grpc.StatusCode.RESOURCE_EXHAUSTED, reason="OVERLOADED")
    retry = found.get("retry_info")
    assert retry is not None, "OVERLOADED without google.rpc.RetryInfo"
    assert retry.retry_delay.seconds > 0 or retry.retry_delay.nanos > 0
    # A broadcast cannot slip past the limit either, and a refused broadcast writes nothing.
    other = daemon.add_teammate("other")
    assert_status(
        rpc_error(daemon.lead.board.SendMessage, pb.SendMessageRequest(to="*", body="all")),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        reason="OVERLOADED",
    )
    quiet = other.idle()
    after = pb.SendMessageRequest(to="other", body="after")  # the first message in its inbox
    assert quiet.expect_quiet(0.3, then=lambda: daemon.lead.board.SendMessage(after), arrives="message").body == "after"
    quiet.cancel()

    stream = mate.idle()
    first = stream.next_event("message")
    assert first.body == "m0"
    mate.ack(first.seq)  # room for exactly one more
    last = daemon.lead.board.SendMessage(pb.SendMessageRequest(to="swamped", body="fits now")).recipients
    assert list(last) == ["swamped"]
    assert_status(
        rpc_error(daemon.lead.board.SendMessage, pb.SendMessageRequest(to="swamped", body="full again")),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        reason="OVERLOADED",
    )
    # Control is never refused for a full inbox: shutdown is never starved.
    request_id = daemon.lead.lead.RequestShutdown(pb.RequestShutdownRequest(name="swamped")).request_id
    assert request_id
    assert daemon.teammate("swamped").status == pb.TEAMMATE_STATUS_SHUTTING_DOWN
    stream.cancel()
