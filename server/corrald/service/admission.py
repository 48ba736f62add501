"""Per-identity admission: one caller's flood waits in its own line, not in everyone's.

Every identity has three lanes: writes, reads and streams. A lane lets a few
calls run at once; the rest wait in first-come order, still unparsed, costing
neither CPU nor a writer slot. A call that finds its lane's line full, or
waits too long, is refused with Overloaded (RESOURCE_EXHAUSTED + RetryInfo).

Lanes of different identities never wait on one another, so the writer queue
holds at most `calls_per_identity` jobs of any one caller: a teammate renewing
its lease waits behind that many of a flooder's jobs, not behind the
flooder's whole backlog.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import random
from typing import Literal

from .. import errors

LaneKind = Literal["write", "read", "stream"]


@dataclasses.dataclass(frozen=True)
class AdmissionConfig:
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
    # and up to half as long again (see `wait_for_place`).
    wait_ms: int = 2000
    # The pause a refused caller is asked to take (RetryInfo).
    retry_after_ms: int = 250


class _Lane:
    __slots__ = ("running", "waiting")

    def __init__(self) -> None:
        self.running = 0
        self.waiting: collections.deque[asyncio.Future[None]] = collections.deque()


class Admission:
    """Event-loop only (no locks): every call enters and leaves on the server's loop."""

    def __init__(self, config: AdmissionConfig = AdmissionConfig()) -> None:
        self._config = config
        self._lanes: dict[tuple[str, LaneKind], _Lane] = {}
        self._waiting = 0  # across all lanes
        self.refused = 0

    def _limit(self, kind: LaneKind) -> int:
        return self._config.streams_per_identity if kind == "stream" else self._config.calls_per_identity

    def try_enter(self, identity: str, kind: LaneKind) -> bool:
        """Takes a place at once if one is free and nobody is waiting (the common case,
        no coroutine needed); otherwise the caller must `await wait_for_place(...)`."""
        lane = self._lanes.get((identity, kind))
        if lane is None:
            lane = self._lanes[(identity, kind)] = _Lane()
        if lane.running < self._limit(kind) and not lane.waiting:
            lane.running += 1
            return True
        return False

    async def enter(self, identity: str, kind: LaneKind) -> None:
        """Returns once the call may run; the caller must `leave` afterwards."""
        if not self.try_enter(identity, kind):
            await self.wait_for_place(identity, kind)

    async def wait_for_place(self, identity: str, kind: LaneKind) -> None:
        """The slow half of `enter`, right after `try_enter` said no: wait in line, or be refused."""
        key = (identity, kind)
        lane = self._lanes[key]
        if len(lane.waiting) >= self._config.waiting_per_identity or self._waiting >= self._config.waiting_total:
            raise self._refusal(identity, kind, lane)
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[None] = loop.create_future()
        # Spread the expiries: calls that arrived in one burst would otherwise all
        # be refused in one loop turn, holding up every other caller for as long
        # as the whole wave of refusals takes (100 ms for a few hundred).
        wait_s = self._config.wait_ms / 1000 * (1 + random.random() / 2)
        expiry = loop.call_later(wait_s, _expire, turn)
        lane.waiting.append(turn)
        self._waiting += 1
        try:
            await turn  # resolved by `leave`, which hands its place over
        except BaseException as error:
            if turn.done() and not turn.cancelled() and turn.exception() is None:
                self.leave(identity, kind)  # handed a place just as the caller went away
                raise
            if turn in lane.waiting:  # `leave` may have passed over it already
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
        while lane.waiting:
            turn = lane.waiting.popleft()
            if not turn.done():  # a turn that expired or was cancelled is passed over
                turn.set_result(None)  # the place passes on; `running` is unchanged
                return
        lane.running -= 1
        self._drop_if_unused(key, lane)

    def _drop_if_unused(self, key: tuple[str, LaneKind], lane: _Lane) -> None:
        if lane.running == 0 and not lane.waiting:
            self._lanes.pop(key, None)

    def _refusal(self, identity: str, kind: LaneKind, lane: _Lane) -> errors.Overloaded:
        self.refused += 1
        return errors.Overloaded(
            f"{identity!r} already has {lane.running} {kind} calls running and {len(lane.waiting)} waiting",
            retry_after_ms=self._config.retry_after_ms)

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
