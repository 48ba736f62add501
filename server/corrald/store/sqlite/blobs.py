"""A SQLite board's artifact bytes: files in the state directory beside the database,
each named by its content's SHA-256 (`artifacts/ab/abcdef…`).

An upload writes a temporary file in that directory (`.upload-*`), then fsyncs it,
renames it to its content's name and fsyncs the directory, all before the writer
commits the artifact that names it: a name in the database always has its whole file.
Every method blocks (file I/O): the daemon calls them off its event loop. At start,
before anything is served, temporary files and files no artifact names (an upload cut
short, or refused at its attach) are removed.
"""

from __future__ import annotations

import logging
import os
import pathlib
import tempfile
from collections.abc import Callable

log = logging.getLogger("corrald.store")

_TEMPORARY_PREFIX = ".upload-"


class FileUpload:
    """One upload's temporary file, written as its bytes arrive."""

    def __init__(self, root: pathlib.Path) -> None:
        self._root = root
        fd, name = tempfile.mkstemp(prefix=_TEMPORARY_PREFIX, dir=root)
        self._path = pathlib.Path(name)
        self._file = os.fdopen(fd, "wb")

    def write(self, data: bytes) -> None:
        self._file.write(data)

    def finish(self, sha256: str) -> None:
        """Makes the bytes durable under their content's name (the same content stored
        before is replaced by identical bytes)."""
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        folder = self._root / sha256[:2]
        if not folder.is_dir():
            folder.mkdir(exist_ok=True)
            _fsync_directory(self._root)
        os.replace(self._path, folder / sha256)
        _fsync_directory(folder)

    def abort(self) -> None:
        self._file.close()
        self._path.unlink(missing_ok=True)


class FileBlobs:
    """The artifact files of the board whose database is in `root`'s parent."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root

    def prepare(self, named: Callable[[], set[str]]) -> None:
        """Creates the directory, and removes what no artifact names (`named()`: the
        SHA-256 of every named content): temporary files and unnamed blobs."""
        self.root.mkdir(mode=0o700, exist_ok=True)
        kept = named()
        removed = 0
        for entry in self.root.iterdir():
            if entry.name.startswith(_TEMPORARY_PREFIX):
                entry.unlink(missing_ok=True)
                removed += 1
            elif entry.is_dir() and len(entry.name) == 2:
                for blob in entry.iterdir():
                    if blob.name not in kept:
                        blob.unlink(missing_ok=True)
                        removed += 1
        if removed:
            log.info("removed %d artifact files no artifact names (uploads cut short or refused)", removed)

    def begin(self) -> FileUpload:
        return FileUpload(self.root)

    def read(self, conn: object, sha256: str, offset: int, limit: int) -> bytes:
        """Up to `limit` bytes of the content from `offset` (fewer only at its end); on a
        reader's thread (`conn`, the reader's connection, is not needed here)."""
        with open(self.root / sha256[:2] / sha256, "rb") as file:
            return os.pread(file.fileno(), limit, offset)

    def close(self) -> None:
        """Nothing is held open between calls."""

    def contents(self) -> set[str]:
        """The SHA-256 of every blob stored (tests and checks)."""
        return {blob.name for entry in self.root.iterdir() if entry.is_dir() for blob in entry.iterdir()}

    def temporary_files(self) -> list[str]:
        return [entry.name for entry in self.root.iterdir() if entry.name.startswith(_TEMPORARY_PREFIX)]


def _fsync_directory(path: pathlib.Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
