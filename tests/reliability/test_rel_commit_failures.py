"""Commit failures (design §2 invariant 6): a write is reported successful only after COMMIT;
if a commit fails, every job in it is reported failed and nothing of it is visible.

Both tests enable failpoints programmatically (`corrald.failpoints.enable`), in this process,
on the store the tests run on (`--store postgres`: a schema of the run's database).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator

import grpc
import psycopg
import pytest

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc
from corrald import failpoints
from corrald.clock import SystemClock
from corrald.config import WriterConfig
from corrald.daemon import Daemon as InProcessServer
from corrald.daemon import ServeConfig
from corrald.store.postgres.storage import PgStorage
from corrald.store.postgres.target import PgTarget
from corrald.writer import CommitFailed, Writer
from tests.support.boards import qmarks, read_board
from tests.support.daemons import store_args
from tests.support.postgres import run_database_dsn, scratch_schema

from .rel_harness import Daemon, md, on_postgres, pick, specs_for, wait_briefly


@pytest.fixture(autouse=True)
def _no_failpoints():
    failpoints.disable()
    yield
    failpoints.disable()


class InProcessDaemon:
    """corrald's Daemon on an event loop in a thread of this process (so failpoints can be
    switched on and off while it serves)."""

    def __init__(self, state_dir) -> None:
        # On PostgreSQL, the board a `corrald` started on `state_dir` serves (tests/support/daemons.py).
        postgres = store_args(state_dir)
        store = PgTarget.parse(postgres[1], schema=postgres[3]) if postgres else None
        self.server = InProcessServer(ServeConfig(state_dir=state_dir, store=store))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def start(self) -> str:
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(30)
        return self.server.address

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


SNAPSHOT_QUERIES = {
    "tasks": "SELECT id, title, state, owner, attempt, failures, live_fence, result, error, finish_ms FROM tasks",
    "claims": "SELECT fence, token, task_seq, teammate, attempt, claim_ms, end_ms, outcome FROM claims",
    "deps": "SELECT * FROM deps",
    "create_requests": "SELECT * FROM create_requests",
    "teammates": "SELECT name, token_hash, roles, require_plan, removed, acked_seq, last_seq FROM teammates",
    "inbox": "SELECT * FROM inbox",
    "plans": "SELECT * FROM plans",
    "shutdowns": "SELECT * FROM shutdowns",
}


def _snapshot(state_dir) -> dict[str, list]:
    with read_board(state_dir) as conn:
        return {name: sorted(conn.execute(sql).fetchall(), key=repr) for name, sql in SNAPSHOT_QUERIES.items()}


@pytest.mark.timeout(60)
def test_every_rpc_fails_while_commits_fail(tmp_path, figures, request):
    """With `before_commit=error` every write RPC answers UNAVAILABLE, an Idle stream delivers
    only what is stored, and after a restart without the failpoint none of what they tried is visible."""
    state = tmp_path / "state"
    server = InProcessDaemon(state)
    request.addfinalizer(server.stop)
    address = server.start()
    channel = grpc.insecure_channel(address)
    lead_md = md((state / "lead.token").read_text())
    lead = pb_grpc.LeadServiceStub(channel)
    board = pb_grpc.BoardServiceStub(channel)
    mate = pb_grpc.TeammateServiceStub(channel)
    # A board with something of everything: tasks, a claim, a plan, a shutdown request, messages.
    lead.CreateTasks(
        pb.CreateTasksRequest(tasks=specs_for([("a", []), ("b", ["a"]), ("c", []), ("d", [])]), request_id="r0"),
        metadata=lead_md,
    )
    tokens = {
        n: lead.AddTeammate(
            pb.AddTeammateRequest(name=n, require_plan_approval=(n == "planner")), metadata=lead_md
        ).token
        for n in ("x", "y", "planner")
    }
    x_md, y_md, p_md = md(tokens["x"]), md(tokens["y"]), md(tokens["planner"])
    idle = mate.Idle(pb.IdleRequest(), metadata=x_md)
    claim = next(r for r in idle if r.HasField("claim")).claim
    idle.cancel()
    idle = mate.Idle(pb.IdleRequest(), metadata=y_md)
    claim_y = next(r for r in idle if r.HasField("claim")).claim
    idle.cancel()
    plan_id = mate.SubmitPlan(pb.SubmitPlanRequest(plan="p1"), metadata=p_md).plan_id
    shutdown = lead.RequestShutdown(pb.RequestShutdownRequest(name="y", reason="bye"), metadata=lead_md)
    board.SendMessage(pb.SendMessageRequest(to="x", body="hello"), metadata=lead_md)
    # (Stream bookkeeping such as set_online touches only columns the snapshot leaves out.)
    before = _snapshot(state)

    failpoints.enable("before_commit", "error")
    attempts = {
        "CreateTasks": lambda: lead.CreateTasks(
            pb.CreateTasksRequest(tasks=specs_for([("new", ["a"])]), request_id="r1"), metadata=lead_md, timeout=10
        ),
        "CancelTasks": lambda: lead.CancelTasks(pb.CancelTasksRequest(ids=["c"]), metadata=lead_md, timeout=10),
        "AddTeammate": lambda: lead.AddTeammate(pb.AddTeammateRequest(name="ghost"), metadata=lead_md, timeout=10),
        "RemoveTeammate": lambda: lead.RemoveTeammate(pb.RemoveTeammateRequest(name="x"), metadata=lead_md, timeout=10),
        "RequestShutdown": lambda: lead.RequestShutdown(
            pb.RequestShutdownRequest(name="x", reason="r"), metadata=lead_md, timeout=10
        ),
        "DecidePlan": lambda: lead.DecidePlan(
            pb.DecidePlanRequest(plan_id=plan_id, approve=True), metadata=lead_md, timeout=10
        ),
        "SendMessage": lambda: board.SendMessage(
            pb.SendMessageRequest(to="x", body="lost"), metadata=lead_md, timeout=10
        ),
        "SendMessage(teammate)": lambda: board.SendMessage(
            pb.SendMessageRequest(to="lead", body="lost"), metadata=x_md, timeout=10
        ),
        "AckMessages": lambda: mate.AckMessages(pb.AckMessagesRequest(through_seq=1), metadata=x_md, timeout=10),
        "RenewLease": lambda: mate.RenewLease(
            pb.RenewLeaseRequest(task_id=claim.task.id, claim_token=claim.claim_token), metadata=x_md, timeout=10
        ),
        "CompleteTask": lambda: mate.CompleteTask(
            pb.CompleteTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token, result=b"r"),
            metadata=x_md,
            timeout=10,
        ),
        "FailTask": lambda: mate.FailTask(
            pb.FailTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token, error="e"),
            metadata=x_md,
            timeout=10,
        ),
        "ReleaseTask": lambda: mate.ReleaseTask(
            pb.ReleaseTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token), metadata=x_md, timeout=10
        ),
        "SubmitPlan": lambda: mate.SubmitPlan(pb.SubmitPlanRequest(plan="p2"), metadata=p_md, timeout=10),
        "RespondShutdown": lambda: mate.RespondShutdown(
            pb.RespondShutdownRequest(request_id=shutdown.request_id, approve=True), metadata=y_md, timeout=10
        ),
    }
    codes = {}
    for name, attempt in attempts.items():
        try:
            attempt()
            codes[name] = "OK"
        except grpc.RpcError as error:
            codes[name] = error.code().name
    reads_ok = bool(board.GetTask(pb.GetTaskRequest(id="a"), metadata=lead_md).task.id)
    # An Idle stream still opens and delivers what is stored: the held claim, then the message.
    idle = mate.Idle(pb.IdleRequest(), metadata=x_md, timeout=10)
    delivered = [next(idle), next(idle)]
    idle.cancel()
    assert delivered[0].claim.claim_token == claim.claim_token and delivered[1].message.body == "hello", delivered
    failpoints.disable()
    channel.close()
    server.stop()

    restarted = Daemon(state).start()
    try:
        after = _snapshot(state)
    finally:
        restarted.stop()
    changed = [name for name in SNAPSHOT_QUERIES if before[name] != after[name]]
    not_unavailable = {n: c for n, c in codes.items() if c != "UNAVAILABLE"}
    figures(
        rpcs_tried=len(codes),
        answered_unavailable=len(codes) - len(not_unavailable),
        other_answers=not_unavailable,
        reads_still_answered=reads_ok,
        tables_changed=changed,
    )
    assert not not_unavailable
    assert not changed, {n: (before[n], after[n]) for n in changed}
    del claim_y


@pytest.mark.timeout(pick(120, 300))
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # tenacity's `initial`, once per batch
def test_injected_commit_failures_in_group_commits(tmp_path, figures, caplog):
    """1,000 injected commit failures (300 on PostgreSQL) inside grouped commits, from many
    submitting threads: no job reported successful is absent, no failed batch is partly applied."""
    target_failures = pick(1000, 1000, postgres=300)
    caplog.set_level(logging.CRITICAL, logger="corrald.writer")  # one ERROR line per failed commit
    with _writer_table(tmp_path) as (make_writer, read_rows):
        writer = make_writer()
        writer.start()
        _inject_commit_failures(writer, target_failures, read_rows, figures)


@contextlib.contextmanager
def _writer_table(tmp_path) -> Iterator[tuple[Callable[[], Writer], Callable[[], list[tuple]]]]:
    """A table `r (job, part, batch)` on the store the tests run on: a factory of a writer
    on it (one thread: each job can tell its batch), and a read of its rows."""
    table = "r (job INTEGER, part INTEGER, batch INTEGER, PRIMARY KEY (job, part))"
    if on_postgres():
        with scratch_schema(table) as schema:
            target = PgTarget.parse(run_database_dsn(), schema=schema)
            storage = PgStorage(target, "commit-failures", clock=None)

            def read_pg() -> list[tuple]:
                with psycopg.connect(run_database_dsn(), autocommit=True) as conn:
                    return conn.execute(f"SELECT job, part, batch FROM {schema}.r").fetchall()

            yield (lambda: Writer(storage.open, SystemClock(), WriterConfig(max_batch=16), storage=storage)), read_pg
        return
    path = tmp_path / "writer.sqlite3"

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {table}")
        return conn

    def read_sqlite() -> list[tuple]:
        with contextlib.closing(sqlite3.connect(path)) as conn:
            return conn.execute("SELECT job, part, batch FROM r").fetchall()

    yield (lambda: Writer(connect, SystemClock(), WriterConfig(max_batch=16))), read_sqlite


def _inject_commit_failures(
    writer: Writer, target_failures: int, read_rows: Callable[[], list[tuple]], figures
) -> None:
    batch_of: dict[int, int] = {}
    raising: set[int] = set()
    lock = threading.Lock()
    next_job = iter(range(10**9))

    def make_job(job_id: int, boom: bool):
        def job(tx):
            # The index of the batch running this job (the writer's own counters, read on its
            # thread between batches' updates; stats() would sort its samples on every job).
            batch = writer._commits + writer._failed_commits  # noqa: SLF001
            batch_of[job_id] = batch
            for part in range(3):
                qmarks(tx.conn).execute("INSERT INTO r (job, part, batch) VALUES (?, ?, ?)", (job_id, part, batch))
                if boom and part == 1:
                    raise ValueError("this job fails on its own")
            return job_id

        return job

    outcomes: dict[int, str] = {}
    stop = threading.Event()

    def submitter(seed: int) -> None:
        rng = random.Random(seed)
        window = []
        while not stop.is_set() or window:
            while not stop.is_set() and len(window) < 6:
                with lock:
                    job_id = next(next_job)
                boom = rng.random() < 0.03
                if boom:
                    raising.add(job_id)
                try:
                    window.append((job_id, writer.submit(make_job(job_id, boom))))
                except Exception as error:  # noqa: BLE001 (overload: never queued)
                    outcomes[job_id] = "refused:" + type(error).__name__
            job_id, future = window.pop(0)
            try:
                future.result(30)
                outcomes[job_id] = "ok"
            except CommitFailed:
                outcomes[job_id] = "commit_failed"
            except ValueError:
                outcomes[job_id] = "job_failed"

    threads = [threading.Thread(target=submitter, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    rng = random.Random(5)
    started = time.monotonic()
    deadline = started + pick(90, 280)
    try:
        while writer._failed_commits < target_failures and time.monotonic() < deadline:  # noqa: SLF001
            seen = writer._failed_commits  # noqa: SLF001
            failpoints.enable("before_commit", "error", after=rng.randint(1, 3))
            while writer._failed_commits == seen and time.monotonic() < deadline:  # noqa: SLF001
                wait_briefly(0.0005)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
        failpoints.disable()
    stats = writer.stats()
    writer.close()
    elapsed = time.monotonic() - started

    rows: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
    for job, part, batch in read_rows():
        rows[job].append((part, batch))
    reported_but_absent = sum(1 for j, o in outcomes.items() if o == "ok" and len(rows.get(j, ())) != 3)
    failed_but_present = sum(1 for j, o in outcomes.items() if o != "ok" and rows.get(j))
    by_batch = collections.defaultdict(collections.Counter)
    for job, outcome in outcomes.items():
        if job in batch_of and outcome in ("ok", "commit_failed"):
            by_batch[batch_of[job]][outcome] += 1
    failed_batches = [b for b, c in by_batch.items() if c["commit_failed"]]
    jobs_of = collections.defaultdict(list)
    for job, batch in batch_of.items():
        jobs_of[batch].append(job)
    partial = sum(1 for b in failed_batches if by_batch[b]["ok"] or any(rows.get(j) for j in jobs_of[b]))
    sizes = [sum(by_batch[b].values()) for b in failed_batches]
    figures(
        injected_commit_failures=stats.failed_commits,
        jobs=len(outcomes),
        commits=stats.commits,
        jobs_ok=sum(1 for o in outcomes.values() if o == "ok"),
        jobs_commit_failed=sum(1 for o in outcomes.values() if o == "commit_failed"),
        jobs_failed_alone=sum(1 for o in outcomes.values() if o == "job_failed"),
        mean_failed_batch_size=sum(sizes) / max(1, len(sizes)),
        reported_successful_but_absent=reported_but_absent,
        failed_but_present=failed_but_present,
        partially_applied_batches=partial,
        seconds=elapsed,
    )
    assert stats.failed_commits >= target_failures
    assert reported_but_absent == 0 and failed_but_present == 0 and partial == 0
    assert all(outcomes[j] == "job_failed" for j in raising if j in outcomes and outcomes[j] != "commit_failed")
