"""`corral stop`: end the daemon serving a state directory, as SIGTERM would.

corrald holds an exclusive `flock` on `DIR/corrald.lock` for its whole life
and writes its pid there, so the lock says both whether a daemon runs and
which process it is; the lock's release is how we see that it has exited
(after its orderly shutdown: streams ended, writer drained, WAL truncated).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
from pathlib import Path

import click

from ._connect import EXIT_FAILED, EXIT_USAGE, STATE_DIR_ENV, CliError

LOCK_NAME = "corrald.lock"
_POLL_SECONDS = 0.05


@click.command("stop")
@click.option(
    "--state-dir",
    "state_dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar=STATE_DIR_ENV,
    required=True,
    help=f"The daemon's state directory (default ${STATE_DIR_ENV}).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Give up waiting for the daemon to exit after this many seconds.",
)
def stop_command(state_dir: Path, timeout: float) -> None:
    """Stop the corrald serving --state-dir (SIGTERM, then wait for it to exit)."""
    lock_path = state_dir.expanduser().absolute() / LOCK_NAME
    pid = running_daemon(lock_path)
    if pid is None:
        click.echo(f"no corrald is running on {lock_path.parent}")
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass  # it exited between our look and the signal
    except PermissionError:
        raise CliError(f"not allowed to signal corrald pid {pid} (it belongs to another user)") from None
    deadline = time.monotonic() + timeout
    while running_daemon(lock_path) is not None:
        if time.monotonic() >= deadline:
            raise CliError(f"corrald pid {pid} did not exit within {timeout:g}s", EXIT_FAILED)
        time.sleep(_POLL_SECONDS)
    click.echo(f"stopped corrald pid {pid}")


def running_daemon(lock_path: Path) -> int | None:
    """The pid of the corrald holding `lock_path`, or None when none holds it."""
    if not lock_path.parent.is_dir():
        raise CliError(f"no state directory at {lock_path.parent}", EXIT_USAGE)
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CliError(f"cannot open {lock_path}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            if not text.isdigit():
                raise CliError(f"{lock_path} is locked but names no pid ({text!r})") from None
            return int(text)
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
