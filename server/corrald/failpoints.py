"""Named failpoints for crash and fault tests; inert unless enabled.

Points: `before_commit`, `after_commit` (writer), `after_claim_sent` (Idle stream).
Enabled programmatically (`enable`) or, for a daemon under test, with the
environment variable CORRAL_FAILPOINTS, e.g. `before_commit=kill:3` (SIGKILL
the process the third time the point is reached) or `after_commit=error`.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
from collections.abc import Callable

Action = Callable[[], None]

_lock = threading.Lock()
_points: dict[str, tuple[Action, int]] = {}  # name -> (action, hits left before it fires; 0 = every time)


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _error() -> None:
    raise sqlite3.OperationalError("injected failure")


_ACTIONS: dict[str, Action] = {"kill": _kill, "error": _error}


def enable(name: str, action: Action | str, *, after: int = 0) -> None:
    """Fire `action` at `name`; with `after=n`, only on the n-th hit (then disarm)."""
    with _lock:
        _points[name] = (_ACTIONS[action] if isinstance(action, str) else action, after)


def disable(name: str | None = None) -> None:
    with _lock:
        if name is None:
            _points.clear()
        else:
            _points.pop(name, None)


def hit(name: str) -> None:
    if not _points:  # the common case costs one dict truth test
        return
    with _lock:
        entry = _points.get(name)
        if entry is None:
            return
        action, countdown = entry
        if countdown > 1:
            _points[name] = (action, countdown - 1)
            return
        if countdown == 1:
            del _points[name]
    action()


def load_from_env(environ: dict[str, str] | None = None) -> None:
    spec = (environ if environ is not None else os.environ).get("CORRAL_FAILPOINTS", "")
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, action = part.partition("=")
        kind, _, count = action.partition(":")
        enable(name, kind or "error", after=int(count or 0))
