"""How every server stream sends: one message at a time, each taken within a deadline.

A write completes only once the client's HTTP/2 window has room for the
message, so a client that stops reading holds its stream's writer at the
first message that does not fit. Waiting on each write keeps what the daemon
holds for a stream to that message and what the handler has read but not yet
sent (server/DESIGN.md, "Memory per client"); the deadline ends a stream
whose client has stopped reading, so it gives back its lane place and its
handler, and the client resumes (Watch from its last seq, Idle by reopening).
"""

from __future__ import annotations

import asyncio

import grpc

from .. import errors


class StreamSender:
    """One server stream's writes, after its headers (sent on their own, see
    interceptor._serve_stream); `send` raises `SlowConsumer` when the client has
    not taken a message within `timeout_s`."""

    __slots__ = ("_context", "_timeout_s")

    def __init__(self, context: grpc.aio.ServicerContext, timeout_s: float) -> None:
        self._context = context
        self._timeout_s = timeout_s

    async def send(self, message) -> None:
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._context.write(message)
        except TimeoutError:
            raise errors.SlowConsumer(
                f"the client took no message for {self._timeout_s:g} s; reopen the stream (Watch: after the last seq)"
            ) from None
