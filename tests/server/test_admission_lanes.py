"""Per-identity admission lanes (overload/lanes.py): bounded running and waiting calls per
identity, first come first served, no place lost when a waiting caller gives up, no free place
left idle unless pacing holds it back, and a waiting call refused while its deadline still leaves
time to run it."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corrald import errors
from corrald.overload.lanes import CallLanes, LaneConfig
from corrald.overload.pacing import Pacer, PacingConfig
from tests.support import wait_until_async
from tests.support.boardkit import SecondsClock

RUNNING, WAITING, TOTAL = 1, 2, 3
NO_EXPIRY = LaneConfig(
    calls_per_identity=RUNNING,
    waiting_per_identity=WAITING,
    waiting_total=TOTAL,
    wait_ms=3_600_000,
    pacing=PacingConfig(slack=0),
)
# Busy for 2 ms after another caller's start, on the fake clock; held lanes are looked at
# again every 2 ms of real time. A slack below 1 holds back even teammates of equal load,
# so that short scripts reach the held paths often.
PACING = PacingConfig(slack=0.5, busy_window_ms=2)


async def _settle() -> None:
    """Lets every ready callback run (no wall-clock waiting)."""
    for _ in range(5):
        await asyncio.sleep(0)


@dataclasses.dataclass
class _Call:
    identity: str
    task: asyncio.Task
    order: int
    left: bool = False


class _Model:
    """Drives a CallLanes with tasks and checks its promises after every step."""

    def __init__(self, admission: CallLanes, pacer: Pacer | None = None) -> None:
        self.admission = admission
        self.pacer = pacer
        self.calls: list[_Call] = []
        self.grant_order: dict[str, list[int]] = {}

    async def enter(self, identity: str) -> None:
        waiting_before = self.waiting(identity)
        total_before = sum(self.waiting(i) for i in self.identities())
        running_before = self.running(identity)
        call = _Call(identity, asyncio.ensure_future(self.admission.enter(identity, "write")), len(self.calls))
        call.task.add_done_callback(lambda t, c=call: self._granted(c))
        self.calls.append(call)
        await _settle()
        refused = call.task.done() and isinstance(call.task.exception(), errors.Overloaded)
        line_full = waiting_before >= WAITING or total_before >= TOTAL
        place_free = running_before < RUNNING and waiting_before == 0
        # Pacing may hold back a call that finds a free place, but never refuses one.
        assert refused == (line_full and not place_free), (refused, running_before, waiting_before, total_before)
        if refused:
            assert call.task.exception().retry_after_ms > 0

    def _granted(self, call: _Call) -> None:
        if not call.task.cancelled() and call.task.exception() is None:
            self.grant_order.setdefault(call.identity, []).append(call.order)

    async def leave(self, pick: int) -> None:
        holding = [c for c in self.calls if self.is_running(c)]
        if holding:
            call = holding[pick % len(holding)]
            call.left = True
            self.admission.leave(call.identity, "write")
            await _settle()

    async def cancel(self, pick: int) -> None:
        waiting = [c for c in self.calls if not c.task.done()]
        if waiting:
            waiting[pick % len(waiting)].task.cancel()
            await _settle()

    def is_running(self, call: _Call) -> bool:
        return call.task.done() and not call.task.cancelled() and call.task.exception() is None and not call.left

    def running(self, identity: str) -> int:
        return sum(1 for c in self.calls if c.identity == identity and self.is_running(c))

    def waiting(self, identity: str) -> int:
        return sum(1 for c in self.calls if c.identity == identity and not c.task.done())

    def identities(self) -> set[str]:
        return {c.identity for c in self.calls}

    def may_start(self, identity: str) -> bool:
        return self.pacer is None or self.pacer.may_start(identity)

    def idle_place(self, identity: str) -> bool:
        """A call waits while its lane has a free place and pacing does not hold it back."""
        return self.waiting(identity) > 0 and self.running(identity) < RUNNING and self.may_start(identity)

    async def check(self) -> None:
        for identity in self.identities():
            running = self.running(identity)
            assert running <= RUNNING, f"{identity} has {running} running"
            if self.pacer is None:
                assert not self.idle_place(identity), f"{identity} waits with a free place"
            else:  # a lane pacing let go of is looked at again within the busy window
                await wait_until_async(
                    lambda i=identity: not self.idle_place(i), 2.0, f"{identity}'s free place to be taken"
                )
            order = self.grant_order.get(identity, [])
            assert order == sorted(order), f"{identity} served out of order: {order}"


operations = st.lists(
    st.tuples(
        st.sampled_from(["enter", "enter", "leave", "cancel"]),
        st.sampled_from(["ann", "bob"]),
        st.integers(0, 20),
        st.sampled_from([0.0, 0.0, 0.0, 0.0, 0.0005, 0.001, 0.003, 0.3]),
    ),
    max_size=60,
)


@pytest.mark.timeout(300)
@settings(max_examples=300, deadline=None)
@given(operations, st.booleans())
def test_lanes_bound_running_and_waiting_serve_in_order_and_leak_nothing(script, paced):
    """With pacing on, the fake clock moves by each step's pause; pacing may hold a free place
    back, but never past the moment it would let the call start."""

    async def run() -> None:
        clock = SecondsClock()
        pacer = Pacer(PACING, clock=clock) if paced else None
        admission = CallLanes(NO_EXPIRY, pacer=pacer)
        model = _Model(admission, pacer)
        for op, identity, pick, pause in script:
            clock.now += pause
            if op == "enter":
                await model.enter(identity)
            elif op == "leave":
                await model.leave(pick)
            else:
                await model.cancel(pick)
            await model.check()
        # Everyone still holding a place leaves, one call a second: nobody is left waiting and no
        # lane remains.
        while any(model.is_running(c) for c in model.calls) or any(not c.task.done() for c in model.calls):
            clock.now += 1
            if any(model.is_running(c) for c in model.calls):
                await model.leave(0)
            await model.check()
        assert admission.lanes_in_use() == 0

    asyncio.run(run())


@pytest.mark.timeout(30)
def test_a_call_that_waits_too_long_is_refused_and_its_place_is_not_lost():
    async def run() -> None:
        admission = CallLanes(LaneConfig(calls_per_identity=1, waiting_per_identity=5, wait_ms=50))
        await admission.enter("ann", "write")
        with pytest.raises(errors.Overloaded) as refused:
            await asyncio.wait_for(admission.enter("ann", "write"), 10)
        assert refused.value.retry_after_ms > 0
        assert admission.refused == 1
        admission.leave("ann", "write")
        await asyncio.wait_for(admission.enter("ann", "write"), 10)  # the place is free again
        admission.leave("ann", "write")
        assert admission.lanes_in_use() == 0

    asyncio.run(run())


@pytest.mark.timeout(30)
def test_lanes_are_per_identity_and_per_kind():
    async def run() -> None:
        admission = CallLanes(LaneConfig(calls_per_identity=1, streams_per_identity=1, waiting_per_identity=0))
        await admission.enter("ann", "write")
        await admission.enter("ann", "read")  # reads do not queue behind writes
        await admission.enter("ann", "stream")
        await admission.enter("bob", "write")  # another identity is not held up
        for kind in ("write", "read", "stream"):
            with pytest.raises(errors.Overloaded):
                await admission.enter("ann", kind)
        assert admission.refused == 3
        for identity, kind in (("ann", "write"), ("ann", "read"), ("ann", "stream"), ("bob", "write")):
            admission.leave(identity, kind)
        assert admission.lanes_in_use() == 0

    asyncio.run(run())


@pytest.mark.timeout(30)
def test_a_waiting_call_is_refused_while_its_deadline_leaves_time_to_run():
    async def run() -> None:
        admission = CallLanes(NO_EXPIRY)  # would otherwise wait an hour
        await admission.enter("ann", "write")
        assert not admission.try_enter("ann", "write")
        with pytest.raises(errors.Overloaded) as refused:
            await asyncio.wait_for(admission.wait_for_place("ann", "write", time_remaining=0.2), 10)
        assert refused.value.retry_after_ms > 0
        assert not admission.try_enter("ann", "write")
        with pytest.raises(errors.Overloaded):  # no time left at all: refused at once
            await asyncio.wait_for(admission.wait_for_place("ann", "write", time_remaining=0.0), 10)
        admission.leave("ann", "write")
        assert admission.lanes_in_use() == 0 and admission.waiting == 0

    asyncio.run(run())


async def _ann_far_above_the_mean_while_bob_calls(admission: CallLanes) -> None:
    """Ann has sent 5 calls to bob's 2 (her next one is a sixth: above 1.25 times the mean), and
    bob holds a call: the daemon is busy with him. The caller must leave bob's call."""
    for identity in ("ann", "ann", "ann", "ann", "bob"):
        await admission.enter(identity, "write")
        admission.leave(identity, "write")
    await admission.enter("bob", "write")


@pytest.mark.timeout(30)
def test_a_teammate_above_its_share_waits_while_others_call_and_starts_once_they_go_quiet():
    async def run() -> None:
        clock = SecondsClock()
        pacer = Pacer(
            PacingConfig(slack=1.25, busy_window_ms=5, max_hold_ms=3_600_000, longest_hold_ms=3_600_000), clock=clock
        )
        admission = CallLanes(LaneConfig(wait_ms=3_600_000), pacer=pacer)
        await _ann_far_above_the_mean_while_bob_calls(admission)
        held = asyncio.ensure_future(admission.enter("ann", "write"))
        await _settle()
        assert not held.done(), "ann started above its share while bob was calling"
        # The Lead is never held, however many calls it starts.
        for _ in range(20):
            assert admission.try_enter("lead", "write", is_lead=True)
            admission.leave("lead", "write")
        assert not held.done()
        clock.now += 1  # everyone goes quiet: the held call starts without anyone's call ending
        await asyncio.wait_for(held, 5)
        admission.leave("ann", "write")
        admission.leave("bob", "write")
        assert admission.lanes_in_use() == 0

    asyncio.run(run())


@pytest.mark.timeout(30)
def test_pacing_holds_a_call_back_for_a_bounded_time_while_the_others_keep_calling():
    async def run() -> None:
        clock = SecondsClock()  # frozen: bob called just now, for as long as the test runs
        pacer = Pacer(
            PacingConfig(slack=1.25, busy_window_ms=3_600_000, max_hold_ms=20, longest_hold_ms=40), clock=clock
        )
        admission = CallLanes(LaneConfig(wait_ms=3_600_000), pacer=pacer)
        await _ann_far_above_the_mean_while_bob_calls(admission)
        assert not pacer.may_start("ann")  # and never will on this clock
        for _ in range(3):  # each call in turn is let go once it has been held for 20-40 ms
            await asyncio.wait_for(admission.enter("ann", "write"), 5)
            admission.leave("ann", "write")
        admission.leave("bob", "write")
        assert admission.lanes_in_use() == 0

    asyncio.run(run())
