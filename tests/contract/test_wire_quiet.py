"""The quiet window of the contract tests' streams (wire.Stream.expect_quiet) ends only at a
positive marker: silence alone cannot tell "never" from "just after the window", so an item
sent late, before the marker, must fail the window. No daemon: a stream fed by hand."""

from __future__ import annotations

import queue

import pytest

from corral.v1 import corral_pb2 as pb
from tests.support import wait_until

from .wire import Stream


class _Call:
    """A server stream whose items the test sends; `cancel` ends it."""

    def __init__(self) -> None:
        self._items: queue.Queue = queue.Queue()

    def __iter__(self):
        return iter(self._items.get, None)

    def send(self, item: pb.IdleResponse) -> None:
        self._items.put(item)

    def cancel(self) -> None:
        self._items.put(None)


def _claim(task_id: str) -> pb.IdleResponse:
    return pb.IdleResponse(claim=pb.Claim(task=pb.Task(id=task_id)))


def _message(body: str) -> pb.IdleResponse:
    return pb.IdleResponse(message=pb.Message(body=body))


@pytest.fixture
def fed():
    call = _Call()
    stream = Stream(call, "fed")
    yield call, stream
    stream.cancel()


@pytest.mark.timeout(10)
def test_the_marker_that_arrives_next_closes_the_window(fed):
    call, stream = fed
    assert stream.expect_quiet(0.05, then=lambda: call.send(_claim("b")), arrives="claim").task.id == "b"
    assert stream.expect_quiet(0.05, then=lambda: "read") == "read"


@pytest.mark.timeout(10)
def test_an_item_in_the_window_fails_it_before_its_marker(fed):
    call, stream = fed
    call.send(_claim("early"))
    marker_ran = []
    with pytest.raises(AssertionError, match="expected nothing"):
        stream.expect_quiet(0.5, then=lambda: marker_ran.append(True), arrives="claim")
    assert not marker_ran


@pytest.mark.timeout(10)
def test_an_item_sent_after_the_window_and_before_the_marker_fails(fed):
    call, stream = fed

    def late_then_marker() -> None:
        call.send(_claim("late"))
        call.send(_message("marker"))

    with pytest.raises(AssertionError, match="expected message, got claim"):
        stream.expect_quiet(0.05, then=late_then_marker, arrives="message")


@pytest.mark.timeout(10)
def test_an_item_that_arrives_while_the_board_is_read_fails(fed):
    call, stream = fed

    def read_while_a_late_item_arrives() -> str:
        call.send(_claim("late"))
        wait_until(lambda: stream._queue.qsize() == 1, 5, "the late item queued")
        return "read"

    with pytest.raises(AssertionError, match="arrived after the quiet window"):
        stream.expect_quiet(0.05, then=read_while_a_late_item_arrives)


@pytest.mark.timeout(10)
def test_a_marker_read_from_the_stream_must_be_its_first_item(fed):
    call, stream = fed

    def skip_to_the_message() -> pb.IdleResponse:
        call.send(_claim("late"))
        call.send(_message("marker"))
        return stream.next_matching(lambda item: item.HasField("message"), what="the marker")

    with pytest.raises(AssertionError, match="items before the marker"):
        stream.expect_quiet(0.05, then=skip_to_the_message)


@pytest.mark.timeout(10)
def test_a_stream_that_ends_in_the_window_fails_it(fed):
    call, stream = fed
    call.cancel()
    with pytest.raises(AssertionError, match="stream ended"):
        stream.expect_quiet(0.5, then=lambda: None)
