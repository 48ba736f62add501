"""One teammate's stream, Idle or Session: design §5's loop, written once.

The loop sends what the board decides (held claims, inbox items, a claim), waits
to be woken by a commit or for the poll interval, and spends the idle budget as
the Idle stream always has. A Session adds its ops (`Ops`): when one has
arrived it is answered first, and a completion's answer carries the next item
its own transaction decided (the handoff), so a busy teammate's cycle costs one
writer job. Claims other jobs made for this stream (`StreamState.handed`) go
out before anything is checked.

The loop yields `(op_result, item)` pairs, either part possibly None, and the
servicer turns them into its own responses.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any, Protocol

from .. import errors, failpoints, validate
from ..board import Board
from ..model import ClaimEnd, ClaimGrant
from ..overload.reopen import ReopenSpacing
from ..stream import Delivery, StreamItem, StreamState
from ..wake import WakeHub
from ..writer import CommitFailed
from . import convert


@dataclasses.dataclass(frozen=True, slots=True)
class IdleTimedOut:
    """The idle budget is spent: the stream says so, then ends with OK."""

    idle_polls: int


# A timer may run a hair before its time (the loop takes what is due within its
# clock's resolution); a re-armed deadline this close is taken as reached.
TIMER_SLACK_S = 0.001

Outgoing = tuple[Any | None, StreamItem | ClaimEnd | IdleTimedOut | None]


@dataclasses.dataclass(frozen=True, slots=True)
class StreamOptions:
    max_idle_polls: int
    poll_interval_s: float
    slots: int


def stream_options(board: Board, request) -> StreamOptions:
    """The options of an IdleRequest (or a Session's open), defaulted and range-checked."""
    limits = board.limits
    polls = validate.defaulted(
        "max_idle_polls", request.max_idle_polls, limits.max_idle_polls_default, 1, limits.max_idle_polls_max
    )
    interval_ms = validate.defaulted(
        "poll_interval",
        convert.duration_ms(request, "poll_interval"),
        limits.poll_interval_default_ms,
        limits.poll_interval_min_ms,
        limits.poll_interval_max_ms,
        "ms",
    )
    slots = validate.defaulted("slots", request.slots, limits.slots_default, 1, limits.slots_max)
    return StreamOptions(polls, interval_ms / 1000, slots)


class Ops(Protocol):
    """A Session's ops, as the loop sees them."""

    @property
    def arrived(self) -> bool:
        """An op is waiting to be answered."""

    async def answer(self, stream: StreamState) -> tuple[Any, Delivery | None]:
        """Runs the op that arrived: its result, and the delivery its job decided, if any."""

    def answered(self) -> None:
        """Its result is sent: the next op may be read."""


class TeammateStream:
    """The loop of one open stream; `run` yields what to send."""

    def __init__(
        self,
        board: Board,
        hub: WakeHub,
        reopen: ReopenSpacing,
        name: str,
        options: StreamOptions,
        ops: Ops | None = None,
    ) -> None:
        self._board = board
        self._hub = hub
        self._reopen = reopen
        self.name = name
        self._options = options
        self._ops = ops
        self.stream: StreamState | None = None
        self._parked = False  # in the hub's parked streams (see _wait)
        self._poll_timer: asyncio.TimerHandle | None = None  # see _poll_check
        self._poll_due = 0.0  # when the current wait's poll interval ends (loop time)
        self._poll_passed = False  # the current wait ended by its poll interval
        self.ending = "left"  # the status change recorded when the stream goes; "" for none

    async def open(self) -> StreamState:
        """Registers the stream (superseding the teammate's previous one) and records it online."""
        await self._reopen.turn(self.name)
        roles = await self._board.teammate_roles(self.name)
        stream = self._hub.register(self.name, roles, self._options.slots)
        self.stream = stream
        try:
            stream.epoch = await self._board.set_online(self.name, True)
        except CommitFailed:  # logged by the writer; what is stored is still delivered
            stream.online_pending = True
        return stream

    async def run(self) -> AsyncIterator[Outgoing]:
        stream = self.stream
        assert stream is not None, "open() first"
        options, name = self._options, self.name
        idle_polls = 0
        waiting = False  # as last recorded: idle, or waiting for work still to come
        must_check = True
        # Checks go to the writer, where many streams' checks share one
        # transaction; only a wake-up for an inbox item (a message or a control
        # message, never a chance to claim) is answered by a read first, so
        # control is not queued behind the board's writes.
        look_first = False
        while stream.ended is None:
            stream.event.clear()
            ended = stream.take_claims_ended()
            if ended:  # first: the holder stops work it no longer holds before anything new
                for end in ended:
                    yield None, end
                # A freed slot: look again before waiting (a claim that expired may also
                # pause claims until the teammate shows life; only a check learns either).
                must_check = True
                continue
            if self._ops is not None and self._ops.arrived:
                result, found = await self._ops.answer(stream)
                if found is not None:
                    stream.hand(found)
                items = stream.take_handed()
                failpoints.hit("before_op_result")  # committed, not yet answered
                yield result, items[0] if items else None
                self._ops.answered()
                for item in items[1:]:
                    yield None, item
                self._sent(stream, items)
                idle_polls = 0
                continue
            handed = stream.take_handed()
            if handed:
                for item in handed:
                    yield None, item
                self._sent(stream, handed)
                idle_polls = 0
                continue
            if must_check or stream.nudged:
                must_check = stream.nudged = False
                stream.claim_likely = False
                items = stream.unsent(await self._board.next_for(name, stream, look_first=look_first))
                look_first = False
                ended = stream.take_claims_ended()  # committed while the check ran: told first
                if ended:
                    dead = {end.token for end in ended}
                    items = [item for item in items if not (isinstance(item, ClaimGrant) and item.token in dead)]
                    for end in ended:
                        yield None, end
                    if not items:
                        must_check = True  # a freed slot: look again before waiting
                        continue
                if items:
                    for item in items:
                        yield None, item
                    self._sent(stream, items)
                    idle_polls = 0
                    if any(isinstance(item, ClaimGrant) for item in items):
                        waiting = False  # the claim made it busy; the next quiet poll looks again
                    must_check = not stream.settled(items)
                    continue
            if await self._wait(stream, options.poll_interval_s):
                look_first = not stream.claim_likely
                continue  # woken: wake-ups never use up the idle budget
            must_check = True  # every poll interval looks again
            # An idle poll counts only while the teammate holds no claim and no
            # unfinished task remains that it could take: until then it is
            # waiting for work (a dependency still running), not idle.
            if stream.sent_tokens:
                continue
            still_to_come = bool(await self._board.work_waited_for(name, stream.roles))
            if still_to_come != waiting:  # written only when it changes
                with contextlib.suppress(CommitFailed):  # logged by the writer; written at a later poll
                    await self._board.set_waiting(name, still_to_come)
                    waiting = still_to_come
            if still_to_come:
                idle_polls = 0
                continue
            idle_polls += 1
            if idle_polls >= options.max_idle_polls:
                self.ending = "idle_timeout"
                yield None, IdleTimedOut(idle_polls)
                return
        for end in stream.take_claims_ended():  # a removed teammate hears why its claims ended
            yield None, end
        self._raise_ended(stream)

    def _sent(self, stream: StreamState, items: list[StreamItem]) -> None:
        if any(isinstance(item, ClaimGrant) for item in items):
            failpoints.hit("after_claim_sent")
            if self._parked:  # its wait for work is over: it parks again at the back
                self._hub.parked.leave(stream)
                self._parked = False
        stream.mark_sent(items)

    def _raise_ended(self, stream: StreamState) -> None:
        if self._hub.closing:
            raise errors.Unavailable("corrald is shutting down; reconnect to the next one")
        if stream.superseded:
            self.ending = ""
            raise errors.Aborted("superseded by a newer stream from the same teammate")
        assert stream.ended is not None
        if stream.ended.startswith("removed") or stream.ended.startswith("shutdown grace"):
            self.ending = ""
            raise errors.Unauthenticated(f"teammate {self.name!r} was removed")

    async def _wait(self, stream: StreamState, interval: float) -> bool:
        """True when woken (or told to end), False when the poll interval passed. A stream
        with a free slot and open gates waits parked: a completion serves it first, in the
        order the streams began to wait. It keeps its place until a claim goes out on it
        (`_sent`) or it may claim no more; a poll interval or a wake-up that brought no
        claim does not send it to the back. (Between waits it may still be served: any job
        decides every claim from what is committed.)"""
        parked = stream.can_claim and not stream.claims_paused
        if parked and not self._parked:
            self._hub.parked.park(stream)
        elif self._parked and not parked:
            self._hub.parked.leave(stream)
        self._parked = parked
        loop = asyncio.get_running_loop()
        self._poll_due = loop.time() + interval
        self._poll_passed = False
        if self._poll_timer is None:
            self._poll_timer = loop.call_at(self._poll_due, self._poll_check, stream)
        stream.waiting = True
        try:
            await stream.event.wait()
        finally:
            stream.waiting = False
        return not self._poll_passed

    def _poll_check(self, stream: StreamState) -> None:
        """The poll timer: a busy stream waits many times per interval, and a timer armed
        and cancelled for each wait costs more than the wait. One timer is kept instead,
        re-armed for the wait then running only when it fires before that wait's end."""
        self._poll_timer = None
        if not stream.waiting or stream.event.is_set():
            return  # not waiting (the next wait arms it again), or woken anyway
        loop = asyncio.get_running_loop()
        if loop.time() + TIMER_SLACK_S >= self._poll_due:
            self._poll_passed = True
            stream.event.set()
        else:
            self._poll_timer = loop.call_at(self._poll_due, self._poll_check, stream)

    def close(self) -> None:
        if self._poll_timer is not None:
            self._poll_timer.cancel()
            self._poll_timer = None
        if self.stream is not None:
            self._hub.unregister(self.stream)
