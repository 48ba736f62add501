"""A `corrald serve` for a test or a benchmark, started through the SDK's own launcher.

`Daemon` keeps one state directory and may be started on it again and again
(after a SIGKILL, a failpoint or a clean stop). Each start's stdout and stderr
are copied to a file of their own in `log_dir`. Failpoints reach the daemon
only through `start(failpoints=...)`: a CORRAL_FAILPOINTS the developer's
shell happens to export never does. `start_refused` is for the starts that
must fail. With CORRAL_TEST_STORE=postgres (pytest's `--store postgres` sets it)
every daemon serves a PostgreSQL board instead, in a schema of its own that
follows its state directory across restarts.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import pathlib
import signal
import time
from collections.abc import Mapping, Sequence

from corral._launch import DaemonProcess, DaemonStartError, launch_daemon

READY_TIMEOUT_S = 20.0  # generous: two cores, other suites may run alongside
STOP_TIMEOUT_S = 5.0  # the contract: SIGTERM -> exit 0 within 5 s
STOP_GRACE_S = 10.0  # teardown: how long SIGTERM gets before SIGKILL
FAILPOINTS_ENV = "CORRAL_FAILPOINTS"
STORE_ENV = "CORRAL_TEST_STORE"


def store_args(state_dir: pathlib.Path | None, given: Sequence[str] = ()) -> list[str]:
    """`serve` arguments for the store the tests run on: none for SQLite (the default) or
    when the test chose a store itself (`given` has --store)."""
    if os.environ.get(STORE_ENV, "sqlite") != "postgres" or "--store" in given:
        return []
    from tests.support.postgres import fresh_schema, run_database_dsn

    schema = fresh_schema()
    if state_dir is not None:  # the same board again when the test restarts the daemon
        schema = "t_" + hashlib.sha256(str(pathlib.Path(state_dir).absolute()).encode()).hexdigest()[:16]
    return ["--store", run_database_dsn(), "--pg-schema", schema]


def launch_on_the_store(state_dir, *, extra_args: Sequence[str] = (), **kwargs) -> DaemonProcess:
    """`launch_daemon`, on the store the tests run on (the suite puts it in the SDK's place)."""
    return _launch_daemon(state_dir, extra_args=[*store_args(state_dir, extra_args), *extra_args], **kwargs)


_launch_daemon = launch_daemon

_log_numbers = itertools.count(1)  # unique log names when several daemons share a log_dir


class Daemon:
    """One state directory and the `corrald serve` process currently running on it (if any)."""

    def __init__(
        self,
        state_dir: pathlib.Path,
        *,
        log_dir: pathlib.Path | None = None,
        listen: str | None = None,
        log_level: str | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        new_session: bool = False,
    ) -> None:
        self.state_dir = pathlib.Path(state_dir)
        self.log_dir = log_dir or self.state_dir.parent / f"{self.state_dir.name}-logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.listen = listen
        self.extra_args = [*(["--log-level", log_level] if log_level else []), *extra_args]
        self.env = dict(env or {})
        self.new_session = new_session
        self.starts = 0
        self.started_at = 0.0  # wall clock just before the latest start
        self._process: DaemonProcess | None = None
        self._logs: list[pathlib.Path] = []

    # ------------------------------------------------------------ life

    def start(self, failpoints: str | None = None, timeout: float = READY_TIMEOUT_S) -> Daemon:
        """Starts corrald on the state directory; returns once its ready line is read."""
        if self.alive():
            raise RuntimeError(f"corrald pid {self.pid} is still running on {self.state_dir}")
        self.starts += 1
        log = self.log_dir / f"corrald-{next(_log_numbers)}.log"
        self._logs.append(log)
        self.started_at = time.time()
        self._process = launch_on_the_store(
            self.state_dir,
            listen=self.listen,
            extra_args=self.extra_args,
            env={**self.env, FAILPOINTS_ENV: failpoints},
            ready_timeout=timeout,
            log_file=log,
            new_session=self.new_session,
        )
        return self

    def restart(self, failpoints: str | None = None) -> Daemon:
        """SIGKILL the running daemon, if any, and start again on the same state directory."""
        if self.alive():
            self.kill()
        return self.start(failpoints)

    @property
    def process(self) -> DaemonProcess:
        if self._process is None:
            raise RuntimeError(f"no corrald was started on {self.state_dir}")
        return self._process

    @property
    def address(self) -> str:
        return self.process.address

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def ready(self) -> Mapping[str, object]:
        """The ready line of the latest start."""
        return self.process.ready

    def alive(self) -> bool:
        return self._process is not None and self._process.returncode is None

    def wait_exit(self, timeout: float) -> int | None:
        """The exit status, or None if the daemon still runs after `timeout` seconds."""
        return self.process.wait(timeout)

    def terminate(self, timeout: float = STOP_TIMEOUT_S) -> tuple[int | None, float]:
        """SIGTERM; returns (exit status or None if still running after `timeout`, seconds it took)."""
        if not self.alive():
            return self.process.returncode, 0.0
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout)
        return code, time.monotonic() - started

    def kill(self) -> int:
        """SIGKILL (the crash path) and reap; returns the exit status."""
        return self.process.kill()

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        """Teardown: SIGTERM, SIGKILL after `grace` seconds; whatever the exit status."""
        if self._process is not None:
            self._process.stop(grace)

    def stop_and_check(self) -> None:
        """Teardown that checks the contract: SIGTERM must end a running daemon with status 0 within 5 s."""
        if not self.alive():
            return
        code, took = self.terminate(STOP_TIMEOUT_S)
        if code is None:
            self.kill()
            raise AssertionError(
                f"corrald pid {self.pid} did not exit within {STOP_TIMEOUT_S}s of SIGTERM\n{self.stderr_tail()}"
            )
        assert code == 0, f"corrald exited {code} after SIGTERM ({took:.2f}s)\n{self.stderr_tail()}"

    # ------------------------------------------------------------ what it left behind

    def read_lead_token(self) -> str:
        return (self.state_dir / "lead.token").read_text().strip()

    def stderr_tail(self) -> str:
        """The last lines the latest start wrote to stderr."""
        return self.process.stderr_tail() if self._process is not None else ""

    def latest_log(self) -> str:
        """Everything the latest start wrote so far, stdout and stderr."""
        return self._logs[-1].read_text(errors="replace") if self._logs and self._logs[-1].exists() else ""

    def all_logs(self) -> str:
        """Everything every start wrote, stdout and stderr, in order of the starts."""
        return "".join(path.read_text(errors="replace") for path in self._logs if path.exists())


def start_refused(
    state_dir: pathlib.Path, extra_args: Sequence[str] = (), timeout: float = READY_TIMEOUT_S
) -> tuple[int, str]:
    """Starts `corrald serve` on `state_dir`, expecting a refusal; returns (exit status, stderr).

    A daemon that comes up anyway is stopped and reported as status 0; one
    that neither serves nor exits within `timeout` fails the test.
    """
    try:
        process = launch_on_the_store(
            state_dir, extra_args=extra_args, ready_timeout=timeout, env={FAILPOINTS_ENV: None}
        )
    except DaemonStartError as refused:
        if refused.returncode is None:
            raise AssertionError(f"corrald neither served nor exited within {timeout}s:\n{refused.stderr}") from None
        return refused.returncode, refused.stderr
    process.stop()
    return 0, process.stderr_tail() + "\n(corrald came up and served)"
