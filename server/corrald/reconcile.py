"""Claims that ended while this daemon may not have heard: told from the claim history.

A claim that dies under its holder is told to the holder's open stream by the
commit that ended it: through the wake hub on the daemon that committed, and
to a PostgreSQL board's other daemons in that commit's NOTIFY. A notice must
not live only there (design §2, guarantee 3: the holder hears that its claim is
gone). After a gap in what this daemon heard (its listening connection lost and
made again, or a notification that said only "everything changed") the
listener asks for a pass, and waits for it before it wakes the streams, so a
holder hears how its claims ended before new work; and every `AUDIT_S` seconds
a pass runs anyway, for what nobody noticed (a commit of this daemon answered
in doubt that did commit). docs/postgres.md, "Gaps in what a daemon heard".

A pass is one read through the reader pool, whatever the number of streams:
how each claim the open streams hold (`StreamState.held_tokens`) ended, and
which of their teammates are removed (`store.claim_ends`). Each holder is then
told of each claim that ended under it, with the reason the history records
(once: a notice that also comes by NOTIFY is not told twice), and the stream
of a removed teammate ends as hearing of the removal would have ended it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from .board import Board
from .store import claim_ends
from .wake import WakeHub

log = logging.getLogger("corrald.reconcile")

AUDIT_S = 30.0  # between passes nobody asked for
GAP_WAIT_S = 2.0  # how long a gap's wake-up waits for its pass
RETRY_S = 1.0  # after a pass that failed (the database away): the next try


class Reconciler:
    """Runs passes when asked (`after_gap`, `request`) and every `audit_s`, until `close`."""

    def __init__(self, board: Board, hub: WakeHub, *, audit_s: float = AUDIT_S) -> None:
        self._board = board
        self._hub = hub
        self._audit_s = audit_s
        self._asked = asyncio.Event()
        self._one_at_a_time = asyncio.Lock()
        self._task: asyncio.Task | None = None
        self._failing = False
        self.passes = 0
        self.told = 0  # notices told from the history (each a notice the commit's did not bring)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="corral-reconcile")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def request(self) -> None:
        """A pass soon, off the caller's path."""
        self._asked.set()

    async def after_gap(self) -> None:
        """A pass now, waited for at most `GAP_WAIT_S`: the caller wakes the streams after
        it. One that cannot finish (the database away) is run again until one does."""
        try:
            await asyncio.wait_for(self.reconcile(), GAP_WAIT_S)
        except Exception as error:  # noqa: BLE001 (the next pass tries again)
            self._failed(error)
            self.request()

    async def reconcile(self) -> int:
        """One pass; returns how many notices it told."""
        async with self._one_at_a_time:
            streams = self._hub.streams()
            if not streams:
                return 0
            held = {stream: stream.held_tokens() for stream in streams}
            tokens = set().union(*held.values())
            names = {stream.name for stream in streams}
            found = await self._board.read(lambda conn: claim_ends.ended_claims(conn, tokens, names))
            self.passes += 1
            self._failing = False
            told = 0
            for stream, mine in held.items():
                if self._hub.stream_of(stream.name) is not stream:
                    continue  # gone, or superseded: a newer stream re-sends only live claims
                before = len(stream.claims_ended)
                stream.heard_late({token: end for token, end in found.ends.items() if token in mine})
                told += len(stream.claims_ended) - before
                if stream.name in found.removed:
                    stream.end("removed")  # after its notices, which the loop sends first
            if told:
                log.info("told %d claim-ended notice(s) this daemon had not heard", told)
            self.told += told
            return told

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._asked.wait(), self._audit_s)
            self._asked.clear()
            try:
                await self.reconcile()
            except Exception as error:  # noqa: BLE001 (the database away: try again soon)
                self._failed(error)
                await asyncio.sleep(RETRY_S)
                self._asked.set()

    def _failed(self, error: BaseException) -> None:
        if not self._failing:  # once per streak of failures
            log.warning("could not ask the claim history how held claims ended: %s", error)
        self._failing = True
