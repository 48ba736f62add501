"""What the sync and asyncio clients share about artifacts: the upload's messages,
read from bytes or a file a piece at a time, and a download's destination, a
temporary file beside the target renamed over it only once every byte arrived
and checked.

Both flavours read and write files with plain blocking calls, one piece (at most
1 MiB) at a time: a piece is quick to read from a local disk, and the gRPC call
that sends it is the slow part."""

from __future__ import annotations

import contextlib
import hashlib
import mimetypes
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, NoReturn

from corral._errors import CorralError, FieldViolation, InvalidArgument
from corral.v1 import corral_pb2 as pb

__all__ = [
    "CHUNK_BYTES",
    "DEFAULT_MEDIA_TYPE",
    "TRANSFER_TIMEOUT_S",
    "ArtifactSource",
    "Download",
    "artifact_source",
    "media_type_for",
    "upload_requests",
]

# The most one PutArtifactRequest.data may carry.
CHUNK_BYTES = 1024 * 1024
DEFAULT_MEDIA_TYPE = "application/octet-stream"
# The deadline of one upload or download: the largest artifact the daemon takes by
# default (256 MiB) at 100 KiB/s fits in it, and a stalled transfer still ends.
TRANSFER_TIMEOUT_S = 3600.0

ArtifactSource = Callable[[], Iterator[bytes]]
"""Opens the bytes of an upload afresh (an upload sent again reads them again)."""


def artifact_source(data_or_path: bytes | str | os.PathLike[str]) -> ArtifactSource:
    """The pieces of `data_or_path`: bytes as they are, a str as UTF-8, a path's file
    read a piece at a time (never whole). Raises InvalidArgument for anything else,
    and for a path that names no readable file, before any call."""
    if isinstance(data_or_path, (bytes, bytearray, memoryview)):
        data = bytes(data_or_path)
        return lambda: _slices(data)
    if isinstance(data_or_path, str):
        text = data_or_path.encode("utf-8")
        return lambda: _slices(text)
    if isinstance(data_or_path, os.PathLike):
        path = Path(data_or_path)
        if not path.is_file():
            _refuse("data_or_path", f"{str(path)!r} is not a readable file")
        return lambda: _file_pieces(path)
    _refuse("data_or_path", f"must be bytes, str or a path, not {type(data_or_path).__name__}")


def _slices(data: bytes) -> Iterator[bytes]:
    view = memoryview(data)
    for start in range(0, len(data), CHUNK_BYTES):
        yield bytes(view[start : start + CHUNK_BYTES])


def _file_pieces(path: Path) -> Iterator[bytes]:
    with path.open("rb") as file:
        while piece := file.read(CHUNK_BYTES):
            yield piece


def media_type_for(name: str, media_type: str | None) -> str:
    """`media_type` if given, else what the name's extension says, else octet-stream."""
    if media_type is not None:
        return media_type
    guessed, _ = mimetypes.guess_type(name, strict=False)
    return guessed or DEFAULT_MEDIA_TYPE


def upload_requests(
    task_id: str, token: str, name: str, media_type: str, source: ArtifactSource
) -> Iterator[pb.PutArtifactRequest]:
    """A PutArtifact stream: the header, then the bytes a piece at a time."""
    header = pb.ArtifactHeader(task_id=task_id, claim_token=token, name=name, media_type=media_type)
    yield pb.PutArtifactRequest(header=header)
    for piece in source():
        yield pb.PutArtifactRequest(data=piece)


class Download:
    """Where a download's pieces go, hashed as they come: memory, or a temporary file
    beside `to` that `finish` renames onto it; a download that fails or is abandoned
    leaves no file. `sha256`, when known, is checked before anything is kept."""

    def __init__(self, task_id: str, name: str, to: str | os.PathLike[str] | None, sha256: str | None) -> None:
        self._label = f"artifact {name!r} of task {task_id!r}"
        self._expected = sha256.lower() if sha256 else None
        self._hasher = hashlib.sha256()
        self._pieces: list[bytes] = []
        self._target = Path(to) if to is not None else None
        self._file: IO[bytes] | None = None
        self._temp: Path | None = None

    def __enter__(self) -> Download:
        if self._target is not None:
            handle, temp = tempfile.mkstemp(dir=self._target.parent, prefix=f".{self._target.name}.", suffix=".part")
            self._file, self._temp = os.fdopen(handle, "wb"), Path(temp)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._file is not None:
            self._file.close()
        if self._temp is not None:
            with contextlib.suppress(FileNotFoundError):
                self._temp.unlink()  # renamed by finish() unless something failed

    def write(self, piece: bytes) -> None:
        self._hasher.update(piece)
        if self._file is not None:
            self._file.write(piece)
        else:
            self._pieces.append(piece)

    def finish(self) -> bytes | Path:
        """Check the bytes, then the file renamed onto the target (its path), or the bytes."""
        digest = self._hasher.hexdigest()
        if self._expected is not None and digest != self._expected:
            raise CorralError(
                f"{self._label} has SHA-256 {digest}, not the {self._expected} expected"
                " (superseded by a newer upload of that name, or damaged)"
            )
        if self._file is None or self._temp is None or self._target is None:
            return b"".join(self._pieces)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self._temp, self._target)
        self._temp = None
        return self._target


def _refuse(field: str, why: str) -> NoReturn:
    raise InvalidArgument(f"{field}: {why}", field_violations=(FieldViolation(field, why),))
