"""Starting and stopping a local `corrald` process: the one way the SDK, the tests and the bench do it.

The daemon prints one JSON line `{"event": "ready", "address": ..., "pid": ...}`
on stdout when it serves. Stdout and stderr are drained by threads for the
daemon's whole life (a full pipe would block it); stderr lines go to the
`corral.daemon` logger and the last few KiB are kept for error messages.
Given a `log_file`, every line of both streams is appended to it as well.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from corral._errors import CorralError

__all__ = ["DaemonProcess", "DaemonStartError", "launch_daemon"]

_log = logging.getLogger("corral.daemon")

STOP_GRACE_SECONDS = 5.0
_STDERR_TAIL_LINES = 200
LEAD_TOKEN_FILE = "lead.token"


class DaemonStartError(CorralError):
    """corrald exited, or printed no ready line in time, before it served.

    `returncode` is the exit status (None when it was still running at the
    deadline and had to be killed); `stderr` is what it wrote there last.
    """

    def __init__(self, details: str, *, returncode: int | None, stderr: str) -> None:
        super().__init__(details)
        self.returncode = returncode
        self.stderr = stderr


@dataclass(frozen=True)
class _Exited:
    """Sentinel put on the ready queue when stdout closes before the ready line."""


class _LogCopy:
    """Appends the lines of both streams to one file; closed when both have ended."""

    def __init__(self, path: Path, streams: int) -> None:
        self._file = path.open("ab")
        self._lock = threading.Lock()
        self._open_streams = streams

    def write(self, raw: bytes) -> None:
        with self._lock:
            self._file.write(raw)
            self._file.flush()  # a test reads the file while the daemon runs, or after it was killed

    def stream_ended(self) -> None:
        with self._lock:
            self._open_streams -= 1
            if self._open_streams == 0:
                self._file.close()


class _StderrTail:
    """Drains a stream into the log, keeping its last lines for error reports."""

    def __init__(self, stream: IO[bytes], copy: _LogCopy | None) -> None:
        self._lines: collections.deque[str] = collections.deque(maxlen=_STDERR_TAIL_LINES)
        self._copy = copy
        self._thread = threading.Thread(target=self._drain, args=(stream,), name="corrald-stderr", daemon=True)
        self._thread.start()

    def _drain(self, stream: IO[bytes]) -> None:
        with stream:
            for raw in stream:
                if self._copy is not None:
                    self._copy.write(raw)
                line = raw.decode("utf-8", "replace").rstrip()
                self._lines.append(line)
                _log.debug("%s", line)
        if self._copy is not None:
            self._copy.stream_ended()

    def text(self, wait: float = 1.0) -> str:
        """The kept lines; waits briefly so an exiting process's last words arrive."""
        self._thread.join(wait)
        return "\n".join(self._lines)


class DaemonProcess:
    """A running `corrald serve`; stop it with `stop()`.

    `ready` is its parsed ready line (`event`, `address`, `pid`, ...).
    """

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        *,
        state_dir: Path,
        address: str,
        owns_state_dir: bool,
        stderr: _StderrTail,
        ready: Mapping[str, object],
    ) -> None:
        self._process = process
        self.state_dir = state_dir
        self.address = address
        self.ready: Mapping[str, object] = dict(ready)
        self._owns_state_dir = owns_state_dir
        self._stderr = stderr

    def stderr_tail(self) -> str:
        """The last lines the daemon wrote to stderr (also logged to `corral.daemon`)."""
        return self._stderr.text(wait=0)

    @property
    def pid(self) -> int:
        """The daemon's process id."""
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once the daemon has exited, else None."""
        return self._process.poll()

    def read_lead_token(self) -> str:
        """The Lead credential the daemon wrote into its state directory."""
        path = self.state_dir / LEAD_TOKEN_FILE
        try:
            return path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise CorralError(f"corrald is ready but {path} cannot be read: {exc}") from exc

    def send_signal(self, signum: int) -> None:
        """Sends `signum` unless the daemon has already exited (and been reaped)."""
        if self._process.poll() is None:
            self._process.send_signal(signum)

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit status once the daemon exits; None if it still runs after `timeout` seconds."""
        try:
            return self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> int:
        """SIGKILL (the crash path) and reap; returns the exit status."""
        self.send_signal(signal.SIGKILL)
        return self._process.wait()

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> int:
        """SIGTERM, then SIGKILL after `grace` seconds; returns the exit status.

        A state directory the SDK created itself is removed afterwards.
        """
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(grace)
            except subprocess.TimeoutExpired:
                _log.warning("corrald (pid %d) ignored SIGTERM for %.0fs; killing it", self.pid, grace)
                self._process.kill()
        returncode = self._process.wait()
        if returncode != 0:
            _log.warning("corrald exited with status %d; stderr:\n%s", returncode, self._stderr.text())
        if self._owns_state_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)
        return returncode


def launch_daemon(
    state_dir: str | os.PathLike[str] | None,
    *,
    listen: str | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str | None] | None = None,
    ready_timeout: float = 30.0,
    log_file: str | os.PathLike[str] | None = None,
    new_session: bool = False,
    store: str | None = None,
) -> DaemonProcess:
    """Spawn `python -m corrald serve` and wait until it prints its ready line.

    `store`, a `postgresql://` DSN, serves a board kept in PostgreSQL (`--store`);
    by default the board is the state directory's SQLite file.

    `env` is laid over this process's environment; a None value removes that
    variable. `log_file`, when given, receives a copy of every line the daemon
    writes on stdout and stderr. `new_session` starts it in a session of its
    own, out of reach of signals sent to this process's group.

    Raises DaemonStartError (a CorralError, with the daemon's stderr) when it
    exits first or does not become ready within `ready_timeout` seconds.
    """
    owns_state_dir = state_dir is None
    directory = Path(tempfile.mkdtemp(prefix="corral-")) if state_dir is None else Path(state_dir)
    command = [sys.executable, "-m", "corrald", "serve", "--state-dir", str(directory.absolute())]
    if listen:
        command += ["--listen", listen]
    if store:
        command += ["--store", store]
    command += list(extra_args)
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_environment(env or {}),
        start_new_session=new_session,
    )
    assert process.stdout is not None and process.stderr is not None
    copy = _LogCopy(Path(log_file), streams=2) if log_file is not None else None
    stderr = _StderrTail(process.stderr, copy)
    ready: queue.Queue[dict[str, object] | _Exited] = queue.Queue()
    threading.Thread(
        target=_watch_stdout, args=(process.stdout, ready, copy), name="corrald-stdout", daemon=True
    ).start()
    try:
        event = _await_ready(ready, ready_timeout, process, stderr)
    except BaseException:
        _abandon(process, directory if owns_state_dir else None)
        raise
    return DaemonProcess(
        process,
        state_dir=directory,
        address=str(event["address"]),
        owns_state_dir=owns_state_dir,
        stderr=stderr,
        ready=event,
    )


def _environment(overrides: Mapping[str, str | None]) -> dict[str, str]:
    merged: dict[str, str | None] = {**os.environ, **overrides}
    return {name: value for name, value in merged.items() if value is not None}


def _watch_stdout(stream: IO[bytes], ready: queue.Queue[dict[str, object] | _Exited], copy: _LogCopy | None) -> None:
    # Keeps reading after the ready line so the daemon never blocks on a full pipe.
    announced = False
    with stream:
        for raw in stream:
            if copy is not None:
                copy.write(raw)
            line = raw.decode("utf-8", "replace").strip()
            event = _parse_event(line)
            if not announced and event is not None and event.get("event") == "ready":
                announced = True
                ready.put(event)
            elif line:
                _log.debug("stdout: %s", line)
    if copy is not None:
        copy.stream_ended()
    if not announced:
        ready.put(_Exited())


def _parse_event(line: str) -> dict[str, object] | None:
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def _await_ready(
    ready: queue.Queue[dict[str, object] | _Exited],
    timeout: float,
    process: subprocess.Popen[bytes],
    stderr: _StderrTail,
) -> dict[str, object]:
    try:
        event = ready.get(timeout=timeout)
    except queue.Empty:
        tail = stderr.text(wait=0)
        raise DaemonStartError(
            f"corrald did not become ready within {timeout:g}s; stderr:\n{tail}", returncode=None, stderr=tail
        ) from None
    if isinstance(event, _Exited):
        try:
            returncode = process.wait(STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            returncode = None
        tail = stderr.text()
        raise DaemonStartError(
            f"corrald exited (status {returncode}) before it was ready; stderr:\n{tail}",
            returncode=returncode,
            stderr=tail,
        )
    address = event.get("address")
    if not isinstance(address, str) or not address:
        raise CorralError(f"corrald's ready line has no address: {event!r}")
    return event


def _abandon(process: subprocess.Popen[bytes], owned_dir: Path | None) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()
    if owned_dir is not None:
        shutil.rmtree(owned_dir, ignore_errors=True)
