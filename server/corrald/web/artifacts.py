"""`GET /api/tasks/{task_id}/artifacts/{name}`: a task's current artifact of that name,
as a download, for the links of the task drawer.

An artifact is whatever a teammate uploaded, with whatever media type it named: an
HTML page or an SVG with a script in it must never run in the board's origin, where
it could read the board and act with the session. So the answer is always a
download and never a document:

- `Content-Type: application/octet-stream`, not the stored type. With
  `Content-Disposition: attachment` a browser saves the file whatever its type, but
  the type also rules what the bytes may become when something other than a click
  asks for them (`<script src>`, `<link rel=stylesheet>`, `<img>`, a plugin): with
  `nosniff`, octet-stream is none of those. The stored type is in the task's detail
  and the drawer, which is where a reader wants it; the saved file keeps its name's
  extension, which is what the reader's system goes by.
- `Content-Disposition: attachment` with the name's last segment as the file name
  (`filename*`, RFC 6266/8187, UTF-8 percent-encoded; `filename` an ASCII fallback).
- `X-Content-Type-Options: nosniff`, and a CSP of its own, `default-src 'none';
  sandbox`: were the bytes ever shown, they could load nothing and run nothing, in
  an opaque origin. `Cross-Origin-Resource-Policy: same-origin` keeps other sites
  from embedding them.
- `Content-Length` the artifact's size and `ETag` its SHA-256.

The bytes are streamed as GetArtifact streams them (`service.artifacts.contents`):
one read of at most 256 KiB, the next only once the socket took it, so a download
holds one chunk in the daemon however large the file. Sessions read as the board's
reads do: a lead or a viewer may read any task's artifacts.
"""

from __future__ import annotations

import contextlib
import logging
import urllib.parse

from aiohttp import web

from .. import errors
from ..board import Board
from ..model import ArtifactRecord
from ..service.artifacts import contents
from .actions import http_status
from .guard import json_error

log = logging.getLogger("corrald.web")

ARTIFACT_CSP = "default-src 'none'; sandbox"
FALLBACK_NAME = "artifact"
# Characters the quoted ASCII `filename` fallback does not carry (a browser that reads
# it could take `%` for an escape; quotes and backslashes would end or escape the string).
_UNSAFE_IN_FALLBACK = frozenset('"\\%;')


def disposition(name: str) -> str:
    """`attachment` named after the artifact name's last segment."""
    basename = name.rpartition("/")[2] or FALLBACK_NAME
    fallback = "".join(
        char if char.isascii() and char.isprintable() and char not in _UNSAFE_IN_FALLBACK else "_" for char in basename
    )
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{urllib.parse.quote(basename, safe='')}"


def download_headers(found: ArtifactRecord) -> dict[str, str]:
    return {
        "Content-Type": "application/octet-stream",
        "Content-Disposition": disposition(found.name),
        "Content-Security-Policy": ARTIFACT_CSP,
        "X-Content-Type-Options": "nosniff",
        "Cross-Origin-Resource-Policy": "same-origin",
        "ETag": f'"{found.sha256}"',
    }


async def download(board: Board, request: web.Request) -> web.StreamResponse:
    task_id, name = request.match_info["task_id"], request.match_info["name"]
    try:
        found = await board.find_artifact(task_id, name, None)
    except errors.CorralError as error:
        return json_error(http_status(error), error.message)
    response = web.StreamResponse(headers=download_headers(found))
    response.content_length = found.size
    await response.prepare(request)
    if request.method == "HEAD":
        return response
    chunks = contents(board, task_id, found)
    try:
        async with contextlib.aclosing(chunks):
            async for data in chunks:
                await response.write(data)
    except ConnectionError as error:  # the reader went away: nothing more to send
        log.info("ended an artifact download: %s", type(error).__name__)
        return response
    except errors.CorralError as error:
        # The headers are sent: a connection dropped short of Content-Length is how the
        # reader learns the file is not whole.
        log.error("could not send artifact %r of task %r: %s", name, task_id, error.message)
        if request.transport is not None:
            request.transport.abort()
        return response
    await response.write_eof()
    return response
