"""The state directory: one owner at a time, private permissions, no symlinks."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import pathlib
import secrets
import stat


class StateDirError(Exception):
    """The state directory cannot be used; the message says why."""


@dataclasses.dataclass(frozen=True)
class StatePaths:
    root: pathlib.Path

    @property
    def database(self) -> pathlib.Path:
        return self.root / "corral.sqlite3"

    @property
    def lock(self) -> pathlib.Path:
        return self.root / "corrald.lock"

    @property
    def socket(self) -> pathlib.Path:
        return self.root / "corral.sock"

    @property
    def lead_token(self) -> pathlib.Path:
        return self.root / "lead.token"

    @property
    def board_id(self) -> pathlib.Path:
        """The id of the PostgreSQL board this directory's daemon serves (absent for SQLite)."""
        return self.root / "board.id"

    @property
    def board_store(self) -> pathlib.Path:
        """Where that board is: its DSN without the password, and its schema (for messages)."""
        return self.root / "board.store"

    @property
    def board_creator(self) -> pathlib.Path:
        """Where the daemon that created that board runs, when another did: JSON with its
        `host` and `state_dir`, whose lead.token is the board's (read by the CLI)."""
        return self.root / "board.creator"

    @property
    def web_sessions(self) -> pathlib.Path:
        """The web board's sessions, by the hash of their cookie (see web/sessions.py)."""
        return self.root / "web.sessions"

    @property
    def web_address(self) -> pathlib.Path:
        """The web board's URL while the daemon serves one (read by `corral web`)."""
        return self.root / "web.address"


class StateDir:
    """Holds an exclusive flock on the lock file for the daemon's life."""

    def __init__(self, root: pathlib.Path) -> None:
        self.paths = StatePaths(root.absolute())
        self._lock_fd: int | None = None

    def acquire(self) -> None:
        root = self.paths.root
        try:
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise StateDirError(f"state directory {root} exists and is not a directory") from None
        except PermissionError as error:
            raise StateDirError(f"cannot create state directory {root}: {error.strerror}") from None
        info = root.lstat()
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            raise StateDirError(f"state directory {root} is not a plain directory")
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise StateDirError(f"state directory {root} is writable by group or others; chmod 700 it")
        os.chmod(root, 0o700)
        for path in (self.paths.database, self.paths.lead_token, self.paths.lock):
            if path.is_symlink():
                raise StateDirError(f"{path} is a symbolic link; refusing to follow it")
        fd = os.open(self.paths.lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StateDirError(f"state directory {root} is in use by corrald pid {holder}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def lead_token(self) -> str:
        """The Lead's credential: made on first start, private to the owner."""
        path = self.paths.lead_token
        if path.exists():
            # A token someone left readable by others (copied in, or made by
            # hand) is a credential on show: make it the owner's alone.
            if path.stat().st_mode & 0o077:
                os.chmod(path, 0o600)
            return path.read_text().strip()
        token = "corral-lead-" + secrets.token_urlsafe(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(token)
        return token

    def board_id(self) -> str | None:
        """The PostgreSQL board this directory was bound to, if any."""
        path = self.paths.board_id
        return path.read_text().strip() if path.exists() else None

    def bind_board(self, board_id: str) -> None:
        """Records the PostgreSQL board this directory serves; it serves no other from now on."""
        bound = self.board_id()
        if bound == board_id:
            return
        if bound is not None:
            raise StateDirError(f"state directory {self.paths.root} serves board {bound}, not {board_id}")
        self._write_private(self.paths.board_id, board_id + "\n")

    def record_store(self, shown: str) -> None:
        """Notes where the bound PostgreSQL board is (no password), for a start that forgets it."""
        self.paths.board_store.unlink(missing_ok=True)
        self._write_private(self.paths.board_store, shown + "\n")

    def record_board_creator(self, host: str, state_dir: str) -> None:
        """Notes where the daemon that created the bound board runs (this one joined it)."""
        self.paths.board_creator.unlink(missing_ok=True)
        self._write_private(self.paths.board_creator, json.dumps({"host": host, "state_dir": state_dir}) + "\n")

    def refuse_unbound_start(self) -> None:
        """A directory bound to a PostgreSQL board is never served as a SQLite board: that
        start would serve an empty board of its own beside the one the directory names."""
        bound = self.board_id()
        if bound is None:
            return
        path = self.paths.board_store
        where = path.read_text().strip() if path.exists() else ""
        raise StateDirError(
            f"state directory {self.paths.root} serves PostgreSQL board {bound}"
            + (f" ({where})" if where else "")
            + ", not a SQLite board: start it with --store DSN --pg-schema SCHEMA (that board's)"
        )

    def write_lead_token(self, token: str) -> None:
        """The lead token of a PostgreSQL board this daemon created (its hash is in the board)."""
        self.paths.lead_token.unlink(missing_ok=True)
        self._write_private(self.paths.lead_token, token)

    def _write_private(self, path: pathlib.Path, text: str) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)

    def write_web_address(self, url: str) -> None:
        path = self.paths.web_address
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(url + "\n")

    def forget_web_address(self) -> None:
        self.paths.web_address.unlink(missing_ok=True)

    def secure_files(self) -> None:
        for path in self.paths.root.glob("corral.sqlite3*"):
            os.chmod(path, 0o600)

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
