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
    not taken a message within `timeout_s`. `close` when the stream is done.

    A timer per write would cost a timer handle, its place in the loop's heap
    and its cancellation on every message of a busy stream. The deadline is
    kept lazily instead: one timer, re-armed for the write then pending only
    when it fires early, so a stream pays about one timer per `timeout_s`.
    Expiry cancels the sending task, as `asyncio.timeout` does, and the
    cancellation is turned into `SlowConsumer` if nobody else cancelled it too.
    """

    __slots__ = ("_context", "_timeout_s", "_loop", "_task", "_since", "_timer", "_expired")

    def __init__(self, context: grpc.aio.ServicerContext, timeout_s: float) -> None:
        self._context = context
        self._timeout_s = timeout_s
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task | None = None
        self._since: float | None = None  # when the pending write began
        self._timer: asyncio.TimerHandle | None = None
        self._expired = False

    async def send(self, message) -> None:
        self._since = since = self._loop.time()
        if self._timer is None:
            self._task = asyncio.current_task()
            self._timer = self._loop.call_at(since + self._timeout_s, self._check)
        try:
            await self._context.write(message)
        except asyncio.CancelledError:
            if self._expired:
                self._expired = False
                assert self._task is not None
                if self._task.uncancel() == 0:  # ours alone: the client stopped reading
                    raise errors.SlowConsumer(
                        f"the client took no message for {self._timeout_s:g} s;"
                        " reopen the stream (Watch: after the last seq)"
                    ) from None
            raise
        finally:
            self._since = None

    def _check(self) -> None:
        self._timer = None
        since = self._since
        if since is None or self._task is None:
            return  # no write pending: the next one arms the timer again
        due = since + self._timeout_s
        if self._loop.time() + 0.001 >= due:  # a timer may run a hair early
            self._expired = True
            self._task.cancel()
        else:
            self._timer = self._loop.call_at(due, self._check)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
