"""The wake hub: after each COMMIT the writer says what changed; streams re-check.

Lives on the event loop. `post` is the one thread-safe entry (the writer
thread calls it); everything else runs on the loop, so no locks are needed.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable

from .clock import Clock, SystemClock
from .stream import Check, Delivery, ParkedStreams, StreamState
from .txn import Wakes


class WakeHub:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_deadline: Callable[[int], None],
        clock: Clock | None = None,
        *,
        on_activity: Callable[[list[tuple[str, dict[str, object]]]], None] | None = None,
    ) -> None:
        self._loop = loop
        self._clock = clock or SystemClock()
        self._on_deadline = on_deadline
        self._on_activity = on_activity
        self._streams: dict[str, StreamState] = {}  # the open Idle and Session streams
        self.parked = ParkedStreams()  # those waiting for work, for a completion to serve first
        self.claims = self.claims_handed_off = 0  # since the daemon started (GetStats)
        self._board_moved = asyncio.Event()
        # TailOutput followers, by claim fence: an event while any follower holds it.
        self._output_moved: weakref.WeakValueDictionary[int, asyncio.Event] = weakref.WeakValueDictionary()
        self.output_wakeups = 0  # followers' events set since the daemon started (metrics)
        self._closed = asyncio.Event()

    @property
    def closing(self) -> bool:
        return self._closed.is_set()

    def close(self, why: str) -> None:
        """Daemon draining: every Idle and Watch stream ends (Watch streams wake on
        `board_moved`, and find the hub `closing`)."""
        self._closed.set()
        self._board_moved.set()
        self._wake_output(None)
        self.end_streams(why)

    # ------------------------------------------------------------ streams

    def register(self, name: str, roles: tuple[str, ...], slots: int = 1) -> StreamState:
        """A second stream from the same identity supersedes the first."""
        previous = self._streams.get(name)
        if previous is not None:
            previous.end("superseded by a newer Idle stream", superseded=True)
        stream = StreamState(name, roles, slots=slots, opened_ms=self._clock.now_ms())
        self._streams[name] = stream
        return stream

    def superseded_elsewhere(self, name: str) -> None:
        """The teammate opened a stream on another daemon of the board: this one ends."""
        stream = self._streams.get(name)
        if stream is not None:
            stream.end("superseded by a newer stream on another daemon", superseded=True)

    def unregister(self, stream: StreamState) -> None:
        self.parked.leave(stream)
        if self._streams.get(stream.name) is stream:
            del self._streams[stream.name]

    def stream_of(self, name: str) -> StreamState | None:
        """The teammate's open stream, if any."""
        return self._streams.get(name)

    def alive(self, name: str) -> None:
        """The teammate made a call of its own: it is not frozen, claims may flow again."""
        stream = self._streams.get(name)
        if stream is not None:
            stream.showed_life(self._clock.now_ms())

    def streams(self) -> list[StreamState]:
        """The open streams, one per teammate."""
        return list(self._streams.values())

    def end_streams(self, why: str) -> None:
        for stream in list(self._streams.values()):
            stream.end(why)

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    def is_open(self, name: str) -> bool:
        return name in self._streams

    def board_moved(self) -> asyncio.Event:
        """An event set at the next committed change, or when the daemon drains (for
        Watch streams: check `closing` when it is set)."""
        return self._board_moved

    def output_moved(self, fence: int) -> asyncio.Event:
        """An event set once the output of claim `fence` grows or the claim ends (a commit's
        `Wakes.output` names it), after a gap in what this daemon heard of other daemons'
        commits (`Wakes.everyone`), or when the daemon drains (check `closing`). Take it
        before reading, so nothing committed in between is missed."""
        moved = self._output_moved.get(fence)
        if moved is None:
            moved = self._output_moved[fence] = asyncio.Event()
        return moved

    def _wake_output(self, fences: set[int] | None) -> None:
        """Wakes the followers of `fences`, or of every claim (None)."""
        for fence in list(self._output_moved.keys()) if fences is None else fences:
            moved = self._output_moved.pop(fence, None)
            if moved is not None:
                moved.set()
                self.output_wakeups += 1

    # ------------------------------------------------------------ wake-ups

    def post(self, wakes: Wakes) -> None:
        """Thread-safe: what a commit changed, applied on the loop soon."""
        try:
            self._loop.call_soon_threadsafe(self.apply, wakes)
        except RuntimeError:  # loop closed during shutdown
            pass

    def apply(self, wakes: Wakes) -> None:
        """What a commit changed (on the loop: the writer hands it over with the batch's outcomes)."""
        self.claims += wakes.tally.get("claims", 0)
        self.claims_handed_off += wakes.tally.get("handoffs", 0)
        # Before any stream ends (a removed teammate's), so its notices go out first.
        for name, ends in wakes.claims_ended.items():
            stream = self._streams.get(name)
            if stream is not None:  # else its next call with the token says why
                for end in ends:
                    stream.claim_ended(end)
        for name, why in wakes.ended.items():
            stream = self._streams.get(name)
            if stream is not None:
                stream.end(why)
        for name, claims in wakes.handed.items():
            stream = self._streams.get(name)
            if stream is not None:  # else held: the teammate's next stream re-sends it
                for claim in claims:
                    stream.hand(Delivery([claim.grant], frozenset(), can_claim=claim.can_claim, claims_paused=False))
        for name, notice in wakes.exhausted.items():
            stream = self._streams.get(name)
            if stream is not None:  # its gate closed: it hears so once, and claims no more
                stream.hand(Delivery([notice], frozenset(), can_claim=False))
        if wakes.everyone:
            for stream in self._streams.values():
                stream.ask_check(claim_likely=True)
        for name in wakes.teammates:
            stream = self._streams.get(name)
            if stream is not None:
                stream.ask_check(claim_likely=name in wakes.may_claim)
        for role, count in wakes.ready_roles.items():
            self._wake_for_ready(role, count)
        if wakes.events:
            self._board_moved.set()
            self._board_moved = asyncio.Event()
        if self._output_moved and (wakes.output or wakes.everyone):
            # Only the claims whose output grew or that ended; after a gap, every follower looks.
            self._wake_output(None if wakes.everyone else wakes.output)
        if wakes.next_deadline_ms is not None:
            self._on_deadline(wakes.next_deadline_ms)
        if wakes.activity and self._on_activity is not None:
            self._on_activity(wakes.activity)

    def _wake_for_ready(self, role: str, count: int) -> None:
        # Wake as many waiting streams (with a free slot) as tasks became
        # ready: no thundering herd. A stream in the middle of a check is
        # always asked to check, whatever its last check said, because that check
        # may have run just before this commit; over-waking is only a spare check.
        # A stream asked already checks after this commit anyway; one woken only to
        # send what it was handed (a completion's handoff that found nothing, a claim
        # that ended) would not check, and is asked like the rest.
        # The longest-waiting first, as a completion serves them (ParkedStreams).
        for stream in self.parked.in_line(self._streams.values()):
            if not stream.may_take(role) or stream.check_due is not Check.NONE:
                continue
            if not stream.waiting:
                stream.ask_check(claim_likely=True)
            elif stream.can_claim and count > 0:
                stream.ask_check(claim_likely=True)
                count -= 1
            elif not stream.can_claim:
                stream.missed_ready = True
