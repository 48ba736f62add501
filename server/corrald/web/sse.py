"""What the web board's server-sent event streams share: the board's event feed (`feed`)
and a drawer's task output (`output`).

Each kind keeps its open streams in an `SseStreams`: bounded per identity (`slots`), each
an `EventSourceResponse` that sends a keepalive comment every `heartbeat_s` and gives a
write `SEND_TIMEOUT_S` to drain, and each written by a pump of its own, a task that runs
until the pump returns or fails, the browser goes (aiohttp cancels the handler), or the
stream is ended (`end_for`: a session logged out, a viewer removed, the daemon drains).
A stream's first event sets the browser's reconnection delay (`RECONNECT_MS`); on a
reconnection the browser's EventSource sends the id of the last event it got
(`resumed_from`), whose meaning is the kind's own (an event's seq, an ATTEMPT:OFFSET).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp_sse import EventSourceResponse

from ..credentials import Identity
from .config import WebConfig
from .slots import StreamSlots

log = logging.getLogger("corrald.web")

SEND_TIMEOUT_S = 5.0
RECONNECT_MS = 1000  # how soon a browser whose stream broke tries again

Pump = Callable[[EventSourceResponse], Awaitable[None]]


def resumed_from(request: web.Request) -> str | None:
    """The id of the last event the browser got before its stream broke (None: a new stream)."""
    return request.headers.get("Last-Event-ID") or None


class SseStreams:
    """The open streams of one kind, by the identity each serves. `noun` names one stream in
    a refusal ("boards"); `what` in the log line of one that failed ("board event stream");
    `task_name` is its pump's. With `drop_on_failure`, a stream whose pump fails (a send
    timed out, a read failed) drops its connection, so the browser resumes at once."""

    def __init__(self, config: WebConfig, noun: str, what: str, task_name: str, *, drop_on_failure: bool) -> None:
        self._config = config
        self._slots = StreamSlots(config, noun)
        self._what = what
        self._task_name = task_name
        self._drop_on_failure = drop_on_failure
        self.clients: dict[EventSourceResponse, Identity] = {}

    def __len__(self) -> int:
        return len(self.clients)

    def end_for(self, identity: Identity | None = None) -> None:
        """Ends the open streams of `identity` (every stream with None)."""
        for stream, holder in list(self.clients.items()):
            if identity is None or holder == identity:
                stream.stop_streaming()

    async def serve(
        self, request: web.Request, identity: Identity, pump: Pump, *, on_open: Callable[[], None] | None = None
    ) -> web.StreamResponse:
        """A stream for `identity` written by `pump`, unless its slots are taken (then the
        refusal); `on_open` runs once it is open. Returns when the stream has ended."""
        refusal = self._slots.refusal(identity)
        if refusal is not None:
            return refusal
        with self._slots.held(identity):
            stream = EventSourceResponse(ping_interval=self._config.heartbeat_s, send_timeout=SEND_TIMEOUT_S)
            await stream.prepare(request)
            self.clients[stream] = identity
            if on_open is not None:
                on_open()
            pumping = asyncio.create_task(self._pumped(stream, pump), name=self._task_name)
            try:
                await stream.wait()
            finally:
                pumping.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pumping
                self.clients.pop(stream, None)
            return stream

    async def _pumped(self, stream: EventSourceResponse, pump: Pump) -> None:
        try:
            await pump(stream)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 (a client gone, a send timed out, a failed read)
            log.info("ended a %s: %s", self._what, type(error).__name__)
            if self._drop_on_failure:
                _abort(stream)
        stream.stop_streaming()


def _abort(stream: EventSourceResponse) -> None:
    """Drops the connection, so the browser reconnects (with its Last-Event-ID)."""
    request = stream._req  # the response's own request: aiohttp keeps it while the stream is open
    if request is not None and request.transport is not None:
        request.transport.abort()
