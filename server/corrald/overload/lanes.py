"""Lanes per identity: one caller's flood waits in its own line, not in everyone's.

Every identity has three lanes: writes, reads and streams. A lane lets a few
calls run at once; the rest wait in first-come order, still unparsed, costing
neither CPU nor a writer slot. A call that finds its lane's line full, or
waits too long, is refused with Overloaded (RESOURCE_EXHAUSTED + RetryInfo).

Lanes of different identities never wait on one another, so the writer queue
holds at most `calls_per_identity` jobs of any one caller: a teammate renewing
its lease waits behind that many of a flooder's jobs, not behind the
flooder's whole backlog. A lane's unary calls may also wait for their turn
while their teammate is above its share of a busy daemon (pacing.py).

A call waits up to `wait_ms`, and at most three quarters of the time its
deadline leaves, before it is refused. Waiting is what a flooder's calls
should do: each refusal is a whole call for the daemon to answer, and a
flooder that ignores RetryInfo sends the next one at once.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import random
from typing import Literal

from .. import errors
from .pacing import Pacer, PacingConfig

LaneKind = Literal["write", "read", "stream"]


@dataclasses.dataclass(frozen=True)
class LaneConfig:
    # Unary calls of one identity that run at once, per lane (reads, writes).
    calls_per_identity: int = 8
    # Idle and Watch streams one identity holds open at once.
    streams_per_identity: int = 16
    # Calls waiting for their lane before new ones are refused, per identity
    # and across all identities. A waiting call costs no CPU but holds its gRPC
    # call (30-45 KiB), so 640 waiting calls are about 20-30 MiB.
    waiting_per_identity: int = 640
    waiting_total: int = 640
    # How long a call waits for its lane before it is refused: at least this,
    # and up to half as long again (see `wait_for_place`), but at most three
    # quarters of the time the call's deadline leaves.
    wait_ms: int = 10_000
    # The pause a refused caller is asked to take (RetryInfo).
    retry_after_ms: int = 250
    pacing: PacingConfig = PacingConfig()


# A call with a deadline waits at most this share of the time it has left and
# keeps the rest for running: one let in just before its deadline would be
# work for nobody (the client gives up before the writer gets to it), and a
# refusal in time tells the caller when to come back, where DEADLINE_EXCEEDED
# does not. Refusing 50 ms before the deadline was tried: under the
# reliability suite's 10x overload, 50 ms was not enough (see server/DESIGN.md).
_WAIT_SHARE_OF_DEADLINE = 0.75


class _Lane:
    __slots__ = ("running", "waiting", "unary", "paced", "held_since")

    def __init__(self, kind: LaneKind, is_lead: bool) -> None:
        self.running = 0
        self.waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self.unary = kind != "stream"  # a stream's length says nothing about its cost
        self.paced = self.unary and not is_lead
        self.held_since: float | None = None  # when pacing began to hold back the first waiter


class CallLanes:
    """Event-loop only (no locks): every call enters and leaves on the server's loop."""

    def __init__(self, config: LaneConfig = LaneConfig(), pacer: Pacer | None = None) -> None:
        self._config = config
        self._pacer = pacer or Pacer(config.pacing)
        self._lanes: dict[tuple[str, LaneKind], _Lane] = {}
        # Lanes with a free place and calls waiting, held back by pacing; any
        # unary call that ends may change that.
        self._held: set[tuple[str, LaneKind]] = set()
        self._recheck: asyncio.TimerHandle | None = None
        self._waiting = 0  # across all lanes
        self.refused = 0

    def _limit(self, kind: LaneKind) -> int:
        return self._config.streams_per_identity if kind == "stream" else self._config.calls_per_identity

    def try_enter(self, identity: str, kind: LaneKind, *, is_lead: bool = False) -> bool:
        """Takes a place at once if one is free and nobody is waiting (the common case,
        no coroutine needed); otherwise the caller must `await wait_for_place(...)`."""
        lane = self._lanes.get((identity, kind))
        if lane is None:
            lane = self._lanes[(identity, kind)] = _Lane(kind, is_lead)
        if lane.unary:
            self._pacer.arrived(identity, counted=lane.paced)
        if (
            lane.running < self._limit(kind)
            and not lane.waiting
            and (not lane.paced or self._pacer.may_start(identity) or not self._may_wait(lane))
        ):
            lane.running += 1  # pacing holds a call back only if it can wait: it never refuses one
            return True
        return False

    def _may_wait(self, lane: _Lane) -> bool:
        return len(lane.waiting) < self._config.waiting_per_identity and self._waiting < self._config.waiting_total

    async def enter(self, identity: str, kind: LaneKind, *, is_lead: bool = False) -> None:
        """Returns once the call may run; the caller must `leave` afterwards."""
        if not self.try_enter(identity, kind, is_lead=is_lead):
            await self.wait_for_place(identity, kind)

    async def wait_for_place(self, identity: str, kind: LaneKind, time_remaining: float | None = None) -> None:
        """The slow half of `enter`, right after `try_enter` said no: wait in line, or be refused.
        `time_remaining` is the time the call's own deadline leaves, if it has one."""
        key = (identity, kind)
        lane = self._lanes[key]
        if not self._may_wait(lane):
            raise self._refusal(identity, kind, lane)
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[None] = loop.create_future()
        # Spread the expiries: calls that arrived in one burst would otherwise all
        # be refused in one loop turn, holding up every other caller for as long
        # as the whole wave of refusals takes (100 ms for a few hundred).
        wait_s = self._config.wait_ms / 1000 * (1 + random.random() / 2)
        if time_remaining is not None:
            wait_s = max(0.0, min(wait_s, time_remaining * _WAIT_SHARE_OF_DEADLINE))
        expiry = loop.call_later(wait_s, _expire, turn)
        lane.waiting.append(turn)
        if lane.running < self._limit(kind):
            self._pass_places(key, lane)  # a free place: pacing holds this call back, or lets it go
        self._waiting += 1
        try:
            await turn  # resolved by `_pass_places`, which also counts the call as running
        except BaseException as error:
            if turn.done() and not turn.cancelled() and turn.exception() is None:
                self.leave(identity, kind)  # handed a place just as the caller went away
                raise
            if turn in lane.waiting:  # `_pass_places` may have passed over it already
                lane.waiting.remove(turn)
            self._drop_if_unused(key, lane)
            if isinstance(error, _WaitedTooLong):
                raise self._refusal(identity, kind, lane) from None
            raise
        finally:
            expiry.cancel()
            self._waiting -= 1

    def leave(self, identity: str, kind: LaneKind) -> None:
        key = (identity, kind)
        lane = self._lanes[key]
        lane.running -= 1
        self._pass_places(key, lane)
        if lane.unary and self._held:  # every unary call ends here: nothing to copy when none is held
            self._pass_held_places()

    def _pass_held_places(self) -> None:
        for key in list(self._held):
            lane = self._lanes.get(key)
            if lane is None:
                self._held.discard(key)
            else:
                self._pass_places(key, lane)

    def _recheck_held(self) -> None:
        """Held lanes are looked at again when any unary call ends, and by this
        timer, which frees them once the others have gone quiet."""
        self._recheck = None
        self._pass_held_places()

    def _hold(self, key: tuple[str, LaneKind], lane: _Lane) -> bool:
        """Holds the lane back, unless its first waiter has been held as long as pacing allows
        (`Pacer.hold_limit_s`) already."""
        loop = asyncio.get_running_loop()
        if lane.held_since is None:
            lane.held_since = loop.time()
        elif loop.time() - lane.held_since >= self._pacer.hold_limit_s(key[0]):
            return False
        self._held.add(key)
        if self._recheck is None:
            self._recheck = loop.call_later(min(self._pacer.busy_window_s, self._pacer.max_hold_s), self._recheck_held)
        return True

    def _pass_places(self, key: tuple[str, LaneKind], lane: _Lane) -> None:
        """Gives a free place of the lane to its first live waiter, unless pacing holds the lane back."""
        identity, kind = key
        while lane.waiting and lane.running < self._limit(kind):
            if lane.paced and not self._pacer.may_start(identity) and self._hold(key, lane):
                return
            turn = lane.waiting.popleft()
            if not turn.done():  # a turn that expired or was cancelled is passed over
                turn.set_result(None)
                lane.running += 1
                lane.held_since = None
                break
        if not lane.waiting or lane.running >= self._limit(kind):
            self._held.discard(key)
        if not lane.waiting:
            lane.held_since = None
        self._drop_if_unused(key, lane)

    def _drop_if_unused(self, key: tuple[str, LaneKind], lane: _Lane) -> None:
        if lane.running == 0 and not lane.waiting:
            self._lanes.pop(key, None)
            self._held.discard(key)

    def _refusal(self, identity: str, kind: LaneKind, lane: _Lane) -> errors.Overloaded:
        self.refused += 1
        return errors.Overloaded(
            f"{identity!r} already has {lane.running} {kind} calls running and {len(lane.waiting)} waiting",
            retry_after_ms=self._config.retry_after_ms,
        )

    @property
    def waiting(self) -> int:
        return self._waiting

    def lanes_in_use(self) -> int:
        return len(self._lanes)


class _WaitedTooLong(Exception):
    """Set on a waiting call's turn when its wait runs out."""


def _expire(turn: asyncio.Future[None]) -> None:
    if not turn.done():
        turn.set_exception(_WaitedTooLong())
