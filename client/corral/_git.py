"""Running git for the worktree per claim: one blocking call with explicit
arguments (no shell), a lock per repository for the commands that change the
repository's shared state, and a bounded retry when another process holds one
of git's lock files.

Two teammates on one repository run `git worktree add`, `git worktree remove`
and branch updates at once. Within a process the repository's lock keeps them
apart; across processes git's own lock files (`index.lock`, a ref's `.lock`,
the `worktrees` admin directory) make one of them fail with "File exists" or
"cannot lock ref", which is worth another try after a short, jittered pause.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import tenacity

from corral._errors import GitError

__all__ = ["GitLockBusy", "git", "repo_lock", "retry_while_locked"]

_log = logging.getLogger("corral.workspace")

T = TypeVar("T")

# How long an operation keeps trying while other processes hold git's locks.
LOCK_RETRY_SECONDS = 30.0

# What git says when another process holds one of its lock files, or (`git worktree`
# reading every worktree's admin entry, which no lock guards) when it met an entry
# another process was writing or removing at that moment.
_LOCK_BUSY = re.compile(
    r"\.lock'?: File exists|Unable to create '[^']*\.lock'|cannot lock ref|could not lock"
    r"|Another git process seems to be running"
    r"|failed to read \S*worktrees/[^/\s]+/(commondir|gitdir)|failed to delete '[^']*worktrees/"
    r"|could not open '[^']*worktrees/[^']*' for writing",
    re.IGNORECASE,
)

# Variables that would point git at another repository or index than the one we name
# (set, for instance, when the teammate itself runs inside a git hook).
_REPOSITORY_VARIABLES = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
)

# Each command runs with these settings: no prompt for credentials, no signing
# prompt, and no background `gc --auto` racing another teammate's worktree commands.
_SETTINGS = ("-c", "commit.gpgsign=false", "-c", "gc.auto=0", "-c", "core.quotepath=false")


class GitLockBusy(GitError):
    """Another git process held one of git's lock files, or was changing a worktree's
    admin entry: the command may be tried again."""


def git(
    *args: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run `git ARGS` in `cwd` and wait; raise GitError (GitLockBusy when a lock file
    was in the way) naming the command and git's stderr if it exits non-zero and
    `check`, or if git cannot be run at all."""
    command = ("git", *_SETTINGS, *args)
    environment = {k: v for k, v in os.environ.items() if k not in _REPOSITORY_VARIABLES}
    environment["GIT_TERMINAL_PROMPT"] = "0"
    environment.update(env or {})
    shown = "git " + " ".join(args)
    try:
        done = subprocess.run(
            command,
            cwd=cwd,
            env=environment,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError as exc:
        if not cwd.is_dir():
            raise GitError(f"{shown}: the directory {cwd} does not exist", command=command) from exc
        raise GitError(
            "git is not installed or not on PATH: the worktree per claim (corral.GitWorktree) runs it",
            command=command,
        ) from exc
    if check and done.returncode != 0:
        stderr = done.stderr.strip()
        kind = GitLockBusy if _LOCK_BUSY.search(stderr) else GitError
        raise kind(
            f"{shown} failed in {cwd} (exit {done.returncode}): {stderr or '(git wrote nothing to stderr)'}",
            command=command,
            stderr=stderr,
            returncode=done.returncode,
        )
    return done


_locks_guard = threading.Lock()
_repo_locks: dict[Path, threading.RLock] = {}


def repo_lock(repo: Path) -> threading.RLock:
    """This process's lock for the repository at `repo` (its resolved top level): held
    around every command that changes the repository's shared state."""
    with _locks_guard:
        return _repo_locks.setdefault(repo, threading.RLock())


def _log_retry(retry_state: tenacity.RetryCallState) -> None:
    exc = retry_state.outcome.exception() if retry_state.outcome else None
    delay = retry_state.next_action.sleep if retry_state.next_action else 0.0
    _log.info("another git process holds a lock or is changing a worktree (%s); trying again in %.2fs", exc, delay)


def retry_while_locked(operation: Callable[[], T]) -> T:
    """`operation()`, tried again while it fails with GitLockBusy, for up to
    LOCK_RETRY_SECONDS; then the last GitLockBusy is raised. The operation must be
    safe to run again after a partial run: each worktree operation looks at what is
    there before it changes anything."""
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(GitLockBusy),
        wait=tenacity.wait_random_exponential(multiplier=0.05, max=1.0),
        stop=tenacity.stop_after_delay(LOCK_RETRY_SECONDS),
        before_sleep=_log_retry,
        reraise=True,
    )
    return retrying(operation)
