"""Baseline: the tutorial design — N processes, each with its own SQLite connection.

Every worker opens the file with busy_timeout=5000 and runs its own
`BEGIN IMMEDIATE` transactions: a claim (reclaim expired leases, pick the first
ready task, write a unique token into the history table, conditional update)
and a complete (check the token, finish, decrement the dependents' unmet
count). Same pragmas as corrald (WAL, the given synchronous). The schema keeps
the incremental ready count, so the baseline is not penalised for a DAG scan:
only the concurrency model differs. Nothing ready but work left → sleep
POLL_S and retry (the tutorial's polling loop, shortened in its favour).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import secrets
import sqlite3
import time

from . import dags
from .daemon import scratch_dir
from .stats import latency_fields, ms, summarize

POLL_S = 0.01
LEASE_MS = 60_000
SCHEMA = """
CREATE TABLE tasks (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, state INTEGER NOT NULL,
  unmet_deps INTEGER NOT NULL, owner TEXT, claim_token TEXT, lease_expire_ms INTEGER, result BLOB);
CREATE INDEX tasks_ready ON tasks (state, unmet_deps, seq);
CREATE INDEX tasks_lease ON tasks (lease_expire_ms) WHERE state = 2;
CREATE TABLE deps (task_seq INTEGER NOT NULL, dep_seq INTEGER NOT NULL, PRIMARY KEY (task_seq, dep_seq)) WITHOUT ROWID;
CREATE INDEX deps_by_dep ON deps (dep_seq, task_seq);
CREATE TABLE claim_tokens (token TEXT PRIMARY KEY, task_seq INTEGER NOT NULL, owner TEXT NOT NULL,
  claim_ms INTEGER NOT NULL);
"""


def _connect(path: str, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=5.0)
    conn.execute("PRAGMA busy_timeout = 5000")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    return conn


def build(path: str, kind: str, count: int) -> None:
    conn = _connect(path, "OFF")
    conn.executescript(SCHEMA)
    graph = dags.graph(kind, count)
    seq_of = {task_id: seq for seq, (task_id, _) in enumerate(graph, start=1)}
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO tasks (seq, id, state, unmet_deps) VALUES (?, ?, 1, ?)",
        [(seq_of[t], t, len(deps)) for t, deps in graph],
    )
    conn.executemany("INSERT INTO deps VALUES (?, ?)", [(seq_of[t], seq_of[d]) for t, deps in graph for d in deps])
    conn.execute("COMMIT")
    conn.close()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _claim(conn: sqlite3.Connection, name: str) -> tuple[int, str] | None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        now = _now_ms()
        conn.execute(
            "UPDATE tasks SET state = 1, owner = NULL, claim_token = NULL, lease_expire_ms = NULL"
            " WHERE state = 2 AND lease_expire_ms <= ?",
            (now,),
        )
        row = conn.execute("SELECT seq FROM tasks WHERE state = 1 AND unmet_deps = 0 ORDER BY seq LIMIT 1").fetchone()
        if row is None:
            conn.execute("COMMIT")
            return None
        token = secrets.token_urlsafe(24)
        conn.execute("INSERT INTO claim_tokens VALUES (?, ?, ?, ?)", (token, row[0], name, now))
        changed = conn.execute(
            "UPDATE tasks SET state = 2, owner = ?, claim_token = ?, lease_expire_ms = ?"
            " WHERE seq = ? AND state = 1 AND owner IS NULL",
            (name, token, now + LEASE_MS, row[0]),
        ).rowcount
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return (row[0], token) if changed == 1 else None


def _complete(conn: sqlite3.Connection, seq: int, token: str) -> bool:
    conn.execute("BEGIN IMMEDIATE")
    try:
        changed = conn.execute(
            "UPDATE tasks SET state = 3, result = x'00' WHERE seq = ? AND claim_token = ?"
            " AND state = 2 AND lease_expire_ms > ?",
            (seq, token, _now_ms()),
        ).rowcount
        if changed == 1:
            conn.execute(
                "UPDATE tasks SET unmet_deps = unmet_deps - 1"
                " WHERE seq IN (SELECT task_seq FROM deps WHERE dep_seq = ?)",
                (seq,),
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return changed == 1


def _work_left(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM tasks WHERE state IN (1, 2) LIMIT 1").fetchone() is not None


def worker(path: str, synchronous: str, name: str, ready, go, deadline_s: float, results) -> None:
    conn = _connect(path, synchronous)
    cycles, claim_waits, busy = [], [], 0
    ready.put(os.getpid())
    go.wait(120)
    deadline = time.monotonic() + deadline_s
    last_done = 0.0
    while time.monotonic() < deadline:
        started = time.monotonic()
        try:
            got = _claim(conn, name)
        except sqlite3.OperationalError:  # busy_timeout ran out: the tutorial's "stall"
            busy += 1
            claim_waits.append(time.monotonic() - started)
            continue
        claim_waits.append(time.monotonic() - started)
        if got is None:
            if not _work_left(conn):
                break
            time.sleep(POLL_S)
            continue
        while True:
            try:
                _complete(conn, *got)
                break
            except sqlite3.OperationalError:
                busy += 1
        last_done = time.monotonic()
        cycles.append(last_done - started)
    conn.close()
    results.put({"cycles": cycles, "claim_waits": claim_waits, "busy": busy, "last_done": last_done})


def measure(kind: str, processes: int, count: int, synchronous: str, deadline_s: float) -> dict:
    root = scratch_dir("tut")
    path = str(root / "tasks.sqlite3")
    try:
        build(path, kind, count)
        ctx = mp.get_context("spawn")
        ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
        procs = [
            ctx.Process(target=worker, daemon=True, args=(path, synchronous, f"w{i}", ready, go, deadline_s, results))
            for i in range(processes)
        ]
        for proc in procs:
            proc.start()
        for _ in procs:
            ready.get(timeout=120)
        started = time.monotonic()
        go.set()
        outs = [results.get(timeout=deadline_s + 60) for _ in procs]
        for proc in procs:
            proc.join(30)
    finally:
        import shutil  # noqa: PLC0415

        shutil.rmtree(root, ignore_errors=True)
    cycles = [c for o in outs for c in o["cycles"]]
    waits = [w for o in outs for w in o["claim_waits"]]
    wall = max(max(o["last_done"] for o in outs) - started, 1e-9)
    return {
        "throughput": len(cycles) / wall,
        **latency_fields(cycles),
        "completed": len(cycles),
        "worst_stall_ms": ms(max(waits, default=0.0)),
        "busy_timeouts": sum(o["busy"] for o in outs),
    }


FIELDS = {"throughput": "cycles/s", "p50_ms": "ms", "p99_ms": "ms", "worst_stall_ms": "ms", "busy_timeouts": "count"}


def run(sizes, runs: int, log) -> dict:
    out: dict = {}
    plan = [("FULL", "independent", n) for n in sizes.tutorial_processes]
    if sizes.normal:
        plan += [("NORMAL", "independent", n) for n in sizes.tutorial_processes]
    if "layered" in sizes.dags:
        plan.append(("FULL", "layered", sizes.tutorial_layered_at))
    for synchronous, kind, processes in plan:
        results = [
            measure(kind, processes, sizes.tutorial_tasks, synchronous, sizes.run_deadline_s) for _ in range(runs)
        ]
        figure = summarize(results, FIELDS)
        figure["completed"] = [r["completed"] for r in results]
        out.setdefault(synchronous, {}).setdefault(kind, {})[str(processes)] = figure
        log(
            f"tutorial    {synchronous:<6} {kind:<11} {processes:>3} procs: {figure['throughput']['median']:8.0f}"
            f" cycles/s  p99 {figure['p99_ms']['median']:7.2f} ms"
            f"  worst stall {figure['worst_stall_ms']['median']:7.1f} ms"
        )
    return out
