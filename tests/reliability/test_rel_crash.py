"""Crashes and restarts: SIGKILL at random moments, kill/error failpoints around COMMIT,
restarts under renewing teammates, SIGTERM under load (design §2 invariants 1-4, 6, 9; §3 durability).
"""

from __future__ import annotations

import asyncio
import collections
import json
import random
import signal
import subprocess
import time

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc
from tests.support import wait_until

from .rel_harness import (
    IN_DOUBT,
    Lead,
    child_process,
    dur,
    first_claim,
    integrity,
    md,
    pick,
    random_dag,
    replay_watch,
    specs_for,
    wait_briefly,
    wait_for_tasks_terminal,
    wal_size,
)
from .rel_history import Recorder, check, load
from .rel_team import Behaviour, run_team

# ---------------------------------------------------------------- helpers


def _spawn_team(tmp_path, index: int, address: str, teammates: dict[str, str], behaviour: dict) -> tuple:
    history = tmp_path / f"team{index}.jsonl"
    config = tmp_path / f"team{index}.json"
    config.write_text(
        json.dumps({"address": address, "teammates": teammates, "history": str(history), "behaviour": behaviour})
    )
    log = open(tmp_path / f"team{index}.log", "wb")  # noqa: SIM115
    proc = child_process("rel_team", "work", str(config), stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    log.close()
    line = proc.stdout.readline()
    assert b"started" in line, (tmp_path / f"team{index}.log").read_text()
    return proc, history


def _stop_team(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(10)


def _history_check(events, daemon):
    with daemon.board() as conn:
        figures, violations = check(events, conn)
        states = collections.Counter(s for (s,) in conn.execute("SELECT state FROM tasks"))
        expired = conn.execute("SELECT count(*) FROM claims WHERE outcome = 'expired'").fetchone()[0]
    return figures, violations, states, expired


def _stalled(events) -> dict:
    outcomes = collections.Counter(
        f"{e['code']}/{e['reason']}" if e["outcome"] == "err" else e["outcome"] for e in events if e.get("stalled")
    )
    return dict(outcomes)


def _try_create_pending(lead: Lead, pending: list, created: dict, timeout: float = 3.0) -> None:
    """Creates pending batches in order (a later batch may depend on an earlier one)."""
    while pending:
        request_id, specs = pending[0]
        try:
            tasks = lead.create(specs, request_id, timeout=timeout)
        except grpc.RpcError as error:
            if error.code() in IN_DOUBT | {grpc.StatusCode.RESOURCE_EXHAUSTED}:
                return  # in doubt: re-sent with the same request_id later
            raise
        assert [t.id for t in tasks] == [s.id for s in specs], "a retried batch returned different tasks"
        created[request_id] = [t.id for t in tasks]
        pending.pop(0)


# ---------------------------------------------------------------- random SIGKILLs


@pytest.mark.timeout(pick(150, 900))
def test_random_sigkills_lose_nothing(daemons, tmp_path, figures):
    """Tasks in several DAGs, teammates in child processes, the daemon SIGKILLed at random
    moments (and by kill failpoints around COMMIT) and restarted on the same state dir."""
    n_tasks, n_teammates, n_procs, n_kills = pick(150, 500), pick(10, 50), 2, pick(4, 20)
    work_ms = pick((100, 400), (200, 1500))
    rng = random.Random(1234)
    d = daemons().start()
    lead = Lead(d)
    orchestrator = Recorder()
    names = {f"tm{i}": lead.add_teammate(f"tm{i}") for i in range(n_teammates)}

    # DAG batches: created progressively, later ones may depend on earlier ones.
    n_batches = n_kills + 2
    sizes = [n_tasks // n_batches + (1 if i < n_tasks % n_batches else 0) for i in range(n_batches)]
    pending, all_ids = [], []
    for b, size in enumerate(sizes):
        outside = rng.sample(all_ids, min(3, len(all_ids))) if all_ids else []
        graph = random_dag(rng, f"d{b}", size, outside=outside)
        pending.append((f"batch-{b}", specs_for(graph, lease_duration=dur(2000), max_attempts=100)))
        all_ids += [t for t, _ in graph]
    created: dict[str, list[str]] = {}
    first = pending[:2]
    for _ in range(2):
        _try_create_pending(lead, first, created)
    pending = pending[2:]

    behaviour = {
        "work_ms": list(work_ms),
        "p_renew": 0.3,
        "p_fail": 0.03,
        "p_release": 0.03,
        "p_foreign": 0.05,
        "p_stall": 0.04,
        "poll_ms": 200,
        "seed": 7,
    }
    items = list(names.items())
    teams = [_spawn_team(tmp_path, i, d.address, dict(items[i::n_procs]), behaviour) for i in range(n_procs)]

    causes = collections.Counter()
    started = time.monotonic()
    try:
        for _ in range(n_kills):
            code = d.wait_exit(rng.uniform(*pick((0.4, 1.2), (0.5, 2.5))))
            if code is None:
                d.kill()
                causes["sigkill"] += 1
            else:
                assert code == -signal.SIGKILL, f"daemon exited {code}: {d.stderr_tail()}"
                causes["failpoint"] += 1
            failpoint = rng.choice(
                [None, None, f"before_commit=kill:{rng.randint(5, 80)}", f"after_commit=kill:{rng.randint(5, 80)}"]
            )
            orchestrator.note("restart", failpoint=failpoint)
            d.start(failpoint)
            _try_create_pending(lead, pending, created)
        if d.alive():
            d.kill()
        orchestrator.note("restart", failpoint=None)
        d.start()
        for _ in range(20):
            _try_create_pending(lead, pending, created, timeout=10)
            if not pending:
                break
        assert not pending, "could not create every batch"
        seen_events: dict[int, bytes] = {}
        states = wait_for_tasks_terminal(lead, set(all_ids), timeout=pick(90, 600), seen=seen_events)
    finally:
        codes = [_stop_team(proc) for proc, _ in teams]
        lead.close()
    run_s = time.monotonic() - started
    code, stop_s = d.terminate(10)
    assert code == 0, d.stderr_tail()
    # Every Watch event the lead saw is replayed identically by the next daemon life.
    d.start()
    lead = Lead(d)
    replayed = replay_watch(lead, max(seen_events))
    lead.close()
    assert d.terminate(10)[0] == 0
    watch_differences = sum(1 for seq, event in seen_events.items() if replayed.get(seq) != event)

    events = load(h for _, h in teams) + orchestrator.events
    hist, violations, db_states, expired = _history_check(events, d)
    with d.board() as conn:
        present = {tid for (tid,) in conn.execute("SELECT id FROM tasks")}
    missing_creates = sum(1 for ids in created.values() for t in ids if t not in present)
    completed = sum(1 for s in states.values() if s == pb.TASK_STATE_COMPLETED)
    check_ok = integrity(d)
    team_exits = [e for e in events if e["kind"] == "team_exit"]
    figures(
        tasks_completed=f"{completed}/{len(all_ids)}",
        kills=dict(causes),
        restarts=d.starts - 1,
        run_s=run_s,
        acked_missing=hist["acked_missing"] + missing_creates,
        double_completions_db=hist["double_completions_db"],
        double_completions_history=hist["double_completions_history"],
        integrity_check=check_ok,
        claims=hist["claims"],
        deliveries=hist["deliveries"],
        ops=hist["ops"],
        ops_in_doubt=hist["ops_in_doubt"],
        foreign_attempts=hist["foreign_attempts"],
        foreign_accepted=hist["foreign_accepted"],
        expired_claims=expired,
        stalled_completions=_stalled(events),
        history_violations=len(violations),
        watch_events_seen=len(seen_events),
        watch_replay_differences=watch_differences,
        stream_errors=[e["stream_errors"] for e in team_exits],
        team_exit_codes=codes,
    )
    assert not violations, "\n".join(violations[:20])
    assert completed == len(all_ids)
    assert missing_creates == 0 and hist["acked_missing"] == 0
    assert hist["double_completions_db"] == 0 and hist["double_completions_history"] == 0
    assert check_ok in ("ok", None)  # None: a PostgreSQL board (no SQLite file to check)
    assert hist["foreign_accepted"] == 0
    assert watch_differences == 0
    assert len(team_exits) == n_procs, "a teammate process did not exit cleanly"


# ---------------------------------------------------------------- failpoints around COMMIT


def _settled_commits(lead: Lead) -> int:
    """Writer commits once the start-up jobs (recovery, first reap) are done."""
    wait_until(lambda: lead.stats().writer.commits >= 2, 10, what="start-up commits")
    before = -1
    for _ in range(50):
        now = lead.stats().writer.commits
        if now == before:
            return now
        before = now
        wait_briefly(0.1)
    raise AssertionError("writer never settled")


def _fill_commits(lead: Lead, count: int) -> None:
    """`count` harmless committed writes, one commit each (sequential)."""
    for i in range(count):
        lead.board.SendMessage(pb.SendMessageRequest(to="lead", body=f"filler {i}"), metadata=lead.md, timeout=10)


KILL_AT = 12  # the failpoint fires on this commit after start; earlier ones are filled in


@pytest.mark.timeout(60)
@pytest.mark.parametrize("operation", ["create", "claim", "complete"])
@pytest.mark.parametrize("point", ["before_commit", "after_commit"])
def test_kill_failpoint_around_commit(daemons, figures, point, operation):
    """SIGKILL just before / just after the COMMIT of one operation; restart; the client's
    retry with the same token / request_id gives the right answer; run to completion."""
    d = daemons().start()
    lead = Lead(d)
    token = lead.add_teammate("fp")
    stub = pb_grpc.TeammateServiceStub(lead.channel)
    lead.create(specs_for([("a", []), ("b", ["a"])], lease_duration=dur(60_000)), "base")
    held = first_claim(stub, token) if operation == "complete" else None
    assert d.terminate(10)[0] == 0
    lead.close()

    d.start(f"{point}=kill:{KILL_AT}")
    lead = Lead(d)
    stub = pb_grpc.TeammateServiceStub(lead.channel)
    commits = _settled_commits(lead)
    op_commit_index = 2 if operation == "claim" else 1  # an Idle stream commits set_online, then the claim
    _fill_commits(lead, KILL_AT - commits - op_commit_index)
    new_specs = specs_for([("c", ["b"])], lease_duration=dur(60_000))
    with pytest.raises(grpc.RpcError) as raised:
        if operation == "create":
            lead.create(new_specs, "req-c", timeout=10)
        elif operation == "claim":
            first_claim(stub, token)
        else:
            stub.CompleteTask(
                pb.CompleteTaskRequest(task_id="a", claim_token=held.claim_token, result=b"R"),
                metadata=md(token),
                timeout=10,
            )
    in_doubt_code = raised.value.code()
    assert in_doubt_code in IN_DOUBT, in_doubt_code
    assert d.wait_exit(10) == -signal.SIGKILL, "the failpoint did not kill the daemon"
    lead.close()

    d.start()
    lead = Lead(d)
    stub = pb_grpc.TeammateServiceStub(lead.channel)
    durable = point == "after_commit"
    if operation == "create":
        assert lead.exists("c") == durable
        retried = lead.create(new_specs, "req-c")
        assert [t.id for t in retried] == ["c"]
        outcome = "retry returned the batch"
    elif operation == "claim":
        with d.board() as conn:
            rows = conn.execute("SELECT token, fence FROM claims").fetchall()
        assert len(rows) == (1 if durable else 0)
        claim = first_claim(stub, token)
        if durable:  # never delivered, durable: re-sent on the next stream with the same token and fence
            assert (claim.claim_token, claim.fence) == rows[0]
        held = claim
        outcome = "claim re-sent" if durable else "fresh claim"
    else:
        task = lead.get_task("a")
        assert task.state == (pb.TASK_STATE_COMPLETED if durable else pb.TASK_STATE_IN_PROGRESS)
        reply = stub.CompleteTask(
            pb.CompleteTaskRequest(task_id="a", claim_token=held.claim_token, result=b"R"),
            metadata=md(token),
            timeout=10,
        )
        assert reply.task.state == pb.TASK_STATE_COMPLETED and reply.task.result == b"R"
        outcome = "stored result" if durable else "completed on retry"
        # The same token again, with another result: the stored result, nothing changes.
        again = stub.CompleteTask(
            pb.CompleteTaskRequest(task_id="a", claim_token=held.claim_token, result=b"other"),
            metadata=md(token),
            timeout=10,
        )
        assert again.task.result == b"R"
        held = None
    # Run to completion.
    if operation != "create":
        lead.create(new_specs, "req-c")
    done = 0
    while True:
        if held is None:
            if all(lead.get_task(t).state == pb.TASK_STATE_COMPLETED for t in "abc"):
                break
            held = first_claim(stub, token)
        stub.CompleteTask(
            pb.CompleteTaskRequest(task_id=held.task.id, claim_token=held.claim_token, result=b"R"),
            metadata=md(token),
            timeout=10,
        )
        done += 1
        held = None
    lead.close()
    assert d.terminate(10)[0] == 0
    _, violations, states, _ = _history_check([], d)
    with d.board() as conn:
        doubles = conn.execute(
            "SELECT count(*) FROM (SELECT task_seq FROM claims WHERE outcome='completed'"
            " GROUP BY task_seq HAVING count(*) > 1) AS doubled"
        ).fetchone()[0]
    check_ok = integrity(d)
    figures(
        point=point,
        operation=operation,
        client_saw=in_doubt_code.name,
        after_restart=outcome,
        tasks_completed=f"{states[3]}/3",
        double_completions=doubles,
        integrity_check=check_ok,
        db_violations=len(violations),
    )
    assert not violations, violations
    assert states[3] == 3 and doubles == 0 and check_ok in ("ok", None)


# ---------------------------------------------------------------- restarts under renewing teammates


@pytest.mark.timeout(pick(60, 300))
def test_restart_never_expires_a_renewing_teammate(daemons, tmp_path, figures):
    """Teammates hold claims (lease 1-2 s) and keep renewing while the daemon is SIGKILLed
    and restarted, and once stopped with SIGTERM and restarted: no premature expiry."""
    n_teammates, hold_s, n_restarts = pick(6, 20), pick(7.0, 25.0), pick(3, 8)
    d = daemons().start()
    lead = Lead(d)
    names = {f"r{i}": lead.add_teammate(f"r{i}") for i in range(n_teammates)}
    lead.create(
        [
            pb.TaskSpec(id=f"hold-{i}", title="hold", lease_duration=dur(1000 if i % 2 else 2000))
            for i in range(n_teammates)
        ],
        "holds",
    )
    rec = Recorder()
    behaviour = Behaviour(
        work_ms=(hold_s * 1000, hold_s * 1000),
        p_renew=1.0,
        p_fail=0,
        p_release=0,
        p_foreign=0,
        poll_ms=200,
        op_deadline_s=60,
    )
    rng = random.Random(99)
    kinds = collections.Counter()

    async def main() -> None:
        stop = asyncio.Event()
        team_task = asyncio.ensure_future(run_team(d.address, names, rec, behaviour, stop))
        loop = asyncio.get_running_loop()
        for i in range(n_restarts):
            await asyncio.sleep(rng.uniform(0.6, 1.4))  # a random moment, not a wait for a condition
            if i == n_restarts - 1:
                code, _ = await loop.run_in_executor(None, d.terminate, 10)
                assert code == 0
                kinds["sigterm"] += 1
            else:
                await loop.run_in_executor(None, d.kill)
                kinds["sigkill"] += 1
            rec.note("restart")
            await loop.run_in_executor(None, d.start)
        deadline = time.monotonic() + hold_s + 30
        while not all(f"hold-{i}" in team_task_finished(team_task, rec) for i in range(n_teammates)):
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        stop.set()
        await team_task

    asyncio.run(main())
    lead.close()
    assert d.terminate(10)[0] == 0
    hist, violations, states, expired = _history_check(rec.events, d)
    renews = [e for e in rec.events if e["kind"] == "renew"]
    refused = [e for e in renews if e["outcome"] == "err"]
    premature = expired + sum(1 for e in refused if e["reason"] == "LEASE_EXPIRED")
    with d.board() as conn:
        claims_per_task = conn.execute(
            "SELECT max(n) FROM (SELECT count(*) n FROM claims GROUP BY task_seq) AS per_task"
        ).fetchone()[0]
    figures(
        teammates=n_teammates,
        restarts=dict(kinds),
        renews_ok=sum(1 for e in renews if e["outcome"] == "ok"),
        renews_in_doubt=sum(1 for e in renews if e["outcome"] == "indoubt"),
        renews_refused=len(refused),
        premature_lease_expiries=premature,
        max_claims_per_task=claims_per_task,
        tasks_completed=f"{states[3]}/{n_teammates}",
        history_violations=len(violations),
    )
    assert not violations, "\n".join(violations[:20])
    assert premature == 0 and not refused
    assert claims_per_task == 1 and states[3] == n_teammates


def team_task_finished(_team_task, rec: Recorder) -> set[str]:
    return {e["task"] for e in rec.events if e["kind"] == "complete" and e["outcome"] == "ok"}


# ---------------------------------------------------------------- SIGTERM under load


@pytest.mark.timeout(pick(60, 300))
def test_sigterm_under_load(daemons, figures):
    """SIGTERM while teammates work and the lead creates tasks and sends messages:
    exit 0 within 5 s, WAL truncated, no acknowledged operation lost."""
    n_teammates, load_s = pick(8, 30), pick(2.5, 8.0)
    d = daemons().start()
    lead = Lead(d)
    names = {f"w{i}": lead.add_teammate(f"w{i}") for i in range(n_teammates)}
    lead.close()
    rec = Recorder()
    behaviour = Behaviour(
        work_ms=(5, 40), p_renew=0.3, p_fail=0.05, p_release=0.05, p_foreign=0.05, poll_ms=200, op_deadline_s=3
    )
    acked_creates: dict[str, list[str]] = {}
    acked_messages: list[tuple[str, str]] = []
    result = {}

    async def lead_load(stop: asyncio.Event) -> None:
        channel = d.aio_channel()
        stub, board = pb_grpc.LeadServiceStub(channel), pb_grpc.BoardServiceStub(channel)
        token_md = md(d.lead_token())
        i = 0
        while not stop.is_set():
            i += 1
            specs = specs_for([(f"L{i}-{j}", [f"L{i}-{j - 1}"] if j else []) for j in range(5)])
            try:
                reply = await stub.CreateTasks(
                    pb.CreateTasksRequest(tasks=specs, request_id=f"L{i}"), metadata=token_md, timeout=5
                )
                acked_creates[f"L{i}"] = [t.id for t in reply.tasks]
                to = f"w{i % n_teammates}"
                await board.SendMessage(pb.SendMessageRequest(to=to, body=f"m{i}"), metadata=token_md, timeout=5)
                acked_messages.append((to, f"m{i}"))
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.02)
        await channel.close()

    async def main() -> None:
        stop = asyncio.Event()
        team_task = asyncio.ensure_future(run_team(d.address, names, rec, behaviour, stop))
        lead_task = asyncio.ensure_future(lead_load(stop))
        await asyncio.sleep(load_s)  # the load runs for a fixed time
        loop = asyncio.get_running_loop()
        result["code"], result["stop_s"] = await loop.run_in_executor(None, d.terminate, 10)
        stop.set()
        await asyncio.gather(team_task, lead_task)

    asyncio.run(main())
    wal = wal_size(d) if d.wal.exists() else None
    hist, violations, states, _ = _history_check(rec.events, d)
    with d.board() as conn:
        present = {tid for (tid,) in conn.execute("SELECT id FROM tasks")}
        inbox = set(conn.execute("SELECT recipient, body FROM inbox WHERE kind = 'message'").fetchall())
    lost_creates = sum(1 for ids in acked_creates.values() for t in ids if t not in present)
    lost_messages = sum(1 for m in acked_messages if m not in inbox)
    check_ok = integrity(d)
    lost = lost_creates + lost_messages + hist["acked_missing"]
    figures(
        exit_code=result["code"],
        exit_s=result["stop_s"],
        wal_bytes_after=wal,
        acked_creates=len(acked_creates),
        acked_messages=len(acked_messages),
        acked_claim_ops=hist["ops"] - hist["ops_in_doubt"],
        acknowledged_lost=lost,
        history_violations=len(violations),
        integrity_check=check_ok,
    )
    assert result["code"] == 0, d.stderr_tail()
    assert result["stop_s"] <= 5.0
    assert wal in (None, 0)
    assert lost == 0 and not violations, "\n".join(violations[:20])
    assert check_ok in ("ok", None)  # None: a PostgreSQL board (no SQLite file to check)
