"""Fixtures for the wire-level contract tests of corrald; the helpers are in wire.py.

- `daemon`: a fresh corrald (own temporary state dir) for one test; SIGTERM
  on teardown, which must exit 0 within 5 s. The next test's daemon is
  started in the background meanwhile, so startup costs little wall time.
- `corrald`: a factory for tests that need several daemons, a restart on the
  same state directory, a SIGKILL, or extra `serve` arguments.
- `wire.module_daemon` backs module-scoped fixtures where tests do not interfere.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import pathlib
from collections.abc import Callable, Iterator

import pytest

from tests.support import READY_TIMEOUT_S

from .wire import Daemon, start_corrald

# ---------------------------------------------------------------- fixtures


@pytest.fixture
def corrald(tmp_path) -> Iterator[Callable[..., Daemon]]:
    """Factory: `corrald(state_dir=None, extra_args=(), failpoints=None)` starts a daemon; all are stopped
    (and checked) at teardown."""
    started: list[Daemon] = []

    def start(state_dir: pathlib.Path | None = None, **kwargs) -> Daemon:
        daemon = start_corrald(state_dir or tmp_path / "state", tmp_path, **kwargs)
        started.append(daemon)
        return daemon

    yield start
    failures = []
    for daemon in reversed(started):
        try:
            daemon.stop_and_check()
        except BaseException as error:  # noqa: BLE001 (report every daemon, then fail)
            failures.append(str(error))
    if failures:
        pytest.fail("\n".join(failures))


class _DaemonPool:
    """Keeps one daemon starting in the background, so a test's startup overlaps the previous test.

    Every daemon is still fresh (its own temporary state directory) and used by one test only.
    """

    def __init__(self, root: pathlib.Path) -> None:
        self._root = root
        self._numbers = itertools.count(1)
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="corrald-pool")
        self._spare: concurrent.futures.Future | None = None

    def _start(self) -> Daemon:
        home = self._root / f"daemon-{next(self._numbers)}"
        home.mkdir()
        return start_corrald(home / "state", home)

    def take(self) -> Daemon:
        spare, self._spare = self._spare, None
        if spare is None:
            spare = self._executor.submit(self._start)
        daemon = spare.result(timeout=READY_TIMEOUT_S + 10)
        self._spare = self._executor.submit(self._start)
        return daemon

    def close(self) -> None:
        spare, self._spare = self._spare, None
        try:
            if spare is not None:
                spare.result(timeout=READY_TIMEOUT_S + 10).stop_and_check()
        finally:
            self._executor.shutdown(wait=True)


@pytest.fixture(scope="session")
def _daemon_pool(tmp_path_factory) -> Iterator[_DaemonPool]:
    pool = _DaemonPool(tmp_path_factory.mktemp("corrald-pool"))
    yield pool
    pool.close()


@pytest.fixture
def daemon(_daemon_pool) -> Iterator[Daemon]:
    """A fresh corrald for this test (its own temporary state dir); SIGTERM -> exit 0 within 5 s at teardown."""
    running = _daemon_pool.take()
    try:
        yield running
    finally:
        running.stop_and_check()
