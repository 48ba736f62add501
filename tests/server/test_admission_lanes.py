"""Per-identity admission lanes (service/admission.py): bounded running and waiting calls per
identity, first come first served, no place lost when a waiting caller gives up."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corrald import errors
from corrald.service.admission import Admission, AdmissionConfig

RUNNING, WAITING, TOTAL = 1, 2, 3
NO_EXPIRY = AdmissionConfig(calls_per_identity=RUNNING, waiting_per_identity=WAITING, waiting_total=TOTAL,
                            wait_ms=3_600_000)


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
    """Drives an Admission with tasks and checks its promises after every step."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
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
        must_refuse = running_before >= RUNNING and (waiting_before >= WAITING or total_before >= TOTAL)
        assert refused == must_refuse, (refused, running_before, waiting_before, total_before)
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
        return (call.task.done() and not call.task.cancelled() and call.task.exception() is None
                and not call.left)

    def running(self, identity: str) -> int:
        return sum(1 for c in self.calls if c.identity == identity and self.is_running(c))

    def waiting(self, identity: str) -> int:
        return sum(1 for c in self.calls if c.identity == identity and not c.task.done())

    def identities(self) -> set[str]:
        return {c.identity for c in self.calls}

    def check(self) -> None:
        for identity in self.identities():
            running, waiting = self.running(identity), self.waiting(identity)
            assert running <= RUNNING, f"{identity} has {running} running"
            assert waiting == 0 or running == RUNNING, f"{identity} waits with a free place"
            order = self.grant_order.get(identity, [])
            assert order == sorted(order), f"{identity} served out of order: {order}"


operations = st.lists(st.tuples(st.sampled_from(["enter", "enter", "leave", "cancel"]), st.sampled_from(["ann", "bob"]),
                                st.integers(0, 20)), max_size=60)


@pytest.mark.timeout(120)
@settings(max_examples=500, deadline=None)
@given(operations)
def test_lanes_bound_running_and_waiting_serve_in_order_and_leak_nothing(script):
    async def run() -> None:
        admission = Admission(NO_EXPIRY)
        model = _Model(admission)
        for op, identity, pick in script:
            if op == "enter":
                await model.enter(identity)
            elif op == "leave":
                await model.leave(pick)
            else:
                await model.cancel(pick)
            model.check()
        # Everyone still holding a place leaves; nobody is left waiting and no lane remains.
        while any(model.is_running(c) for c in model.calls) or any(not c.task.done() for c in model.calls):
            await model.leave(0)
            model.check()
        assert admission.lanes_in_use() == 0

    asyncio.run(run())


@pytest.mark.timeout(30)
def test_a_call_that_waits_too_long_is_refused_and_its_place_is_not_lost():
    async def run() -> None:
        admission = Admission(AdmissionConfig(calls_per_identity=1, waiting_per_identity=5, wait_ms=50))
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
        admission = Admission(AdmissionConfig(calls_per_identity=1, streams_per_identity=1, waiting_per_identity=0))
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
