"""One teammate's stream, Idle or Session: design §5's loop, written once.

The loop sends what the board decides (held claims, inbox items, a claim), waits
to be woken by a commit or for the poll interval, and spends the idle budget as
the Idle stream always has. A Session adds its ops (`Ops`): when one has
arrived it is answered first, and a completion's answer carries the next item
its own transaction decided (the handoff), so a busy teammate's cycle costs one
writer job. What other jobs decided for this stream (its mailbox: claims that
ended under it, handoffs) goes out before anything is checked. The loop moves
the stream's phase (`stream.Phase`): ACTIVE while it works, WAITING between
checks.

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
from ..stream import Check, Claims, Delivery, Phase, StreamItem, StreamState
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
    # IdleRequest.hold_slots_until_freed, and the busy_claim_tokens its opening named.
    hold_slots: bool = False
    busy_tokens: frozenset[str] = frozenset()


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
    hold = request.hold_slots_until_freed
    busy = validate.busy_claim_tokens(request.busy_claim_tokens, hold=hold, slots=slots)
    return StreamOptions(polls, interval_ms / 1000, slots, hold, busy)


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
        # The loop's own reason to check, at the writer: its first turn, a claim that
        # ended (a freed slot), a poll interval, a send that may not have been the last.
        self._must_check = True
        # The last wake-up asked for no claim (an inbox item): its check reads first,
        # so control is not queued behind the board's writes (see Board.next_for).
        self._look_first = False
        self._idle_polls = 0  # poll intervals in a row with nothing sent and nothing to wait for
        self._recorded_waiting = False  # the status last recorded: waiting for work still to come, or idle
        self._poll_timer: asyncio.TimerHandle | None = None  # see _poll_check
        self._poll_due = 0.0  # when the current wait's poll interval ends (loop time)
        self._poll_passed = False  # the current wait ended by its poll interval
        self.ending = "left"  # the status change recorded when the stream goes; "" for none

    async def open(self) -> StreamState:
        """Registers the stream (superseding the teammate's previous one) and records it online."""
        await self._reopen.turn(self.name)
        roles = await self._board.teammate_roles(self.name)
        stream = self._hub.register(self.name, roles, self._options.slots)
        stream.hold_slots = self._options.hold_slots
        stream.working.update(self._options.busy_tokens)
        self.stream = stream
        try:
            stream.epoch = await self._board.set_online(self.name, True)
        except CommitFailed:  # logged by the writer; what is stored is still delivered
            stream.online_pending = True
        return stream

    async def run(self) -> AsyncIterator[Outgoing]:
        """Each turn takes the first step that applies, sends what it found and turns
        again: 1. claims that ended under the teammate, 2. a Session op, 3. what other
        jobs handed the stream, 4. a check, if one is due; with nothing to send, 5. it
        waits, and a poll interval that passes spends the idle budget."""
        stream = self.stream
        assert stream is not None, "open() first"
        if stream.phase is Phase.NEW:
            stream.to(Phase.ACTIVE)
        while stream.phase is not Phase.ENDED:
            stream.event.clear()
            ended = stream.take_claims_ended()
            if ended:  # first: the holder stops work it no longer holds before anything new
                for end in ended:
                    yield None, end
                self._must_check = True  # a freed slot (or claims paused): only a check learns which
                continue
            if self._ops is not None and self._ops.arrived:
                result, found = await self._ops.answer(stream)
                items = _answered(stream, found)
                yield result, items[0] if items else None
                self._ops.answered()
                for item in items[1:]:
                    yield None, item
                self._sent(stream, items)
                continue
            items = stream.take_handed()
            if not items and self._check_due(stream):
                items = await self._check(stream)
                ended = stream.take_claims_ended()  # committed while the check ran: told first
                if ended:
                    for end in ended:
                        yield None, end
                    items = _still_held(items, ended)
                    if not items:
                        self._must_check = True  # a freed slot: look again before waiting
                        continue
                self._checked(stream, items)
            if items:
                for item in items:
                    yield None, item
                self._sent(stream, items)
                continue
            if await self._wait(stream):
                continue  # woken: wake-ups never use up the idle budget
            if await self._idle_poll(stream):
                self.ending = "idle_timeout"
                yield None, IdleTimedOut(self._idle_polls)
                return
        for end in stream.take_claims_ended():  # a removed teammate hears why its claims ended
            yield None, end
        self._raise_ended(stream)

    # ------------------------------------------------------------ the loop's steps

    def _check_due(self, stream: StreamState) -> bool:
        """Whether a check is due: the loop's own reason, or the board asked (`StreamState.ask_check`)."""
        if not self._must_check and stream.check_due is Check.NONE:
            return False
        self._must_check = False
        stream.take_check()
        return True

    async def _check(self, stream: StreamState) -> list[StreamItem]:
        """What the board has for the stream now, decided from its snapshot; the stream
        takes in what the check learned before anything is sent."""
        look_first, self._look_first = self._look_first, False
        found = await self._board.next_for(self.name, stream.view(), look_first=look_first)
        stream.learned(found)
        return stream.unsent(found.items)

    def _checked(self, stream: StreamState, items: list[StreamItem]) -> None:
        if not items:
            return  # nothing to send: the loop waits
        if any(isinstance(item, ClaimGrant) for item in items):
            self._recorded_waiting = False  # the claim made it busy; the next quiet poll looks again
        self._must_check = not stream.settled(items)

    async def _idle_poll(self, stream: StreamState) -> bool:
        """A poll interval passed with nothing to send: True once the idle budget is spent.
        An idle poll counts only while the teammate holds no claim and no unfinished task
        remains that it could take: until then it is waiting for work (a dependency still
        running), not idle."""
        self._must_check = True  # every poll interval looks again
        if stream.sent_tokens:
            return False
        still_to_come = bool(await self._board.work_waited_for(self.name, stream.roles))
        if still_to_come != self._recorded_waiting:  # written only when it changes
            with contextlib.suppress(CommitFailed):  # logged by the writer; written at a later poll
                await self._board.set_waiting(self.name, still_to_come)
                self._recorded_waiting = still_to_come
        if still_to_come:
            self._idle_polls = 0
            return False
        self._idle_polls += 1
        return self._idle_polls >= self._options.max_idle_polls

    def _sent(self, stream: StreamState, items: list[StreamItem]) -> None:
        self._idle_polls = 0  # any delivery starts the idle count again
        if any(isinstance(item, ClaimGrant) for item in items):
            failpoints.hit("after_claim_sent")
            if stream.line is not None:  # its wait for work is over: it parks again at the back
                self._hub.parked.leave(stream)
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

    async def _wait(self, stream: StreamState) -> bool:
        """True when woken (or told to end), False when the poll interval passed. A stream
        with a free slot and open gates waits parked: a completion serves it first, in the
        order the streams began to wait. It keeps its place until a claim goes out on it
        (`_sent`) or it may claim no more; a poll interval or a wake-up that brought no
        claim does not send it to the back. Each wait parks its snapshot anew, so a
        completion decides from what it sent last. (Between waits it may still be served:
        any job decides every claim from what is committed.)"""
        if stream.phase is Phase.ENDED:
            return True  # ended during this turn: the loop stops
        if stream.claims is Claims.OPEN:
            self._hub.parked.park(stream)
        elif stream.line is not None:
            self._hub.parked.leave(stream)
        loop = asyncio.get_running_loop()
        self._poll_due = loop.time() + self._options.poll_interval_s
        self._poll_passed = False
        if self._poll_timer is None:
            self._poll_timer = loop.call_at(self._poll_due, self._poll_check, stream)
        stream.to(Phase.WAITING)
        try:
            await stream.event.wait()
        finally:
            if stream.phase is Phase.WAITING:
                stream.to(Phase.ACTIVE)
        if self._poll_passed:
            return False
        self._look_first = stream.check_due is not Check.CLAIM
        return True

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


def _answered(stream: StreamState, found: Delivery | None) -> list[StreamItem]:
    """What goes out with an op's result: the item its own job decided (a completion's
    handoff), after anything handed to the stream before it."""
    if found is not None:
        stream.hand(found)
    items = stream.take_handed()
    failpoints.hit("before_op_result")  # committed, not yet answered
    return items


def _still_held(items: list[StreamItem], ended: list[ClaimEnd]) -> list[StreamItem]:
    """`items` without the claims `ended` names (told ended while the check ran)."""
    dead = {end.token for end in ended}
    return [item for item in items if not (isinstance(item, ClaimGrant) and item.token in dead)]
