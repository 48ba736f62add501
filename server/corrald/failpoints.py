"""Named failpoints for crash and fault tests; inert unless enabled.

Points:
- writer: `before_commit`, `after_commit`; `before_commit:<owner>` (before the COMMIT
  of each batch with a job of that caller, e.g. `before_commit:lead`); `job:<owner>`
  (before each job submitted by that caller, e.g. `job:lead`); `before_checkpoint`
  (the writer's last checkpoint, when the daemon stops); `sqlite_commit_returned`
  (SQLite's COMMIT has returned, inside the writer's check of its outcome).
- streams: `after_claim_sent` (an Idle or Session stream sent a claim),
  `before_op_result` (a Session op committed and its result is not sent yet),
  `web_event_sent:<identity>` (a web board stream of that caller sent an event, e.g.
  `web_event_sent:viewer:ann`).
- PostgreSQL: `listener_reconnect` (a board's listener is about to connect again: a
  delay holds open a gap in what the daemon hears of the others; it runs in a thread,
  so the daemon serves on).

Actions: `kill` (SIGKILL the process), `error` (raise sqlite3.OperationalError,
as a full disk would), `ioerror` (raise the sqlite3.OperationalError of a failed
fsync, SQLITE_IOERR_FSYNC), `sleep:<ms>` (block the thread that reached the point,
logging one line first, so a test can tell a long job is running).

Enabled programmatically (`enable`) or, for a daemon under test, with the
environment variable CORRAL_FAILPOINTS, a comma-separated list of
`point=action[:n]`: without `n` the action fires every time; `kill:3` fires
only the third time the point is reached; `error:3+` fires the third time and
every time after. For `sleep` the count follows the duration:
`job:slow=sleep:2000:1` sleeps 2 s in the first job of caller `slow`.
"""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable

Action = Callable[[], None]

log = logging.getLogger("corrald.failpoints")

_lock = threading.Lock()
# name -> (action, hits left before it fires (0 = every time), whether it keeps firing after)
_points: dict[str, tuple[Action, int, bool]] = {}


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _error() -> None:
    raise sqlite3.OperationalError("injected failure")


def _sleep(ms: int) -> Action:
    def sleep() -> None:
        log.warning("failpoint: sleeping %d ms", ms)
        time.sleep(ms / 1000)

    return sleep


SQLITE_IOERR_FSYNC = 1034  # (4 << 8) | SQLITE_IOERR


def _io_error() -> None:
    error = sqlite3.OperationalError("disk I/O error (injected)")
    error.sqlite_errorcode = SQLITE_IOERR_FSYNC
    error.sqlite_errorname = "SQLITE_IOERR_FSYNC"
    raise error


_ACTIONS: dict[str, Action] = {"kill": _kill, "error": _error, "ioerror": _io_error}


def enable(name: str, action: Action | str, *, after: int = 0, and_after: bool = False) -> None:
    """Fire `action` at `name`; with `after=n`, only on the n-th hit (then disarm), or
    with `and_after` on the n-th hit and every one after it."""
    with _lock:
        _points[name] = (_ACTIONS[action] if isinstance(action, str) else action, after, and_after)


def disable(name: str | None = None) -> None:
    with _lock:
        if name is None:
            _points.clear()
        else:
            _points.pop(name, None)


def armed() -> bool:
    """Whether any failpoint is enabled (so a caller may skip building point names)."""
    return bool(_points)


def hit(name: str) -> None:
    if not _points:  # the common case costs one dict truth test
        return
    with _lock:
        entry = _points.get(name)
        if entry is None:
            return
        action, countdown, and_after = entry
        if countdown > 1:
            _points[name] = (action, countdown - 1, and_after)
            return
        if countdown == 1:
            if and_after:
                _points[name] = (action, 0, and_after)
            else:
                del _points[name]
    action()


def load_from_env(environ: dict[str, str] | None = None) -> None:
    spec = (environ if environ is not None else os.environ).get("CORRAL_FAILPOINTS", "")
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, action = part.partition("=")
        kind, _, count = action.partition(":")
        chosen: Action | str = kind or "error"
        if kind == "sleep":
            ms, _, count = count.partition(":")
            chosen = _sleep(int(ms))
        enable(name, chosen, after=int(count.removesuffix("+") or 0), and_after=count.endswith("+"))
