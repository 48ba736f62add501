"""The history checker itself: a clean synthetic history passes, each injected anomaly is caught.

The database is made with the daemon's own schema (`corrald.store.sqlite.storage.open_writer`) and filled
by hand, so these run in milliseconds.
"""

from __future__ import annotations

import copy

import pytest

from corrald.store.sqlite.storage import open_writer

from .rel_harness import open_db_ro
from .rel_history import check

LEASE = 2000


def _insert(conn, table: str, **values) -> None:
    """INSERT with zero/empty values for any other NOT NULL column without a default (schema drift)."""
    for _, name, kind, notnull, default, pk in conn.execute(f"PRAGMA table_info({table})").fetchall():
        if notnull and default is None and not pk and name not in values:
            values[name] = b"" if "BLOB" in kind.upper() else "" if "TEXT" in kind.upper() else 0
    columns = ", ".join(values)
    conn.execute(f"INSERT INTO {table} ({columns}) VALUES ({', '.join('?' * len(values))})", tuple(values.values()))


def _board(path, *, b_claim_ms=1600, extra_claim=None, a_outcome="completed"):
    conn = open_writer(path, synchronous="OFF")
    for seq, task_id, finish in ((1, "A", 1500), (2, "B", 2000)):
        _insert(
            conn,
            "tasks",
            seq=seq,
            id=task_id,
            max_attempts=3,
            lease_ms=LEASE,
            spec_digest=b"\0",
            state=3,
            finish_ms=finish,
            result=f"{task_id}-result".encode(),
        )
    _insert(conn, "deps", task_seq=2, dep_seq=1)
    rows = [(1, "tA", 1, "x", 1000, 1500, a_outcome), (2, "tB", 2, "y", b_claim_ms, 2000, "completed")]
    if extra_claim:
        rows.append(extra_claim)
    for fence, token, task_seq, teammate, claim_ms, end_ms, outcome in rows:
        _insert(
            conn,
            "claims",
            fence=fence,
            token=token,
            task_seq=task_seq,
            teammate=teammate,
            attempt=1,
            claim_ms=claim_ms,
            end_ms=end_ms,
            outcome=outcome,
        )
    conn.close()


def _history():
    def claim(task, token, fence, tm, t):
        return {
            "kind": "claim",
            "tm": tm,
            "task": task,
            "token": token,
            "fence": fence,
            "attempt": 1,
            "lease_end": t + LEASE,
            "lease_ms": LEASE,
            "t_recv": t / 1000,
            "w_recv": t,
            "stream": 1,
        }

    def op(kind, task, token, tm, t, **extra):
        return {
            "kind": kind,
            "tm": tm,
            "task": task,
            "token": token,
            "t_call": t / 1000,
            "w_call": t,
            "t_reply": (t + 5) / 1000,
            "w_reply": t + 5,
            "outcome": "ok",
            "code": "OK",
            "reason": "",
            **extra,
        }

    return [
        claim("A", "tA", 1, "x", 1000),
        op("renew", "A", "tA", "x", 1200, lease_end=3200),
        op("complete", "A", "tA", "x", 1495, result=b"A-result".hex()),
        claim("B", "tB", 2, "y", 1600),
        op("complete", "B", "tB", "y", 1995, result=b"B-result".hex()),
    ]


def _violations(tmp_path, events, **board) -> list[str]:
    path = tmp_path / "board.sqlite3"
    _board(path, **board)
    with open_db_ro(path) as conn:
        return check(events, conn)[1]


@pytest.mark.timeout(30)
def test_clean_history_passes(tmp_path, figures):
    violations = _violations(tmp_path, _history())
    figures(violations=len(violations))
    assert violations == []


ANOMALIES = {
    "claim before its dependency completed": ({"b_claim_ms": 1400}, None, "before dependency"),
    "two live claims in the database": (
        {"extra_claim": (3, "tZ", 1, "z", 1200, 1300, "expired")},
        None,
        "before claim",
    ),
    "a claim delivered while another of its task was live": (
        {},
        lambda h: h.insert(1, {**h[0], "tm": "z", "token": "tZ", "fence": 3, "t_recv": 1.1, "w_recv": 1100}),
        "two live claims on A: fence 3 claimed at 1000 while fence 1 was live until at least 1492"
        " (fence 1: delivered to x stream 1 at 1000",
    ),
    "foreign token accepted": (
        {},
        lambda h: h.append({**h[1], "kind": "foreign_renew", "tm": "y"}),
        "foreign token accepted",
    ),
    "acknowledged completion missing": ({"a_outcome": "released"}, None, "acknowledged write missing"),
    "success after the lease ended": (
        {},
        lambda h: h.insert(2, {**h[1], "t_call": 4.0, "w_call": 4000, "t_reply": 4.005, "w_reply": 4005}),
        "after lease end",
    ),
    "success after a refusal": (
        {},
        lambda h: h.insert(
            1,
            {
                **h[1],
                "outcome": "err",
                "code": "FAILED_PRECONDITION",
                "reason": "CLAIM_TOKEN_MISMATCH",
                "t_call": 1.1,
                "t_reply": 1.105,
            },
        ),
        "after the token was refused",
    ),
    "delivered claim not durable": (
        {},
        lambda h: h.append({**h[0], "token": "tGhost", "fence": 9}),
        "not in the claims table",
    ),
    "completed twice": (
        {},
        lambda h: h.append({**h[2], "token": "tA2", "t_call": 1.7, "t_reply": 1.705}),
        "completed with 2 different tokens",
    ),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("anomaly", list(ANOMALIES))
def test_injected_anomaly_is_caught(tmp_path, anomaly, figures):
    board, mutate, expected = ANOMALIES[anomaly]
    events = copy.deepcopy(_history())
    if mutate:
        mutate(events)
    violations = _violations(tmp_path, events, **board)
    figures(anomaly=anomaly, violations_reported=len(violations))
    assert any(expected in v for v in violations), violations
