"""Wake-ups from the board's other daemons: LISTEN on one connection, on the daemon's loop.

A commit on another daemon that changes what someone may receive sends one
NOTIFY (`storage.wake_payload`); here it becomes the same `Wakes` a local
commit gives the wake hub. Notifications are not stored: while the listening
connection is down nothing is heard, so after every (re)connection the daemon
wakes all its streams and re-arms its reaper ("everything changed"), and the
Idle poll interval stays the backstop. Such a gap, and a notification too big
to say what changed, may also hide a claim that ended under a holder here: the
daemon's `on_gap` (`reconcile.Reconciler.after_gap`) tells those from the claim
history before the streams are woken. A silently dead connection is found by
a notification this daemon sends itself every `PING_S` seconds: one not back
within two rounds means the connection is replaced.

The LISTEN connection needs a real session: it must not go through a
transaction-pooling proxy (PgBouncer in transaction mode drops LISTEN).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable

import psycopg

from ... import failpoints
from ...model import ClaimEnd, ClaimEndReason
from ...txn import Wakes
from .storage import describe, notify_channel
from .target import PgTarget

log = logging.getLogger("corrald.store")

PING_S = 5.0
RECONNECT_MAX_S = 5.0


def listener_name(daemon_id: str) -> str:
    """The listening connection's application_name: which daemon it belongs to, for operators."""
    return f"corrald-listen {daemon_id}"[:63]


def wakes_from(payload: dict, now_ms: int) -> Wakes:
    """The Wakes another daemon's commit told of (see storage.wake_payload)."""
    ready = payload.get("r", {})
    wakes = Wakes(
        ready_roles=collections.Counter(ready),
        teammates=set(payload.get("t", ())),
        may_claim=set(payload.get("m", ())),
        everyone=bool(payload.get("a")),
        ended=dict(payload.get("x", {})),
        events=bool(payload.get("e")),
        streams_opened=set(payload.get("o", ())),
        # "Everything changed" (a gap, or too much to say) may hide a removed credential.
        credentials=bool(payload.get("k") or payload.get("a")),
        output=set(payload.get("w", ())),
    )
    if payload.get("n") is not None:
        wakes.deadline(int(payload["n"]))
    for name, ends in payload.get("c", {}).items():
        for task_id, token, reason, detail in ends:
            wakes.claim_ended(name, ClaimEnd(task_id, token, ClaimEndReason(reason), detail))
    if wakes.everyone:
        wakes.deadline(now_ms)  # the reaper looks again
    return wakes


class WakeListener:
    """Runs until `close`; tells `deliver` (on the loop) of each other daemon's commit."""

    def __init__(
        self,
        target: PgTarget,
        daemon_id: str,
        deliver: Callable[[Wakes], None],
        now_ms: Callable[[], int],
        on_state: Callable[[bool], None] = lambda up: None,
        on_gap: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._target = target
        self._daemon_id = daemon_id
        self._deliver = deliver
        self._now_ms = now_ms
        self._on_state = on_state
        self._on_gap = on_gap
        self._channel = notify_channel(target.schema)
        self._task: asyncio.Task | None = None
        self._conn: psycopg.AsyncConnection | None = None
        self.listening = False
        self.heard = 0  # notifications from other daemons
        self.reconnects = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="corral-listener")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._drop()

    async def _run(self) -> None:
        backoff = 0.1
        first = True
        while True:
            try:
                await self._listen(first)  # returns only by raising
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 (any failure: reconnect)
                if self.listening or first:
                    log.warning("wake-up listener lost its connection: %s", describe(error))
                if self.listening:  # a connection that had worked: the backoff starts again
                    backoff = 0.1
            first = False
            self._set_listening(False)
            await self._drop()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, RECONNECT_MAX_S)

    async def _listen(self, first: bool) -> None:
        if not first:  # in a thread: a test's delay holds the gap open, not the loop
            await asyncio.to_thread(failpoints.hit, "listener_reconnect")
        conn = self._conn = await psycopg.AsyncConnection.connect(
            self._target.dsn,
            autocommit=True,
            application_name=listener_name(self._daemon_id),
            connect_timeout=5,
        )
        await conn.execute(f"LISTEN {self._channel}")
        self._set_listening(True)
        if not first:  # what was sent while nobody listened is lost: everyone looks again
            self.reconnects += 1
            log.info("wake-up listener reconnected")
            await self._gap()  # LISTEN runs first: what the history lacks, a NOTIFY brings
            self._deliver(wakes_from({"a": 1, "e": 1}, self._now_ms()))
        unanswered = 0
        while True:
            ping = f"{time.monotonic_ns()}"
            await conn.execute(
                "SELECT pg_notify(%s, %s)", (self._channel, json.dumps({"d": self._daemon_id, "p": ping}))
            )
            answered = False
            async for notice in conn.notifies(timeout=PING_S):
                payload = json.loads(notice.payload)
                if "p" in payload:  # a daemon's ping to itself
                    answered = answered or (payload.get("d") == self._daemon_id and payload["p"] == ping)
                    continue
                if payload.get("d") == self._daemon_id:
                    continue
                self.heard += 1
                log.debug("wake-up from daemon %s: %s", payload.get("d"), notice.payload)
                if payload.get("a"):  # too much to say (storage.wake_payload): its notices are not here
                    await self._gap()
                self._deliver(wakes_from(payload, self._now_ms()))
            unanswered = 0 if answered else unanswered + 1
            if unanswered >= 2:
                raise ConnectionError(f"no notification came back in {2 * PING_S:.0f} s")

    async def _gap(self) -> None:
        """Something was not heard: claims that ended meanwhile are told from the history."""
        if self._on_gap is not None:
            await self._on_gap()

    def _set_listening(self, up: bool) -> None:
        if up != self.listening:
            self.listening = up
            self._on_state(up)

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()
