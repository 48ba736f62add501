"""A small history recorder for claims, renews, completions, failures and releases,
and a checker for design §2 invariants over a recorded history plus the final database.

Every record carries monotonic call/reply times (`t_call`, `t_reply`; CLOCK_MONOTONIC is
system-wide, so records from several processes compare) and wall-clock milliseconds
(`w_call`, `w_reply`), which compare with the daemon's own clock (lease ends, claim times).
Those are kept as the daemon keeps its clock (corrald.clock.SystemClock): the wall clock
read once, then advanced by the monotonic clock, so a step of the host's wall clock
during a run moves neither side and cannot pass for two live claims.
"""

from __future__ import annotations

import collections
import itertools
import json
import pathlib
import sqlite3
import threading
import time
from collections.abc import Iterable

ENDING = ("complete", "fail", "release")
OPS = ("renew", *ENDING)
SLACK_MS = 3  # ms rounding between the daemon's clock (floor to ms) and ours


_WALL_AT_MONOTONIC_ZERO_NS = time.time_ns() - time.monotonic_ns()


def _wall_ms() -> float:
    return (_WALL_AT_MONOTONIC_ZERO_NS + time.monotonic_ns()) / 1_000_000


def _told(first: dict, deliveries: list[dict], ops: list[dict], stored: dict | None) -> str:
    """What the history and the board say of one claim, for a violation's message."""
    seen = ", ".join(
        f"{d['tm']} stream {d['stream']} at {d['w_recv']:.0f} lease end {d['lease_end']}" for d in deliveries
    )
    calls = ", ".join(f"{o['kind']} {o['outcome']} {o.get('code', '')} {o['w_call']:.0f}" for o in ops) or "none"
    board = "not stored" if stored is None else f"stored {stored}"
    return f"fence {first['fence']}: delivered to {seen}; calls: {calls}; {board}"


class Recorder:
    """Thread- and task-safe; optionally appends each finished record to a JSON-lines file."""

    def __init__(self, sink: pathlib.Path | None = None) -> None:
        self.events: list[dict] = []
        self._lock = threading.Lock()
        self._sink = sink.open("a") if sink is not None else None

    def _add(self, record: dict) -> None:
        with self._lock:
            self.events.append(record)
            if self._sink is not None:
                self._sink.write(json.dumps(record) + "\n")
                self._sink.flush()

    def claim(self, teammate: str, claim, stream: int) -> dict:
        """A claim delivered on an Idle stream (first delivery or re-send)."""
        from .rel_harness import ts_ms

        record = {
            "kind": "claim",
            "tm": teammate,
            "task": claim.task.id,
            "token": claim.claim_token,
            "fence": claim.fence,
            "attempt": claim.attempt,
            "lease_end": ts_ms(claim.lease_expire_time),
            "lease_ms": claim.task.lease_duration.seconds * 1000 + claim.task.lease_duration.nanos // 1_000_000,
            "t_recv": time.monotonic(),
            "w_recv": _wall_ms(),
            "stream": stream,
        }
        self._add(record)
        return record

    def begin(self, kind: str, teammate: str, task: str, token: str, **extra) -> dict:
        return {
            "kind": kind,
            "tm": teammate,
            "task": task,
            "token": token,
            "t_call": time.monotonic(),
            "w_call": _wall_ms(),
            **extra,
        }

    def end(self, record: dict, outcome: str, code: str = "OK", reason: str = "", **extra) -> dict:
        record.update(t_reply=time.monotonic(), w_reply=_wall_ms(), outcome=outcome, code=code, reason=reason, **extra)
        self._add(record)
        return record

    def note(self, kind: str, **fields) -> None:
        self._add({"kind": kind, "t": time.monotonic(), "w": _wall_ms(), **fields})

    def close(self) -> None:
        if self._sink is not None:
            self._sink.close()
            self._sink = None


def load(paths: Iterable[pathlib.Path]) -> list[dict]:
    events = []
    for path in paths:
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    events.append(json.loads(line))
    return events


# ---------------------------------------------------------------- the checker


def check(events: list[dict], conn: sqlite3.Connection) -> tuple[dict, list[str]]:
    """Checks the history against the final database; returns (figures, violations)."""
    violations: list[str] = []
    v = violations.append
    restarts = sorted(e["w"] for e in events if e["kind"] == "restart")

    # ---------------------------------------------------------- the database side
    task_ids = dict(conn.execute("SELECT seq, id FROM tasks"))
    db_tasks = {
        row[0]: row
        for row in conn.execute("SELECT id, state, result, finish_ms, live_fence, lease_expire_ms FROM tasks")
    }
    db_claims = {}
    claims_by_task = collections.defaultdict(list)
    for fence, token, task_seq, teammate, attempt, claim_ms, end_ms, outcome in conn.execute(
        "SELECT fence, token, task_seq, teammate, attempt, claim_ms, end_ms, outcome FROM claims ORDER BY fence"
    ):
        row = {
            "fence": fence,
            "token": token,
            "task": task_ids[task_seq],
            "tm": teammate,
            "attempt": attempt,
            "claim_ms": claim_ms,
            "end_ms": end_ms,
            "outcome": outcome,
        }
        db_claims[token] = row
        claims_by_task[row["task"]].append(row)
    deps = collections.defaultdict(list)
    for task_seq, dep_seq in conn.execute("SELECT task_seq, dep_seq FROM deps"):
        deps[task_ids[task_seq]].append(task_ids[dep_seq])

    # Invariant 1 and 4 in the database: claims of a task are sequential, tokens unique.
    if len(db_claims) != conn.execute("SELECT count(*) FROM claims").fetchone()[0]:
        v("a claim token appears twice in the claims table")
    for task, rows in claims_by_task.items():
        live = [r for r in rows if r["outcome"] is None]
        if len(live) > 1:
            v(f"db: task {task} has {len(live)} live claims")
        for a, b in itertools.pairwise(rows):
            if a["outcome"] is None or a["end_ms"] is None:
                v(f"db: task {task} claim {a['fence']} still live when claim {b['fence']} was made")
            elif b["claim_ms"] < a["end_ms"]:
                v(
                    f"db: task {task} claim {b['fence']} at {b['claim_ms']} before claim {a['fence']} ended "
                    f"at {a['end_ms']}"
                )
        completed = [r for r in rows if r["outcome"] == "completed"]
        if len(completed) > 1:
            v(f"db: task {task} completed {len(completed)} times")
        state = db_tasks[task][1]
        if state == 3 and (not completed or completed[-1] is not rows[-1]):
            v(f"db: task {task} COMPLETED but its last claim is not the completing one")
        if state == 2 and (not live or db_tasks[task][4] != live[-1]["fence"]):
            v(f"db: task {task} IN_PROGRESS without a matching live claim")
        # Invariant 2: no claim before every dependency completed.
        for dep in deps.get(task, ()):
            dep_state, dep_finish = db_tasks[dep][1], db_tasks[dep][3]
            for r in rows:
                if dep_state != 3 or dep_finish is None or r["claim_ms"] < dep_finish:
                    v(
                        f"db: task {task} claimed at {r['claim_ms']} before dependency {dep} completed "
                        f"(state {dep_state}, finish {dep_finish})"
                    )
    double_db = sum(1 for rows in claims_by_task.values() if sum(1 for r in rows if r["outcome"] == "completed") > 1)

    # ---------------------------------------------------------- the history side
    deliveries = [e for e in events if e["kind"] == "claim"]
    first_delivery: dict[str, dict] = {}
    for e in sorted(deliveries, key=lambda e: e["t_recv"]):
        first = first_delivery.setdefault(e["token"], e)
        if (first["task"], first["fence"], first["attempt"], first["tm"]) != (
            e["task"],
            e["fence"],
            e["attempt"],
            e["tm"],
        ):
            v(f"token re-sent with a different task/fence/attempt/owner: {first} vs {e}")
    deliv_tok = collections.defaultdict(list)
    for e in deliveries:
        deliv_tok[e["token"]].append(e)
    fences = collections.Counter(e["fence"] for e in first_delivery.values())
    for fence, n in fences.items():
        if n > 1:
            v(f"fence {fence} delivered with {n} different tokens")

    ops = [e for e in events if e["kind"] in OPS]
    foreign = [e for e in events if e["kind"].startswith("foreign_")]
    by_token = collections.defaultdict(list)
    for e in ops:
        by_token[e["token"]].append(e)
    for lst in by_token.values():
        lst.sort(key=lambda e: e["t_call"])

    # Every acknowledged write is present at the end.
    missing = 0

    def lost(message: str) -> None:
        nonlocal missing
        missing += 1
        v("acknowledged write missing: " + message)

    for token, e in first_delivery.items():
        row = db_claims.get(token)
        if row is None or row["task"] != e["task"] or row["fence"] != e["fence"]:
            lost(f"delivered claim {e['task']} fence {e['fence']} not in the claims table as delivered")
    for e in ops:
        if e["outcome"] != "ok":
            continue
        row = db_claims.get(e["token"])
        if row is None:
            lost(f"{e['kind']} ok on unknown token for {e['task']}")
            continue
        if e["kind"] == "complete":
            task = db_tasks.get(e["task"])
            if task is None or task[1] != 3 or row["outcome"] != "completed":
                lost(f"complete of {e['task']} acknowledged but task state {task and task[1]}, claim {row['outcome']}")
            elif e.get("result") is not None and task[2] is not None and task[2].hex() != e["result"]:
                lost(f"complete of {e['task']}: stored result differs from the acknowledged one")
        elif e["kind"] == "fail" and row["outcome"] != "failed":
            lost(f"fail of {e['task']} acknowledged but claim outcome {row['outcome']}")
        elif e["kind"] == "release" and row["outcome"] != "released":
            lost(f"release of {e['task']} acknowledged but claim outcome {row['outcome']}")

    # Invariant 1 from the client's side, accounting for lease expiry.
    deliveries_by_task = collections.defaultdict(list)
    for e in first_delivery.values():
        deliveries_by_task[e["task"]].append(e)
    known_lease: dict[str, float] = {}
    for token in first_delivery:
        ends = [d["lease_end"] for d in deliv_tok[token]]
        ends += [o["lease_end"] for o in by_token.get(token, ()) if o["kind"] == "renew" and o["outcome"] == "ok"]
        known_lease[token] = max(ends)
    for task, lst in deliveries_by_task.items():
        lst.sort(key=lambda e: e["fence"])
        for a, b in itertools.pairwise(lst):
            a_ops = by_token.get(a["token"], [])
            ending_calls = [o["w_call"] - SLACK_MS for o in a_ops if o["kind"] in ENDING and o["outcome"] != "err"]
            # The first lease end we were told of (a lower bound of the real one).
            first_lease = min(d["lease_end"] for d in deliv_tok[a["token"]])
            bound = min(ending_calls + [first_lease])
            b_claim_ms = (
                db_claims[b["token"]]["claim_ms"] if b["token"] in db_claims else b["lease_end"] - b["lease_ms"]
            )
            if b_claim_ms < bound:
                v(
                    f"two live claims on {task}: fence {b['fence']} claimed at {b_claim_ms} while fence "
                    f"{a['fence']} was live until at least {bound:.0f}"
                    f" ({_told(a, deliv_tok[a['token']], a_ops, db_claims.get(a['token']))};"
                    f" {_told(b, deliv_tok[b['token']], by_token.get(b['token'], []), db_claims.get(b['token']))})"
                )
            for o in a_ops:
                if o["outcome"] == "ok" and o["t_call"] > b["t_recv"]:
                    v(f"{o['kind']} succeeded for {task} fence {a['fence']} after fence {b['fence']} was delivered")

    # Invariant 3: no success for a stale token.
    for token, lst in by_token.items():
        refused_at = None
        lease_known, known_at = None, None
        doubtful_renew = False
        for o in lst:
            for d in deliv_tok.get(token, ()):
                if d["t_recv"] < o["t_call"] and (lease_known is None or d["lease_end"] > lease_known):
                    lease_known, known_at = d["lease_end"], d["w_recv"]
            if o["outcome"] == "ok":
                stored = o["kind"] == "complete" and db_claims.get(token, {}).get("outcome") == "completed"
                if refused_at is not None and o["t_call"] > refused_at and not stored:
                    v(f"{o['kind']} on {o['task']} succeeded after the token was refused")
                # A restart extends live leases, a renew whose reply was lost may have too.
                restarted = any(known_at is not None and known_at - 1000 < r < o["w_call"] for r in restarts)
                if (
                    lease_known is not None
                    and not doubtful_renew
                    and not restarted
                    and not stored
                    and o["w_call"] > lease_known + SLACK_MS
                ):
                    v(f"{o['kind']} on {o['task']} succeeded at {o['w_call']:.0f} after lease end {lease_known}")
                if o["kind"] == "renew" and (lease_known is None or o["lease_end"] > lease_known):
                    lease_known, known_at = o["lease_end"], o["w_reply"]
            elif o["outcome"] == "err" and o["code"] == "FAILED_PRECONDITION":
                refused_at = o["t_reply"] if refused_at is None else refused_at
            elif o["outcome"] == "indoubt" and o["kind"] == "renew":
                doubtful_renew = True
    for o in foreign:
        if o["outcome"] == "ok":
            v(f"foreign token accepted: {o['kind']} on {o['task']} by {o['tm']}")

    # Invariant 2 from the client's side: no claim delivered before the dependency's completion call.
    complete_calls = collections.defaultdict(list)
    for o in ops:
        if o["kind"] == "complete" and o["outcome"] != "err":
            complete_calls[o["task"]].append(o["t_call"])
    for task, lst in deliveries_by_task.items():
        first = min(e["t_recv"] for e in lst)
        for dep in deps.get(task, ()):
            if complete_calls.get(dep) and min(complete_calls[dep]) > first:
                v(f"{task} delivered before any completion call of its dependency {dep}")

    # Invariant 9: a task completed once.
    completers = collections.defaultdict(set)
    for o in ops:
        if o["kind"] == "complete" and o["outcome"] == "ok":
            completers[o["task"]].add(o["token"])
    double_hist = sum(1 for tokens in completers.values() if len(tokens) > 1)
    for task, tokens in completers.items():
        if len(tokens) > 1:
            v(f"history: {task} completed with {len(tokens)} different tokens")

    figures = {
        "deliveries": len(deliveries),
        "claims": len(first_delivery),
        "ops": len(ops),
        "ops_in_doubt": sum(1 for o in ops if o["outcome"] == "indoubt"),
        "foreign_attempts": len(foreign),
        "foreign_accepted": sum(1 for o in foreign if o["outcome"] == "ok"),
        "acked_missing": missing,
        "double_completions_db": double_db,
        "double_completions_history": double_hist,
        "violations": len(violations),
    }
    return figures, violations
