"""What one daemon of a PostgreSQL board does reaches the others: wake-ups (also after the
listening connection is killed), a newer stream on another daemon, a removal, the event
log's order, the database's clock, and a daemon that dies under its teammates."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from corrald.daemon import LOCAL_CLOCK_OFFSET_ENV
from corrald.store.postgres.schema import SCHEMA_VERSION
from corrald.store.postgres.storage import BENCH_SWITCHES_ENV
from corrald.store.postgres.target import DEFAULT_WRITERS as PG_DEFAULT_WRITERS
from tests.contract.wire import spec, ts_seconds
from tests.reliability.rel_history import Recorder, check
from tests.support import wait_until
from tests.support.postgres import run_database_dsn

from .team import Worker

pytestmark = pytest.mark.timeout(90)

# A waiting stream's poll interval: only a wake-up can bring it work, or end it, within the
# reads' deadline (WAKE_TIMEOUT_S, a hundred times shorter). How soon a wake-up crosses
# daemons is measured in bench/pg_latency.py (section 8c), not bounded here.
SLOW_POLL_S = 600.0
WAKE_TIMEOUT_S = 5.0


def _listener_pid(board, daemon) -> int | None:
    rows = board.sql(
        "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s",
        (f"corrald-listen %:{daemon.pid}:%",),
    )
    return rows[0][0] if rows else None


def test_work_made_ready_on_one_daemon_reaches_a_teammate_waiting_on_another(shared_board):
    a, b = shared_board.daemon("a"), shared_board.daemon("b")
    mate = a.add_teammate("waiter")
    stream = b.client(mate.token, "waiter").idle(poll_interval=SLOW_POLL_S)
    b.wait_open_streams(1)
    for round_no in range(5):
        a.create_tasks(spec(f"r{round_no}"))
        claim = stream.next_event("claim", timeout=WAKE_TIMEOUT_S)
        assert claim.task.id == f"r{round_no}"
        b.client(mate.token, "waiter").complete(claim)
    stream.cancel()


def test_a_killed_listener_reconnects_and_wakes_again(shared_board):
    a, b = shared_board.daemon("a"), shared_board.daemon("b")
    mate = a.add_teammate("waiter")
    stream = b.client(mate.token, "waiter").idle(poll_interval=SLOW_POLL_S)
    b.wait_open_streams(1)
    killed = _listener_pid(shared_board, b)
    assert killed is not None, "daemon b has no listening connection"
    shared_board.sql("SELECT pg_terminate_backend(%s)", (killed,))
    wait_until(lambda: _listener_pid(shared_board, b) not in (None, killed), 10, "daemon b's listener to reconnect")
    a.create_tasks(spec("after"))
    claim = stream.next_event("claim", timeout=WAKE_TIMEOUT_S)
    assert claim.task.id == "after"
    stream.cancel()


def test_a_newer_stream_on_another_daemon_ends_the_older_one(shared_board):
    a, b = shared_board.daemon("a"), shared_board.daemon("b")
    mate = a.add_teammate("mover")
    older = a.client(mate.token, "mover").idle(poll_interval=SLOW_POLL_S)
    a.wait_open_streams(1)
    newer = b.client(mate.token, "mover").idle(poll_interval=SLOW_POLL_S)
    code, details = older.wait_end(WAKE_TIMEOUT_S)
    assert code == grpc.StatusCode.ABORTED, (code, details)
    wait_until(lambda: a.stats().open_streams == 0, 5, "daemon a to let the stream go")
    # The teammate is online, through b, and gets work there.
    assert b.teammate("mover").status != pb.TEAMMATE_STATUS_OFFLINE
    a.create_tasks(spec("for-the-mover"))
    assert newer.next_event("claim").task.id == "for-the-mover"
    newer.cancel()


def test_a_teammate_removed_through_one_daemon_loses_its_stream_on_another(shared_board):
    a, b = shared_board.daemon("a"), shared_board.daemon("b")
    mate = a.add_teammate("leaver")
    stream = b.client(mate.token, "leaver").idle(poll_interval=SLOW_POLL_S)
    b.wait_open_streams(1)
    a.lead.lead.RemoveTeammate(pb.RemoveTeammateRequest(name="leaver"))
    code, _ = stream.wait_end(WAKE_TIMEOUT_S)
    assert code == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as refused:
        b.client(mate.token, "leaver").board.GetIdentity(pb.GetIdentityRequest())
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_teammate_minted_on_one_daemon_is_known_to_another_at_once(shared_board):
    a, b = shared_board.daemon("a"), shared_board.daemon("b")
    mate = a.add_teammate("new")
    identity = b.client(mate.token, "new").board.GetIdentity(pb.GetIdentityRequest())
    assert (identity.identity, identity.role) == ("new", "teammate")


def test_the_event_log_has_no_gap_and_no_repeat_while_two_daemons_write(shared_board):
    a, b = shared_board.daemon("a"), shared_board.daemon("b")
    stop = threading.Event()
    recorder = Recorder()
    deadline = time.monotonic() + 60
    workers = []
    for index in range(8):
        mate = a.add_teammate(f"w{index}")
        workers.append(
            Worker(mate.name, mate.token, [a, b][index % 2 :] + [a, b][: index % 2], recorder, stop, deadline)
        )
    for worker in workers:
        worker.start()

    def create(daemon, prefix: str) -> None:
        for batch in range(10):
            daemon.create_tasks(*(spec(f"{prefix}{batch}-{i}") for i in range(20)))

    seen: list[tuple[int, str, str]] = []
    after = 0
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        creators = [pool.submit(create, a, "a"), pool.submit(create, b, "b")]
        # A reader tailing through daemon a, resuming every 50 events.
        while len(seen) < 1200 and time.monotonic() < deadline:
            watch = a.watch(after_seq=after, timeout=10)
            for _ in range(50):
                item = watch.try_next(5)
                if item is None:
                    break
                seen.append((item.seq, item.WhichOneof("event"), item.SerializeToString().hex()))
                after = item.seq
            watch.cancel()
            if all(c.done() for c in creators) and len(seen) >= 400:
                break
        for creator in creators:
            creator.result(30)
    stop.set()
    for worker in workers:
        worker.join(15)
    seqs = [seq for seq, _, _ in seen]
    assert seqs == list(range(1, len(seqs) + 1)), "the tail skipped or repeated a seq"
    # Replayed from the start through the other daemon: the same events under the same seqs.
    replay = b.watch(after_seq=0, timeout=10)
    again = [replay.next() for _ in range(len(seen))]
    replay.cancel()
    assert [(e.seq, e.WhichOneof("event")) for e in again] == [(seq, kind) for seq, kind, _ in seen]
    assert [w.errors for w in workers if w.errors] == []


def test_three_daemons_starting_together_on_an_empty_schema_migrate_once(shared_board):
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        started = list(pool.map(lambda label: shared_board.daemon(label), ["x", "y", "z"]))
    # Every migration ran once: one ran twice would have failed (a column added twice).
    assert shared_board.sql("SELECT version FROM schema_version") == [(SCHEMA_VERSION,)] and SCHEMA_VERSION > 1
    assert len(shared_board.sql("SELECT board_id FROM board")) == 1
    writers = [d for d in started if (d.state_dir / "lead.token").exists()]
    assert len(writers) == 1, "exactly the daemon that created the board holds its lead token"
    ids = {(d.state_dir / "board.id").read_text().strip() for d in started}
    assert ids == {str(shared_board.sql("SELECT board_id FROM board")[0][0])}
    assert len(shared_board.sql("SELECT id FROM daemons")) == 3
    for daemon in started:  # every daemon serves, with the one lead token, and sees the other two
        stats = daemon.lead.board.GetStats(pb.GetStatsRequest())
        assert (stats.store, stats.postgres.daemons) == ("postgresql", 3)


def test_a_daemon_whose_host_clock_is_an_hour_off_keeps_the_databases_time(shared_board):
    a = shared_board.daemon("a")
    b = shared_board.daemon("b", env={LOCAL_CLOCK_OFFSET_ENV: str(3_600_000)})
    mate = a.add_teammate("timed")
    before = time.time()
    b.create_tasks(spec("timed-task", lease=30))
    stream = b.client(mate.token, "timed").idle()
    claim = stream.next_event("claim")
    after = time.time()
    stream.cancel()
    task = a.get_task("timed-task")
    assert before - 1 <= ts_seconds(task.create_time) <= after + 1, "create time off the database's clock"
    lease_end = ts_seconds(claim.lease_expire_time)
    assert before + 29 <= lease_end <= after + 31, f"lease ends {lease_end - after:.0f} s from now, not 30"


@pytest.mark.timeout(150)
def test_teammates_of_a_killed_daemon_go_on_through_the_other_and_lose_nothing(shared_board):
    a, b = shared_board.daemon("a"), shared_board.daemon("b")
    recorder = Recorder()
    stop = threading.Event()
    deadline = time.monotonic() + 100
    workers = []
    for index in range(10):
        mate = a.add_teammate(f"k{index}")
        workers.append(Worker(mate.name, mate.token, [a, b], recorder, stop, deadline))
    lead_on_b = b  # the Lead goes on through b once a is gone
    for worker in workers:
        worker.start()
    lead_on_b.create_tasks(*(spec(f"k{i}", lease=10) for i in range(300)))
    wait_until(lambda: sum(w.completed for w in workers) >= 60, 60, "work under way on daemon a")
    a.kill()
    recorder.note("restart")
    wait_until(
        lambda: lead_on_b.stats().tasks_by_state.get("TASK_STATE_COMPLETED", 0) == 300, 80, "all 300 tasks completed"
    )
    stop.set()
    for worker in workers:
        worker.join(15)
    assert [e for w in workers for e in w.errors] == []
    assert all(w.failovers >= 1 for w in workers), "every teammate moved to daemon b"
    with shared_board.connection() as conn:
        _, violations = check(recorder.events, conn)
    assert violations == [], violations[:10]


# ---------------------------------------------------------------- what bad input gets


def test_a_schema_newer_than_the_daemon_is_refused_and_left_alone(shared_board, tmp_path):
    shared_board.daemon("a").stop_and_check()
    shared_board.sql("UPDATE schema_version SET version = 99")
    code, stderr = _refused(tmp_path / "b", shared_board.store_args())
    assert code != 0 and "newer than this corrald" in stderr, stderr
    assert shared_board.sql("SELECT version FROM schema_version") == [(99,)]


def test_a_state_directory_bound_to_another_board_is_refused_and_nothing_is_written(shared_board, tmp_path):
    first = shared_board.daemon("a")
    first.stop_and_check()
    other_schema = shared_board.schema + "_other"
    args = ["--store", shared_board.dsn, "--pg-schema", other_schema]
    code, stderr = _refused(first.state_dir.parent, args)
    assert code != 0 and "serves board" in stderr, stderr
    assert shared_board.sql("SELECT 1 FROM information_schema.tables WHERE table_schema = %s", (other_schema,)) == []


@pytest.mark.parametrize(
    ("dsn", "extra", "says"),
    [
        ("postgresql://u:s3cret@[bad", (), "malformed"),
        ("postgresql://u:s3cret@db.example.com/corral", (), "sslmode=require"),
        ("postgresql://nobody_here:s3cret@127.0.0.1:5432/postgres", (), "cannot open the PostgreSQL board"),
        ("postgresql://postgres:s3cret@127.0.0.1:1/postgres", ("--pg-connect-timeout", "1"), "cannot open"),
    ],
    ids=["malformed", "remote-without-tls", "unknown-role", "unreachable"],
)
def test_a_store_it_cannot_use_stops_the_daemon_with_one_line_and_no_password(tmp_path, dsn, extra, says):
    code, stderr = _refused(tmp_path, ["--store", dsn, *extra])
    assert code == 2, (code, stderr)
    assert says in stderr, stderr
    assert "s3cret" not in stderr
    assert len([line for line in stderr.splitlines() if line.startswith("corrald:")]) == 1, stderr


def test_writers_without_a_postgresql_store_are_refused_and_nothing_is_written(tmp_path):
    state = tmp_path / "state"
    environment = {key: value for key, value in os.environ.items() if key != "CORRAL_STORE"}
    command = [sys.executable, "-m", "corrald", "serve", "--state-dir", str(state), "--pg-writers", "2"]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--pg-writers needs --store" in done.stderr, (done.returncode, done.stderr)
    assert not state.exists() or not any(state.iterdir())


def test_the_board_lock_switched_off_for_a_pool_of_writers_is_refused(tmp_path):
    """The benchmark's switch that drops the board lock is sound only for one writer thread."""
    state = tmp_path / "state"
    environment = {**os.environ, BENCH_SWITCHES_ENV: "lock"}
    command = [sys.executable, "-m", "corrald", "serve", "--state-dir", str(state), "--store", run_database_dsn()]
    command += ["--pg-writers", "2"]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and f"{BENCH_SWITCHES_ENV}=lock needs --pg-writers 1" in done.stderr, done.stderr


def test_group_commit_switched_off_runs_one_job_per_transaction_on_writers_in_parallel(shared_board):
    """The benchmark's "lock,group" switch (the writer a board ordered by row locks alone would
    need) is allowed with a pool, and does run every job in a transaction of its own."""
    daemon = shared_board.daemon("a", env={BENCH_SWITCHES_ENV: "lock,group"}, extra_args=("--pg-writers", "2"))
    before = daemon.stats().writer
    # Calls at once, so that a group commit would take several of them (with it on, the
    # commits below come out fewer than the jobs).
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda n: daemon.create_tasks(spec(f"one-{n}")), range(96)))
    after = daemon.stats().writer
    assert after.jobs - before.jobs >= 96
    assert after.commits - before.commits == after.jobs - before.jobs, (before, after)
    assert daemon.stats().postgres.writers == 2


def test_an_unknown_benchmark_switch_is_refused(tmp_path):
    state = tmp_path / "state"
    environment = {**os.environ, BENCH_SWITCHES_ENV: "lock,fsync"}
    command = [sys.executable, "-m", "corrald", "serve", "--state-dir", str(state), "--store", run_database_dsn()]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown switch" in done.stderr and "group" in done.stderr, done.stderr
    assert not (state / "board.id").exists()  # it served no board


def test_a_pool_of_no_writers_is_refused(tmp_path):
    code, stderr = _refused(tmp_path, ["--store", "postgresql://postgres@127.0.0.1/postgres", "--pg-writers", "0"])
    assert code == 2 and "Invalid value for '--pg-writers'" in stderr, (code, stderr)


def _refused(root, args) -> tuple[int, str]:
    from tests.support import start_refused

    return start_refused(root / "state", extra_args=args)


def test_list_teammates_and_stats_say_who_serves_and_how_the_store_is(shared_board):
    a, b = shared_board.daemon("a"), shared_board.daemon("b", extra_args=("--pg-writers", "2"))
    mate = a.add_teammate("served")
    stream = b.client(mate.token, "served").idle(poll_interval=SLOW_POLL_S)
    b.wait_open_streams(1)

    def listed_by_a() -> dict[str, pb.Teammate]:
        return {t.name: t for t in a.lead.board.ListTeammates(pb.ListTeammatesRequest()).teammates}

    # The stream counts as open before its opening's write (online, served by b) commits.
    wait_until(lambda: listed_by_a()["served"].daemon, 15, "the teammate listed as served")
    listed = listed_by_a()
    daemons = json.loads(json.dumps([row[0] for row in shared_board.sql("SELECT id FROM daemons ORDER BY id")]))
    assert listed["served"].daemon in daemons and f":{b.pid}:" in listed["served"].daemon
    # A daemon's listener connects, and reconnects, on its own time, after it serves.
    wait_until(lambda: a.stats().postgres.listener_connected, 15, "a's listener connected")
    stats = a.stats()
    assert stats.store == "postgresql"
    assert stats.postgres.daemons == 2
    assert stats.postgres.oldest_transaction_age.ToMilliseconds() >= 0
    # Pool use: a's writers by default, b's as asked; the reader answering is in use.
    assert (stats.postgres.writers, b.stats().postgres.writers) == (PG_DEFAULT_WRITERS, 2)
    assert 0 <= stats.postgres.writers_in_transaction <= stats.postgres.writers
    assert stats.postgres.readers >= 1 and 1 <= stats.postgres.readers_in_use <= stats.postgres.readers
    stream.cancel()


@pytest.mark.timeout(150)
def test_connections_cut_mid_run_are_made_again_and_no_acknowledged_write_is_lost(shared_board):
    """Every connection of both daemons to the server is ended twice while teammates work (as a
    server restart would end them): writes in flight fail UNAVAILABLE and are sent again, the
    daemons reconnect by themselves, and the history checker finds every invariant kept."""
    a, b = shared_board.daemon("a"), shared_board.daemon("b")
    recorder = Recorder()
    stop = threading.Event()
    deadline = time.monotonic() + 100
    workers = []
    for index in range(8):
        mate = a.add_teammate(f"c{index}")
        workers.append(Worker(mate.name, mate.token, [a, b] if index % 2 else [b, a], recorder, stop, deadline))
    for worker in workers:
        worker.start()
    a.create_tasks(*(spec(f"c{i}", lease=20) for i in range(400)))
    for cut in (60, 200):
        wait_until(lambda cut=cut: sum(w.completed for w in workers) >= cut, 60, f"{cut} tasks completed")
        ended = shared_board.sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name LIKE 'corrald%%' AND pid != pg_backend_pid()"
        )
        assert len(ended) >= 4, "both daemons' writer and listener connections were ended"
    wait_until(lambda: a.stats().tasks_by_state.get("TASK_STATE_COMPLETED", 0) == 400, 80, "all 400 tasks completed")
    stop.set()
    for worker in workers:
        worker.join(15)
    with shared_board.connection() as conn:
        _, violations = check(recorder.events, conn)
    assert violations == [], violations[:10]
    for daemon in (a, b):
        wait_until(lambda daemon=daemon: daemon.stats().postgres.listener_connected, 15, "the listener back")
