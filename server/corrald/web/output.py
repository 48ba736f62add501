"""`GET /api/tasks/{task_id}/output`: a task's live output, as server-sent events, for
the task drawer.

A stream per open drawer rather than events on the board's feed: output is wanted
for one task at a time, by the drawer showing it, while the feed carries the whole
board to every page; a stream of its own resumes at its own position (its SSE id is
`ATTEMPT:OFFSET`, in bytes), ends when the attempt does, and its follower stops when
the drawer or the page closes (the browser drops the connection, aiohttp cancels the
handler, `finally` closes the tail).

What it streams is TailOutput's (`service.output.tail`, following): reads of at most
one chunk, each made only once the last was sent, woken by the commit of an append
or of the attempt's end, so a reader holds one chunk in the daemon. The bytes are
decoded here, incrementally: a character split across appends is sent whole once its
last byte is stored, invalid bytes are replaced. An event's id is the offset of the
bytes its text decoded, so a stream resumed there splits no character.

Events: `start` {attempt, offset, omitted}: where the text begins (without an offset,
at most the last `WINDOW_BYTES` stored; `omitted` counts the bytes before it);
`output` {text}, id `ATTEMPT:OFFSET`; `end` {attempt, offset} once the attempt has
ended, and the stream ends. `?attempt=N` (0, the default: the latest) and
`?offset=N` choose where; a browser's `Last-Event-ID` overrides both. The slots, the
response, the pump's task and its end are the event feed's too (`sse`).
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import json
from collections.abc import AsyncGenerator
from typing import cast

from aiohttp import web
from aiohttp_sse import EventSourceResponse

from corral.v1 import corral_pb2 as pb

from .. import errors
from ..board import Board
from ..credentials import Identity
from ..service.output import tail
from ..wake import WakeHub
from .actions import http_status
from .config import WebConfig
from .guard import is_count, json_error
from .sse import RECONNECT_MS, SseStreams, resumed_from

WINDOW_BYTES = 256 * 1024  # what a drawer opened on a long output starts with, at most
ATTEMPT_MAX = 2**31 - 1  # an attempt number is an int32 on the wire


def _continuation_bytes(data: bytes) -> int:
    """How many bytes at the start of `data` continue a character begun before it (at most 3)."""
    count = 0
    while count < min(3, len(data)) and data[count] & 0xC0 == 0x80:
        count += 1
    return count


def _position(request: web.Request) -> tuple[int, int | None] | web.Response:
    """The attempt (0: the latest) and the offset asked for (None: the window's start)."""
    resumed = resumed_from(request)
    if resumed:
        attempt_text, colon, offset_text = resumed.partition(":")
        if not (colon and is_count(attempt_text) and is_count(offset_text)) or int(attempt_text) > ATTEMPT_MAX:
            return json_error(400, "Last-Event-ID must be ATTEMPT:OFFSET, two non-negative integers")
        return int(attempt_text), int(offset_text)
    attempt, offset = request.query.get("attempt", "0"), request.query.get("offset")
    if not is_count(attempt) or int(attempt) > ATTEMPT_MAX:
        return json_error(400, f"attempt must be an integer from 0 (the latest) to {ATTEMPT_MAX}")
    if offset is not None and not is_count(offset):
        return json_error(400, "offset must be a non-negative integer")
    return int(attempt), None if offset is None else int(offset)


class OutputStreams:
    def __init__(self, board: Board, hub: WakeHub, config: WebConfig) -> None:
        self._board = board
        self._hub = hub
        self.streams = SseStreams(
            config, "output streams", "task output stream", "corrald-web-output", drop_on_failure=False
        )

    def end_for(self, identity: Identity | None = None) -> None:
        """Ends the open streams of `identity` (every stream with None)."""
        self.streams.end_for(identity)

    async def serve(self, request: web.Request, identity: Identity) -> web.StreamResponse:
        position = _position(request)
        if isinstance(position, web.Response):
            return position
        attempt, offset = position
        try:
            # Lead and viewer sessions may read any task's output, as TailOutput lets them.
            found = await self._board.output_attempt(request.match_info["task_id"], attempt, None)
        except errors.CorralError as error:
            return json_error(http_status(error), error.message)
        if offset is not None and offset > found.size:
            return json_error(
                400, f"offset is past the end of attempt {found.attempt}'s output ({found.size} bytes stored)"
            )
        start = max(0, found.size - WINDOW_BYTES) if offset is None else offset
        tailed = pb.TailOutputRequest(
            task_id=request.match_info["task_id"], attempt=found.attempt, offset=start, follow=True
        )
        pump = functools.partial(self._pump, tailed=tailed, identity=identity, omitted=start if offset is None else 0)
        return await self.streams.serve(request, identity, pump)

    async def _pump(
        self, stream: EventSourceResponse, tailed: pb.TailOutputRequest, identity: Identity, omitted: int
    ) -> None:
        attempt = tailed.attempt
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        # A window may begin inside a character: the rest of it is not shown.
        skip = omitted > 0
        start = {"attempt": attempt, "offset": tailed.offset, "omitted": omitted}
        await stream.send(json.dumps(start), event="start", retry=RECONNECT_MS)
        # `tail` is an async generator: closing it here ends its wait on the wake hub.
        follower = cast(AsyncGenerator[pb.OutputChunk, None], tail(self._board, self._hub, tailed, identity))
        async with contextlib.aclosing(follower) as chunks:
            async for chunk in chunks:
                data = bytes(chunk.data)
                if skip and data:
                    data, skip = data[_continuation_bytes(data) :], False
                text = decoder.decode(data, final=chunk.end)
                # The bytes of a character not yet whole are sent with the append that ends it.
                decoded_to = chunk.offset + len(chunk.data) - len(decoder.getstate()[0])
                if text:
                    payload = json.dumps({"text": text}, ensure_ascii=False)
                    await stream.send(payload, id=f"{attempt}:{decoded_to}", event="output")
                if chunk.end:
                    ended = json.dumps({"attempt": attempt, "offset": chunk.offset})
                    await stream.send(ended, id=f"{attempt}:{chunk.offset}", event="end")
                    break
