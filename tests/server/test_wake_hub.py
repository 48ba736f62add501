"""The wake hub: after a commit, exactly the streams that may have work now are woken."""

from __future__ import annotations

import asyncio
import collections
import threading

import pytest

from corrald.model import ClaimEnd, ClaimEndReason
from corrald.stream import Check, Claims, Delivery, Phase
from corrald.txn import Wakes
from corrald.wake import WakeHub
from tests.support.boardkit import claim_grant

pytestmark = pytest.mark.timeout(15)


def run(test):
    """Runs `test(hub, deadlines)` on a fresh loop with a hub bound to it."""

    async def main():
        deadlines: list[int] = []
        hub = WakeHub(asyncio.get_running_loop(), deadlines.append)
        return await test(hub, deadlines)

    return asyncio.run(main())


async def settle():
    """Lets call_soon_threadsafe callbacks run."""
    for _ in range(3):
        await asyncio.sleep(0)


def ready(role: str = "", count: int = 1) -> Wakes:
    return Wakes(ready_roles=collections.Counter({role: count}))


def waiting(*streams) -> None:
    """As its loop puts a new stream to wait: its first turn, then its wait."""
    for stream in streams:
        stream.to(Phase.ACTIVE)
        stream.to(Phase.WAITING)


def test_second_stream_supersedes_the_first():
    async def test(hub, _):
        first = hub.register("w1", ())
        second = hub.register("w1", ())
        assert first.ended and first.superseded and first.event.is_set()
        assert second.ended is None and hub.open_streams == 1
        hub.unregister(first)  # the old stream's cleanup must not drop the new one
        assert hub.is_open("w1")
        hub.unregister(second)
        assert not hub.is_open("w1")

    run(test)


def test_message_wakes_only_its_recipient():
    async def test(hub, _):
        a, b = hub.register("a", ()), hub.register("b", ())
        waiting(a, b)
        hub.post(Wakes(teammates={"a"}))
        await settle()
        assert a.event.is_set() and not b.event.is_set()

    run(test)


def test_ready_tasks_wake_as_many_waiting_streams_as_became_ready():
    async def test(hub, _):
        waiters = [hub.register(f"w{i}", ()) for i in range(5)]
        waiting(*waiters)
        hub.post(ready(count=2))
        await settle()
        assert sum(w.event.is_set() for w in waiters) == 2  # no thundering herd

    run(test)


def test_ready_task_with_a_role_wakes_only_streams_with_that_role():
    async def test(hub, _):
        plain, builder = hub.register("plain", ()), hub.register("builder", ("build",))
        waiting(plain, builder)
        hub.post(ready("build"))
        await settle()
        assert builder.event.is_set() and not plain.event.is_set()

    run(test)


def test_stream_mid_check_is_always_nudged():
    async def test(hub, _):
        busy = hub.register("busy", ())
        busy.to(Phase.ACTIVE)  # checking right now: its check may predate the commit
        busy.claims = Claims.SHUT
        idle = hub.register("idle", ())
        waiting(idle)
        hub.post(ready(count=1))
        await settle()
        assert busy.event.is_set() and idle.event.is_set()

    run(test)


def test_a_stream_woken_only_to_send_what_it_was_handed_still_checks_for_a_task_made_ready():
    async def test(hub, _):
        # Its completion's handoff found nothing and freed its slot (the stream sends what it
        # was handed, without checking); then a commit (another daemon's) makes a task ready.
        stream = hub.register("finisher", ())
        waiting(stream)
        stream.claims = Claims.SHUT
        stream.hand(Delivery([], frozenset(), can_claim=True))
        assert stream.event.is_set() and stream.check_due is Check.NONE
        hub.post(ready(count=1))
        await settle()
        assert stream.check_due is Check.CLAIM, "the task made ready would wait for the poll interval"

    run(test)


def test_full_stream_is_not_counted_against_ready_tasks():
    async def test(hub, _):
        full = hub.register("full", ())
        waiting(full)
        full.claims = Claims.SHUT
        free = hub.register("free", ())
        waiting(free)
        hub.post(ready(count=1))
        await settle()
        assert free.event.is_set() and not full.event.is_set()

    run(test)


def test_removed_teammate_stream_is_ended():
    async def test(hub, _):
        waiter = hub.register("w1", ())
        waiting(waiter)
        hub.post(Wakes(ended={"w1": "removed"}))
        await settle()
        assert waiter.ended == "removed" and waiter.event.is_set() and not waiter.superseded

    run(test)


def test_events_move_the_board_and_deadlines_reach_the_reaper():
    async def test(hub, deadlines):
        moved = hub.board_moved()
        hub.post(Wakes(next_deadline_ms=1234))
        await settle()
        assert deadlines == [1234] and not moved.is_set()
        hub.post(Wakes(events=True))
        await settle()
        assert moved.is_set() and not hub.board_moved().is_set()  # a fresh event for the next change

    run(test)


def test_post_from_the_writer_thread():
    async def test(hub, _):
        waiter = hub.register("w1", ())
        waiting(waiter)
        thread = threading.Thread(target=hub.post, args=(Wakes(teammates={"w1"}),))
        thread.start()
        await asyncio.wait_for(waiter.event.wait(), 5)
        thread.join(5)

    run(test)


def test_post_after_the_loop_closed_is_harmless():
    loop = asyncio.new_event_loop()
    hub = WakeHub(loop, lambda ms: None)
    loop.close()
    hub.post(Wakes(everyone=True))  # must not raise in the writer thread


def test_only_wakes_that_may_lead_to_a_claim_mark_the_stream_claim_likely():
    """An inbox wake-up is answered by a read first; a freed slot, an opened gate or a
    ready task goes straight to the writer (Check.CLAIM)."""

    async def test(hub, _):
        inbox, freed, taker = hub.register("inbox", ()), hub.register("freed", ()), hub.register("taker", ())
        waiting(inbox, freed, taker)
        hub.post(Wakes(teammates={"inbox", "freed"}, may_claim={"freed"}))
        hub.post(ready())
        await settle()
        assert inbox.event.is_set() and inbox.check_due is Check.LOOK
        assert freed.event.is_set() and freed.check_due is Check.CLAIM
        assert taker.event.is_set() and taker.check_due is Check.CLAIM

    run(test)


@pytest.mark.timeout(10)
def test_committed_activity_is_written_on_the_loop_not_the_posting_thread():
    async def main():
        written: list[tuple[list, str]] = []
        hub = WakeHub(
            asyncio.get_running_loop(),
            lambda ms: None,
            on_activity=lambda notes: written.append((list(notes), threading.current_thread().name)),
        )
        wakes = Wakes()
        wakes.note("completed", task="a", teammate="ann")
        poster = threading.Thread(target=hub.post, args=(wakes,), name="writer")
        poster.start()
        poster.join(5)
        await settle()
        return written

    assert asyncio.run(main()) == [([("completed", {"task": "a", "teammate": "ann"})], "MainThread")]


def test_claim_ended_reaches_only_the_holders_open_stream_even_as_it_ends():
    async def test(hub, _):
        held = hub.register("w1", ())
        other = hub.register("w2", ())
        held.mark_sent([claim_grant("dead"), claim_grant("alive")])
        held.mailbox.handoffs.append(claim_grant("dead"))  # handed, not yet sent: it must never go out
        end = ClaimEnd("t", "dead", ClaimEndReason.TEAMMATE_REMOVED, "removed")
        wakes = Wakes(claims_ended={"w1": [end], "w3": [end]}, ended={"w1": "removed"})
        hub.apply(wakes)  # "w3" has no open stream: nothing to tell, nothing fails
        assert held.event.is_set() and held.ended == "removed"
        assert held.take_claims_ended() == [end] and held.take_claims_ended() == []
        assert held.sent_tokens == {"alive"} and held.mailbox.handoffs == []
        assert other.mailbox.notices == [] and not other.event.is_set()

    run(test)


def test_an_output_follower_wakes_for_its_own_claim_alone():
    async def test(hub, _):
        mine, theirs = hub.output_moved(1), hub.output_moved(2)
        assert hub.output_moved(1) is mine, "followers of one claim share its event"
        # Another claim's appends and end, and any commit that names no claim: not woken.
        for wakes in (
            Wakes(output={2}),
            Wakes(events=True),
            Wakes(events=True, output={2, 3}),
            Wakes(teammates={"w1"}, may_claim={"w1"}, ready_roles=collections.Counter({"": 1})),
            Wakes(claims_ended={"w1": [ClaimEnd("b", "tok", ClaimEndReason.TASK_CANCELED, "")]}),
        ):
            hub.apply(wakes)
            assert not mine.is_set(), wakes
            theirs = hub.output_moved(2)  # as its follower takes the event again
        assert hub.output_wakeups == 2, "claim 2's followers, woken twice"
        hub.apply(Wakes(events=True, output={1}))  # its append, or its end
        assert mine.is_set() and hub.output_wakeups == 3
        again = hub.output_moved(1)
        assert again is not mine and not again.is_set(), "a follower that looks again waits for the next"
        hub.apply(Wakes(everyone=True))  # a gap in what was heard of other daemons: all look
        assert again.is_set() and theirs.is_set() and hub.output_wakeups == 5
        last = hub.output_moved(1)
        hub.close("draining")
        assert last.is_set() and hub.closing

    run(test)
