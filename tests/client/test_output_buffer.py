"""A claim's output buffer (corral._outputbuffer), with time passed in: batches are due
200 ms after their first byte, at once at 32 KiB or when a flush is asked, and go in
pieces of at most 64 KiB; past 1 MiB waiting, writes are dropped until the next batch,
which says how many bytes were; a stopped buffer takes nothing."""

from __future__ import annotations

import pytest

from corral._outputbuffer import (
    APPEND_MAX_BYTES,
    BUFFER_MAX_BYTES,
    FLUSH_BYTES,
    FLUSH_SECONDS,
    OutputBuffer,
    dropped_notice,
)
from tests.support import SecondsClock

pytestmark = pytest.mark.timeout(10)

KIB = 1024


def test_the_limits_are_the_documented_ones() -> None:
    assert (FLUSH_SECONDS, FLUSH_BYTES, APPEND_MAX_BYTES, BUFFER_MAX_BYTES) == (0.2, 32 * KIB, 64 * KIB, 1024 * KIB)


def test_small_writes_wait_for_the_batch_timer_started_by_the_first_byte() -> None:
    clock, buffer = SecondsClock(), OutputBuffer()
    start = clock()
    assert buffer.seconds_until_due(clock()) is None
    assert buffer.write(b"one ", clock()) is True  # the first byte starts the timer: look now
    clock.now += 0.15
    assert buffer.write(b"two ", clock()) is False  # nothing new for the flusher
    assert buffer.take(clock()) == ([], [])
    assert buffer.seconds_until_due(clock()) == pytest.approx(0.05)
    clock.now = start + FLUSH_SECONDS
    assert buffer.take(clock()) == ([b"one two "], [])
    assert buffer.seconds_until_due(clock()) is None
    clock.now += 0.01
    buffer.write(b"three", clock())  # a new batch: its own 200 ms from now
    assert buffer.seconds_until_due(clock()) == pytest.approx(FLUSH_SECONDS)


def test_32_kib_waiting_are_due_at_once_and_a_batch_goes_in_pieces_of_at_most_64_kib() -> None:
    clock, buffer = SecondsClock(), OutputBuffer()
    buffer.write(b"a" * (FLUSH_BYTES - 1), clock())
    assert buffer.seconds_until_due(clock()) == pytest.approx(FLUSH_SECONDS)
    assert buffer.write(b"b", clock()) is True
    assert buffer.seconds_until_due(clock()) == 0.0
    buffer.write(b"c" * (150 * KIB), clock())
    pieces, _ = buffer.take(clock())
    assert [len(piece) for piece in pieces] == [APPEND_MAX_BYTES, APPEND_MAX_BYTES, FLUSH_BYTES + 150 * KIB - 128 * KIB]
    assert b"".join(pieces) == b"a" * (FLUSH_BYTES - 1) + b"b" + b"c" * (150 * KIB)


def test_a_flush_makes_the_batch_due_now_and_is_settled_with_it() -> None:
    clock, buffer = SecondsClock(), OutputBuffer()
    assert buffer.ask_flush("waiter-0") is False  # nothing to send: nothing to wait for
    buffer.write(b"x", clock())
    assert buffer.ask_flush("waiter-1") is True
    assert buffer.seconds_until_due(clock()) == 0.0
    assert buffer.take(clock()) == ([b"x"], ["waiter-1"])


def test_past_the_bound_writes_are_dropped_until_the_next_batch_which_says_so() -> None:
    clock, buffer = SecondsClock(), OutputBuffer()
    buffer.write(b"k" * (BUFFER_MAX_BYTES - 10), clock())
    assert buffer.write(b"d" * 11, clock()) is True  # the first dropped write: the notice is due
    buffer.write(b"e", clock())  # it would fit, but follows a dropped write: dropped too, order kept
    pieces, _ = buffer.take(clock())
    taken = b"".join(pieces)
    assert taken == b"k" * (BUFFER_MAX_BYTES - 10) + dropped_notice(12)
    assert b"12 bytes of output dropped" in dropped_notice(12)
    assert buffer.write(b"after", clock()) is True  # room again
    clock.now += FLUSH_SECONDS
    assert buffer.take(clock())[0] == [b"after"]


def test_a_write_bigger_than_the_bound_is_dropped_whole_and_said_at_once() -> None:
    clock, buffer = SecondsClock(), OutputBuffer()
    assert buffer.write(b"z" * (BUFFER_MAX_BYTES + 1), clock()) is True
    assert buffer.take(clock())[0] == [dropped_notice(BUFFER_MAX_BYTES + 1)]


def test_a_stopped_buffer_takes_nothing_and_hands_its_waiters_over() -> None:
    clock, buffer = SecondsClock(), OutputBuffer()
    buffer.write(b"lost", clock())
    assert buffer.ask_flush("waiter")
    buffer.stop()
    assert buffer.stopped
    assert buffer.write(b"more", clock()) is False
    assert buffer.ask_flush("late") is False
    assert buffer.take(clock() + 1) == ([], [])
    assert buffer.drain_waiters() == ["waiter"] and buffer.drain_waiters() == []


def test_a_flush_asked_while_a_batch_is_on_its_way_waits_for_that_batch() -> None:
    buffer = OutputBuffer()
    buffer.write(b"last line\n", 0.0)
    pieces, waiters = buffer.take(FLUSH_SECONDS)
    assert pieces == [b"last line\n"] and waiters == []
    # Nothing is buffered now, but the batch is not sent: a flush (before the claim
    # finishes) must wait for it, not return ahead of it.
    assert buffer.ask_flush("before-finish")
    assert buffer.sent() == ["before-finish"]
    assert not buffer.ask_flush("after"), "nothing buffered or on its way"


def test_a_flush_asked_during_a_send_with_more_written_is_settled_by_the_next_batch() -> None:
    buffer = OutputBuffer()
    buffer.write(b"one\n", 0.0)
    buffer.take(FLUSH_SECONDS)
    buffer.write(b"two\n", 0.1)
    assert buffer.ask_flush("waiter")
    assert buffer.sent() == [], "what was written after the batch is not sent yet"
    assert buffer.seconds_until_due(0.1) == 0.0
    assert buffer.take(0.1) == ([b"two\n"], ["waiter"])
