"""A claim's live output: the buffer its handler writes to, and the flusher that
appends it to the attempt's output on the daemon (AppendOutput, or the Session op
`output` while a Session stream is open).

The flusher runs in the background (an asyncio task in `corral.aio`, a thread in
`corral`) from the first write on, and sends a batch when `_outputbuffer` says one
is due, at most 64 KiB an append. Nothing a handler does waits on it but the claim's
finish, which flushes first so the output is whole when the attempt ends. An
OUTPUT_LIMIT refusal stops the claim's output (one warning); a dead claim stops it
quietly. An append that failed for a while only (the daemon unreachable or
restarting, OVERLOADED) is sent again for up to APPEND_RETRY_S; any other failure is
logged and the piece dropped: output never fails the handler. (A unary append whose
answer was lost may so be stored twice; a Session op is answered from its record.)
"""

from __future__ import annotations

import logging
import time

from corral._claimstate import DEAD_CLAIM_ERRORS
from corral._errors import CorralError
from corral._outputbuffer import AsyncAppend, OutputBuffer
from corral._primitives import AsyncFuture, AsyncPump, async_wait_future
from corral._retry import async_retrying

__all__ = ["APPEND_RETRY_S", "FLUSH_WAIT_S", "OUTPUT_LIMIT", "ClaimOutput"]

# The SDK's own records about output: a log capture never routes these back into output.
_log = logging.getLogger("corral.output")

OUTPUT_LIMIT = "OUTPUT_LIMIT"
# How long an append that failed transiently is sent again before its piece is dropped.
APPEND_RETRY_S = 10.0
# How long a claim's finish waits for its output to be sent before going on without it.
FLUSH_WAIT_S = 30.0


class ClaimOutput:
    """The output of one claim: `write` from any thread, `flush` before it finishes,
    `stop` once it ended."""

    def __init__(self, task_id: str, append: AsyncAppend) -> None:
        self._task_id = task_id
        self._append = append
        self._buffer = OutputBuffer()
        self._pump = AsyncPump(self._run, name=f"corral-output-{task_id}")
        self._failing = False  # the last append failed: log further failures quietly

    def write(self, text: str) -> None:
        """Buffer `text` (UTF-8) for the next batch; never waits on the network."""
        if self._buffer.write(text.encode("utf-8"), time.monotonic()):
            self._pump.poke()

    async def flush(self) -> None:
        """Send what is buffered now and wait until it is sent (or given up on)."""
        done: AsyncFuture[None] = AsyncFuture()
        if not self._buffer.ask_flush(done):
            return
        self._pump.poke()
        try:
            await async_wait_future(done, FLUSH_WAIT_S)
        except TimeoutError:
            _log.warning("task %s: output not sent within %gs; going on without it", self._task_id, FLUSH_WAIT_S)

    def stop(self) -> None:
        """Drop what is buffered and every later write; the flusher ends."""
        self._buffer.stop()
        self._pump.wake()  # the flusher settles any flush waiting, on its own thread (or the loop)

    async def close(self) -> None:
        """`stop`, and wait for the flusher to end."""
        self.stop()
        await self._pump.join()

    async def _run(self) -> None:
        while not self._buffer.stopped:
            pieces, waiters = self._buffer.take(time.monotonic())
            if pieces:
                for piece in pieces:
                    if not await self._send(piece):
                        break
                _settle(waiters + self._buffer.sent())
                continue
            await self._pump.wait(self._buffer.seconds_until_due(time.monotonic()))
        _settle(self._buffer.drain_waiters())

    async def _send(self, data: bytes) -> bool:
        """Append one piece; False once the claim's output is over (stopped)."""
        try:
            appended: tuple[int, int] = await async_retrying(APPEND_RETRY_S)(self._append, data)
        except DEAD_CLAIM_ERRORS as exc:
            _log.debug("task %s: output stopped, the claim ended (%s)", self._task_id, exc)
            self._buffer.stop()
            return False
        except CorralError as exc:
            if exc.reason == OUTPUT_LIMIT:
                _log.warning("task %s: the attempt's output reached the daemon's limit; no more is sent", self._task_id)
                self._buffer.stop()
                return False
            log = _log.debug if self._failing else _log.warning
            log("task %s: %d bytes of output not appended (%s)", self._task_id, len(data), exc)
            self._failing = True
            return True
        self._failing = False
        _log.debug(
            "task %s: appended %d bytes to attempt %d's output (%d bytes now)", self._task_id, len(data), *appended
        )
        return True


def _settle(waiters: list[AsyncFuture[None]]) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)
