"""The wake hub: after each COMMIT the writer says what changed; streams re-check.

Lives on the event loop. `post` is the one thread-safe entry (the writer
thread calls it); everything else runs on the loop, so no locks are needed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .clock import Clock, SystemClock
from .model import Wakes


class Waiter:
    """One open Idle stream's wake-up handle."""

    def __init__(self, name: str, roles: tuple[str, ...], opened_ms: int) -> None:
        self.name = name
        self.roles = roles
        self.event = asyncio.Event()
        self.waiting = False
        self.can_claim = True
        self.last_alive_ms = opened_ms  # the teammate's last own call (opening the stream counts)
        self.claims_paused = False  # its last check held claims back until it shows life
        # Woken because a claim may be waiting (a task became ready, a slot freed,
        # a gate opened, or a paused teammate showed life): the next check goes
        # straight to the writer instead of looking first.
        self.claim_likely = False
        self.ended: str | None = None  # why the stream must end, if it must
        self.superseded = False

    def may_take(self, role: str) -> bool:
        return not role or role in self.roles

    def end(self, why: str, *, superseded: bool = False) -> None:
        self.ended = why
        self.superseded = superseded
        self.event.set()


# A teammate opens Idle once and again only after its stream broke; a client
# reopening in a tight loop would make every open supersede the last and cost
# a few writer jobs each. Opens of one teammate are spaced this far apart.
REOPEN_SPACING_S = 0.1


class WakeHub:
    def __init__(self, loop: asyncio.AbstractEventLoop, on_deadline: Callable[[int], None],
                 clock: Clock | None = None) -> None:
        self._loop = loop
        self._clock = clock or SystemClock()
        self._on_deadline = on_deadline
        self._waiters: dict[str, Waiter] = {}
        self._next_open: dict[str, float] = {}  # loop time before which a teammate's next open waits
        self._board_moved = asyncio.Event()
        self._closed = asyncio.Event()

    @property
    def closing(self) -> bool:
        return self._closed.is_set()

    def close(self, why: str) -> None:
        """Daemon draining: every Idle and Watch stream ends."""
        self._closed.set()
        self.end_streams(why)

    async def wait_or_close(self, event: asyncio.Event) -> None:
        waiters = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(self._closed.wait())]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    # ------------------------------------------------------------ streams

    async def turn_to_open(self, name: str) -> None:
        """Waits until this teammate may open another Idle stream (see REOPEN_SPACING_S)."""
        now = self._loop.time()
        turn = max(now, self._next_open.get(name, now))
        self._next_open[name] = turn + REOPEN_SPACING_S
        if len(self._next_open) > 4 * len(self._waiters) + 1024:  # forget teammates long gone
            self._next_open = {n: t for n, t in self._next_open.items() if t > now}
        if turn > now:
            await asyncio.sleep(turn - now)

    def register(self, name: str, roles: tuple[str, ...]) -> Waiter:
        """A second stream from the same identity supersedes the first."""
        previous = self._waiters.get(name)
        if previous is not None:
            previous.end("superseded by a newer Idle stream", superseded=True)
        waiter = Waiter(name, roles, self._clock.now_ms())
        self._waiters[name] = waiter
        return waiter

    def unregister(self, waiter: Waiter) -> None:
        if self._waiters.get(waiter.name) is waiter:
            del self._waiters[waiter.name]

    def alive(self, name: str) -> None:
        """The teammate made a call of its own: it is not frozen, claims may flow again."""
        waiter = self._waiters.get(name)
        if waiter is None:
            return
        waiter.last_alive_ms = self._clock.now_ms()
        if waiter.claims_paused:
            waiter.claim_likely = True
            waiter.event.set()

    def end_streams(self, why: str) -> None:
        for waiter in list(self._waiters.values()):
            waiter.end(why)

    @property
    def open_streams(self) -> int:
        return len(self._waiters)

    def is_open(self, name: str) -> bool:
        return name in self._waiters

    def board_moved(self) -> asyncio.Event:
        """An event set at the next committed change (for Watch streams)."""
        return self._board_moved

    # ------------------------------------------------------------ wake-ups

    def post(self, wakes: Wakes) -> None:
        """Thread-safe: called by the writer after COMMIT."""
        try:
            self._loop.call_soon_threadsafe(self._apply, wakes)
        except RuntimeError:  # loop closed during shutdown
            pass

    def _apply(self, wakes: Wakes) -> None:
        for name, why in wakes.ended.items():
            waiter = self._waiters.get(name)
            if waiter is not None:
                waiter.end(why)
        if wakes.everyone:
            for waiter in self._waiters.values():
                waiter.claim_likely = True
                waiter.event.set()
        for name in wakes.teammates:
            waiter = self._waiters.get(name)
            if waiter is not None:
                waiter.claim_likely = waiter.claim_likely or name in wakes.may_claim
                waiter.event.set()
        for role, count in wakes.ready_roles.items():
            self._wake_for_ready(role, count)
        if wakes.events:
            self._board_moved.set()
            self._board_moved = asyncio.Event()
        if wakes.next_deadline_ms is not None:
            self._on_deadline(wakes.next_deadline_ms)

    def _wake_for_ready(self, role: str, count: int) -> None:
        # Wake as many waiting streams (with a free slot) as tasks became
        # ready: no thundering herd. A stream in the middle of a check is
        # always nudged, whatever its last check said, because that check may
        # have run just before this commit; over-waking is only a spare check.
        for waiter in self._waiters.values():
            if not waiter.may_take(role) or waiter.event.is_set():
                continue
            if not waiter.waiting:
                waiter.claim_likely = True
                waiter.event.set()
            elif waiter.can_claim and count > 0:
                waiter.claim_likely = True
                waiter.event.set()
                count -= 1
