"""Chaos across daemons: three daemons serve one board on a server of the test's own while
teammates work a DAG through all of them and the Lead adds to it, and the faults a second
daemon exists for are mixed at random: a daemon SIGKILLed (and started again), a daemon
SIGSTOPped past the stall bound (and continued), every daemon's backends terminated, one
daemon's connections blackholed by a TCP proxy, and the server restarted.

What must hold when the faults stop: every task completed exactly once and never before
its dependencies, no two live claims on a task, no token reused (the reliability suite's
history checker, against the final board); every write answered OK is on the board, and
none answered COMMIT_FAILED is (the Lead's messages, sent without request ids, one body
each, tell which writes took effect).

`make test` runs a reduced round (about half a minute of faults); CORRAL_SOAK=1 runs the
full one: 500 tasks, 30 teammates, two minutes of faults.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import random
import signal
import threading
import time

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.contract.wire import Client, Daemon, spec
from tests.reliability.rel_harness import pick
from tests.reliability.rel_history import Recorder, check
from tests.support import wait_until
from tests.support.postgres import ThrowawayServer
from tests.support.tcp_proxy import TcpProxy, proxy_in_front_of

from .conftest import SharedBoard
from .team import Worker, reason_of

TASKS = pick(120, 500)
TEAMMATES = pick(9, 30)
FAULT_S = pick(20.0, 120.0)
BATCH = 25  # tasks the Lead adds at a time, while the faults go on
LEASE_S = 5.0  # a claim lost with its daemon is handed out again within this
STALL_S = 1.0  # --pg-stall-timeout of every daemon
SEED = int(os.environ.get("CORRAL_CHAOS_SEED", "30"))

pytestmark = pytest.mark.timeout(FAULT_S + 240)


def _dag(count: int, rng: random.Random) -> list[pb.TaskSpec]:
    specs = []
    for i in range(count):
        deps = sorted({f"t{rng.randrange(i)}" for _ in range(rng.randint(0, 3))}) if i else []
        specs.append(spec(f"t{i}", *deps, lease=LEASE_S))
    return specs


class Faults(threading.Thread):
    """One fault at a time, chosen at random, with a pause of 1 to 3 s between them,
    until `until`; `made` counts each kind."""

    KINDS = ("sigkill", "sigstop", "terminate", "blackhole", "server_restart")

    def __init__(
        self,
        rng: random.Random,
        daemons: list[Daemon],
        board: SharedBoard,
        server: ThrowawayServer,
        proxy: TcpProxy,
        until: float,
    ) -> None:
        super().__init__(name="faults", daemon=True)
        self._rng, self._daemons, self._board, self._server, self._proxy = rng, daemons, board, server, proxy
        self._until = until
        self.made: collections.Counter[str] = collections.Counter()
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            kinds = itertools.cycle(self.KINDS)  # every kind early, then at random
            for round_number in itertools.count():
                if time.monotonic() >= self._until or self._halt.is_set():
                    return
                kind = next(kinds) if round_number < len(self.KINDS) else self._rng.choice(self.KINDS)
                getattr(self, f"_{kind}")()
                self.made[kind] += 1
                self._halt.wait(self._rng.uniform(1.0, 3.0))  # the faults' rhythm
        except BaseException as error:  # noqa: BLE001 (reported by the test)
            self.error = error

    def _sigkill(self) -> None:
        daemon = self._rng.choice(self._daemons)
        daemon.kill()
        self._halt.wait(0.5)
        daemon.start()

    def _sigstop(self) -> None:
        daemon = self._rng.choice(self._daemons)
        os.kill(daemon.pid, signal.SIGSTOP)
        try:
            self._halt.wait(self._rng.uniform(2 * STALL_S, 4 * STALL_S))
        finally:
            os.kill(daemon.pid, signal.SIGCONT)

    def _terminate(self) -> None:
        self._board.sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name LIKE 'corrald%%' AND pid != pg_backend_pid()"
        )

    def _blackhole(self) -> None:
        self._proxy.blackhole()  # the proxied daemon's connections: it cuts them and makes new ones

    def _server_restart(self) -> None:
        self._server.stop("fast")
        self._halt.wait(self._rng.uniform(0.2, 1.0))
        self._server.start()


class Messenger(threading.Thread):
    """The Lead's messages, each with its own body and no request id, through the daemons in
    turn, until `until`: what each was answered, by body."""

    def __init__(self, daemons: list[Daemon], until: float) -> None:
        super().__init__(name="messenger", daemon=True)
        self._daemons, self._until = daemons, until
        self.answers: dict[str, tuple[str, str]] = {}  # body -> (code, reason)
        self._halt = threading.Event()

    def run(self) -> None:
        for number in itertools.count():
            if time.monotonic() >= self._until:
                return
            daemon = self._daemons[number % len(self._daemons)]
            body = f"m{number}"
            try:
                channel = grpc.insecure_channel(daemon.address)
                with contextlib.closing(channel):
                    Client(channel, daemon.lead_token, "lead").board.SendMessage(
                        pb.SendMessageRequest(to="inbox", body=body), timeout=5
                    )
                self.answers[body] = ("OK", "")
            except grpc.RpcError as error:
                self.answers[body] = (error.code().name, reason_of(error))
            self._halt.wait(0.2)  # the messages' rhythm


def _add_tasks(daemons: list[Daemon], batch: list[pb.TaskSpec], request_id: str, deadline: float) -> None:
    """The Lead's batch, through whichever daemon answers, sent again with its request id
    until it is (a batch in doubt is applied once)."""
    for number in itertools.count():
        daemon = daemons[number % len(daemons)]
        try:
            if daemon.alive():
                channel = grpc.insecure_channel(daemon.address)
                with contextlib.closing(channel):
                    Client(channel, daemon.lead_token, "lead").lead.CreateTasks(
                        pb.CreateTasksRequest(tasks=batch, request_id=request_id), timeout=10
                    )
                return
        except grpc.RpcError as error:
            if error.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"batch {request_id} was never answered")
        time.sleep(0.2)  # the retry's backoff, not a wait for anything


def _what_is_left(board: SharedBoard, daemons: list[Daemon], workers: list[Worker]) -> str:
    states = board.sql("SELECT state, count(*) FROM tasks GROUP BY state ORDER BY state")
    stuck = board.sql(
        "SELECT id, state, unmet_deps, attempt, live_fence FROM tasks"
        " WHERE state NOT IN (3, 4, 5) ORDER BY seq LIMIT 10"
    )
    alive = [(d.state_dir.parent.name, d.alive()) for d in daemons]
    idle = [w.mate for w in workers if not w.is_alive()]
    logs = "\n".join(d.latest_log()[-3000:] for d in daemons)
    errors = [w.errors for w in workers]
    return f"states {states}; stuck {stuck}; daemons {alive}; workers gone {idle}; errors {errors}\n{logs}"


# Kept beside the board-level run (tests/conformance/test_board_concurrency.py): this one is across daemons, faulted.
def test_three_daemons_under_mixed_faults_complete_every_task_once_and_answer_truthfully(
    own_server, own_board, tmp_path
):
    server, board = own_server, own_board
    rng = random.Random(SEED)
    with proxy_in_front_of(board.dsn) as (proxy, via_proxy):
        stall = ("--pg-stall-timeout", str(STALL_S))
        daemons = [
            board.daemon("a", extra_args=stall),
            board.daemon("b", extra_args=stall),
            board.daemon("c", extra_args=stall, dsn=via_proxy),
        ]
        lead = daemons[0]
        lead.add_teammate("inbox")  # the messages' recipient; it never reads them
        recorder = Recorder()
        stop = threading.Event()
        work_until = time.monotonic() + FAULT_S + 180
        workers = []
        for index in range(TEAMMATES):
            mate = lead.add_teammate(f"w{index}")
            home = daemons[index % 3 :] + daemons[: index % 3]
            workers.append(Worker(mate.name, mate.token, home, recorder, stop, work_until, resend=True))
        for worker in workers:
            worker.start()
        until = time.monotonic() + FAULT_S
        faults = Faults(rng, daemons, board, server, proxy, until)
        messenger = Messenger(daemons, until)
        faults.start()
        messenger.start()
        specs = _dag(TASKS, rng)
        batches = [specs[start : start + BATCH] for start in range(0, TASKS, BATCH)]
        pause = FAULT_S / len(batches)
        for number, batch in enumerate(batches):
            _add_tasks(daemons, batch, f"batch-{number}", until + 60)
            stop.wait(pause)  # spread over the faults
        faults.join(FAULT_S + 60)
        messenger.join(30)
        assert faults.error is None, repr(faults.error)
        for daemon in daemons:
            if not daemon.alive():
                daemon.start()
        try:
            wait_until(
                lambda: lead.stats().tasks_by_state.get("TASK_STATE_COMPLETED", 0) == TASKS,
                150,
                f"all {TASKS} tasks completed once the faults stopped",
            )
        except AssertionError:
            raise AssertionError(_what_is_left(board, daemons, workers)) from None
        stop.set()
        for worker in workers:
            worker.join(15)

    errors = [e for w in workers for e in w.errors]
    assert errors == [], "\n".join(errors[:10])
    completed = collections.Counter(
        row[0] for row in board.sql("SELECT task_seq FROM claims WHERE outcome = %s", ("completed",))
    )
    assert len(completed) == TASKS and set(completed.values()) == {1}
    with board.connection() as conn:
        figures, violations = check(recorder.events, conn)
    assert violations == [], violations[:10]

    stored = {row[0] for row in board.sql("SELECT body FROM inbox WHERE recipient = 'inbox'")}
    answers = messenger.answers
    lost = [body for body, (code, _) in answers.items() if code == "OK" and body not in stored]
    lied = [body for body, (_, reason) in answers.items() if reason == "COMMIT_FAILED" and body in stored]
    assert lost == [], f"acknowledged and missing: {lost}"
    assert lied == [], f"answered COMMIT_FAILED and stored: {lied}"

    outcomes = collections.Counter(f"{code} {reason}".strip() for code, reason in answers.values())
    completions = collections.Counter(
        f"{e['code']} {e.get('reason', '')}".strip() for e in recorder.events if e["kind"] == "complete"
    )
    summary = (
        f"faults {dict(faults.made)}; tasks {TASKS} completed once each; teammates {TEAMMATES}; "
        f"messages {dict(outcomes)}; completions {dict(completions)}; failovers {sum(w.failovers for w in workers)}"
    )
    (tmp_path / "chaos-summary.txt").write_text(summary + "\n")
    print(summary)
    assert set(faults.made) == set(Faults.KINDS), faults.made
