"""TailOutput: an attempt's output from an offset, then (following) each append as it
commits, and an `end` chunk once the attempt has ended.

The shape of Watch: take the wake hub's event for the claim, read, send what was
there, and wait on the event only when nothing was. Each read is at most one chunk
(`CHUNK_BYTES`) and the next is made only once the stream has sent it, so a slow
reader holds one chunk in the daemon, never the attempt's whole output. The event is
set after the COMMIT of an append to that claim or of the job that ended it (on a
PostgreSQL board, another daemon's too: its NOTIFY names the claim), and of no other
commit: a follower of one task sleeps through the rest of the board's work.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from corral.v1 import corral_pb2 as pb

from .. import errors
from ..board import Board
from ..credentials import Identity
from ..wake import WakeHub

CHUNK_BYTES = 64 * 1024  # the most one OutputChunk carries


async def tail(board: Board, hub: WakeHub, request: pb.TailOutputRequest, identity: Identity) -> AsyncIterator:
    if not request.task_id:
        raise errors.InvalidArgument("task_id", "must not be empty")
    if request.attempt < 0:
        raise errors.InvalidArgument("attempt", "must not be negative (0: the latest)")
    if request.offset < 0:
        raise errors.InvalidArgument("offset", "must not be negative")
    reader = None if identity.is_lead or identity.is_viewer else identity.name
    found = await board.output_attempt(request.task_id, request.attempt, reader)
    if request.offset > found.size:
        raise errors.InvalidArgument(
            "offset", f"past the end of attempt {found.attempt}'s output ({found.size} bytes stored)"
        )
    offset = request.offset
    while not hub.closing:
        moved = hub.output_moved(found.fence)  # taken before reading, so no append slips between
        page = await board.read_output(found.fence, offset, CHUNK_BYTES)
        if page.data:
            yield pb.OutputChunk(attempt=found.attempt, offset=offset, data=page.data)
            offset += len(page.data)
            continue
        if page.ended:
            yield pb.OutputChunk(attempt=found.attempt, offset=offset, end=True)
            return
        if not request.follow:
            return
        await moved.wait()
