"""PutArtifact and GetArtifact: a file's bytes in, as they arrive, and out, a chunk at a time.

An upload's header is checked first (its name, media type and claim), before any
byte is read. Each data message is then hashed and handed to the blob store on a
worker thread, one at a time, so the daemon holds one message of an upload however
large the file; the upload is refused as soon as its size passes the limit. When the
stream ends, the stored content is attached in one writer job that copies no bytes.
A refusal at any point removes what the upload stored (an upload cut short by the
daemon's end is removed at its next start).

A download (here and the web board's) reads at most `CHUNK_BYTES` and reads the next only once the stream has
sent it, so a slow reader holds one chunk in the daemon, never the file.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncGenerator, AsyncIterator

from corral.v1 import corral_pb2 as pb

from .. import errors, validate
from ..board import Board
from ..board_artifacts import Uploaded
from ..credentials import Identity
from ..model import ArtifactRecord
from . import artifact_convert

# The most one ArtifactChunk carries. Each stream holds a few copies of one (the read,
# the message, gRPC's serialized bytes), so this sets what slow readers cost: 100 of
# them on a 16 MiB artifact grew the daemon by 31-32 MiB at 64 KiB, 56-60 MiB at
# 128 KiB and 113 MiB at 256 KiB (tests/contract/test_memory_artifacts.py bounds it at
# 64). A 256 MiB download is 4,096 messages: 2.0-2.6 s on SQLite (1.5 s at 128 KiB),
# 8 s on PostgreSQL (3.3 s at 256 KiB), where each read is a statement.
CHUNK_BYTES = 64 * 1024


async def put(board: Board, name: str, requests: AsyncIterator[pb.PutArtifactRequest]) -> pb.Artifact:
    """Stores the stream's file and attaches it to the task of the caller's live claim."""
    first = await anext(requests, None)
    if first is None or first.WhichOneof("part") != "header":
        raise errors.InvalidArgument("header", "the first message must be the header (task, claim, name)")
    header = first.header
    if not header.task_id:
        raise errors.InvalidArgument("header.task_id", "must not be empty")
    validate.check_claim_token("header.claim_token", header.claim_token)
    validate.artifact_name(header.name)
    media_type = validate.media_type(header.media_type)
    await board.check_artifact_claim(name, header.task_id, header.claim_token)

    limits = board.limits
    upload = await board.begin_upload()
    hasher = hashlib.sha256()
    size = 0

    def store(data: bytes) -> None:
        hasher.update(data)
        upload.write(data)

    try:
        async for request in requests:
            if request.WhichOneof("part") == "header":
                raise errors.InvalidArgument("header", "sent twice: only the first message is the header")
            data = request.data
            if len(data) > limits.artifact_chunk_max_bytes:
                raise errors.InvalidArgument(
                    "data", f"larger than {limits.artifact_chunk_max_bytes} bytes; send the file in smaller parts"
                )
            size += len(data)
            if size > limits.artifact_max_bytes:
                raise errors.ArtifactLimit(
                    f"artifact {header.name!r} is larger than this daemon's limit of {limits.artifact_max_bytes} bytes",
                    id=header.task_id,
                )
            if data:
                await asyncio.to_thread(store, data)
            del data, request  # only one message of the upload is held at a time
        digest = hasher.hexdigest()
        await asyncio.to_thread(upload.finish, digest)
    except BaseException:
        # Not awaited: the call may be ending (cancelled); the thread removes what was stored.
        asyncio.get_running_loop().run_in_executor(None, upload.abort)
        raise
    record = await board.attach_artifact(
        name, header.task_id, header.claim_token, Uploaded(header.name, media_type, size, digest)
    )
    return artifact_convert.artifact(record)


async def get(board: Board, request: pb.GetArtifactRequest, identity: Identity) -> AsyncIterator[pb.ArtifactChunk]:
    """The bytes of the task's current artifact of that name, in order."""
    if not request.task_id:
        raise errors.InvalidArgument("task_id", "must not be empty")
    if not request.name:
        raise errors.InvalidArgument("name", "must not be empty")
    reader = None if identity.is_lead or identity.is_viewer else identity.name
    found = await board.find_artifact(request.task_id, request.name, reader)
    async for data in contents(board, request.task_id, found):
        chunk = pb.ArtifactChunk(data=data)
        del data  # the message holds a copy: this one is not kept while the stream sends it
        yield chunk


async def contents(board: Board, task_id: str, found: ArtifactRecord) -> AsyncGenerator[bytes, None]:
    """The artifact's bytes in order, at most `CHUNK_BYTES` a read, each read made only
    when the consumer asks for the next (GetArtifact and the web board's download)."""
    offset = 0
    while offset < found.size:
        data = await board.read_artifact(found.sha256, offset, min(CHUNK_BYTES, found.size - offset))
        if not data:
            raise errors.CorralError(f"artifact {found.name!r} of task {task_id!r} is missing bytes")
        offset += len(data)
        handed = [data]
        del data
        # Yielded with no name left in this frame: a suspended generator keeps no copy of it.
        yield handed.pop()
