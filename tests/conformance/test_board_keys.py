"""Concurrency keys on a real board with a fake clock: at most a key's limit of its
tasks IN_PROGRESS at once, whatever ends a claim (issue: concurrency keys)."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from corrald import errors, validate
from corrald.config import Limits
from corrald.model import Completion, ConcurrencyLimit, TaskState
from corrald.store import keys, tasks
from corrald.stream import StreamState
from tests.support.boardkit import spec

pytestmark = pytest.mark.timeout(30)

LEASE = 10_000


@pytest.fixture
def team(board):
    for name in ("w1", "w2", "w3", "w4"):
        board.add(name)
    return board


def _keyed(prefix: str, count: int, key: str, **kwargs):
    return [spec(f"{prefix}{i}", concurrency_key=key, lease_ms=LEASE, **kwargs) for i in range(count)]


def _in_progress(team, key: str) -> int:
    return team.scalar("SELECT in_progress FROM concurrency_keys WHERE key = ?", (key,))


def _limits(team) -> list[ConcurrencyLimit]:
    return team.run(team.board.concurrency_limits())


def _freeing(team, end) -> dict[str, int]:
    """Runs `end(tx)` in one writer job; returns the roles it woke for ready tasks."""

    def job(tx):
        end(tx)
        return dict(tx.wakes.ready_roles)

    return team.call(job)


def test_the_limit_holds_across_claims_and_a_claim_takes_the_next_task_it_may(team):
    team.set_limit("openai", 2)
    team.create(*_keyed("ai", 3, "openai"), spec("plain", priority=-1))
    first, second = team.claim("w1"), team.claim("w2")
    assert {first.task.id, second.task.id} == {"ai0", "ai1"}
    assert first.task.concurrency_key == "openai"
    third = team.claim("w3")
    assert third is not None and third.task.id == "plain", "the full key is passed over, not waited on"
    assert team.claim("w4") is None
    assert _limits(team) == [ConcurrencyLimit("openai", 2, 2)]
    assert team.task("ai2").state is TaskState.PENDING


def test_no_key_and_a_key_without_a_limit_have_no_limit(team):
    team.set_limit("openai", 1)
    team.create(*_keyed("free", 3, "unlimited"), *(spec(f"p{i}") for i in range(2)))
    claimed = {team.claim(name).task.id for name in ("w1", "w2", "w3", "w4")}
    assert claimed == {"free0", "free1", "free2", "p0"}
    assert team.rows("SELECT key FROM concurrency_keys") == [("openai",)]  # nothing counted for the others


@pytest.mark.sqlite_only  # counts statements through SQLite's trace callback
def test_a_plain_claim_and_completion_ask_nothing_of_the_keys(team):
    team.set_limit("openai", 1)
    team.create(spec("plain"))
    statements: list[str] = []

    def traced(tx):
        tx.conn.set_trace_callback(statements.append)
        try:
            grant = tasks.claim_next(tx, "w1", ())
            tasks.complete(tx, Completion("w1", "plain", grant.token, b"ok"))
        finally:
            tx.conn.set_trace_callback(None)

    team.call(traced)
    assert not [sql for sql in statements if "UPDATE concurrency_keys" in sql], statements


@pytest.mark.parametrize("how", ["complete", "fail", "final_fail", "release", "expire", "cancel", "remove"])
def test_a_freed_slot_lets_the_next_task_of_the_key_be_claimed_and_wakes_its_takers(team, clock, how):
    team.set_limit("repo:web", 1)
    team.create(*_keyed("w", 2, "repo:web", max_attempts=1 if how == "final_fail" else 3, required_role=""))
    held = team.claim("w1")
    assert team.claim("w2") is None
    token, task_id = held.token, held.task.id
    ends = {
        "complete": lambda tx: tasks.complete(tx, Completion("w1", task_id, token, b"ok")),
        "fail": lambda tx: tasks.fail(tx, "w1", task_id, token, "flaky", True),
        "final_fail": lambda tx: tasks.fail(tx, "w1", task_id, token, "broken", False),
        "release": lambda tx: tasks.release(tx, "w1", task_id, token),
        "cancel": lambda tx: tasks.cancel(tx, [task_id]),
    }
    if how == "expire":
        clock.advance(LEASE)
        woke = _freeing(team, tasks.reclaim_expired)
    elif how == "remove":
        team.run(team.board.remove_teammate("w1"))
        woke = None
    else:
        woke = _freeing(team, ends[how])
    if woke is not None:
        assert woke.get("", 0) >= 1, "a parked stream of the task's role is woken for the freed slot"
    assert _in_progress(team, "repo:web") == 0
    nxt = team.claim("w2")
    assert nxt is not None and nxt.task.concurrency_key == "repo:web"
    assert _in_progress(team, "repo:web") == 1


def test_a_freed_slot_of_a_key_still_over_its_limit_wakes_nobody(team):
    team.create(*_keyed("k", 3, "k"))
    grants = [team.claim(name) for name in ("w1", "w2")]
    team.set_limit("k", 1)  # lowered below what is IN_PROGRESS
    assert team.claim("w3") is None
    woke = _freeing(team, lambda tx: tasks.complete(tx, Completion("w1", grants[0].task.id, grants[0].token, b"")))
    assert woke == {}
    assert team.claim("w3") is None, "still at its limit"
    team.complete("w2", grants[1].task.id, grants[1].token)
    assert team.claim("w3").task.id == "k2"


def test_raising_or_removing_a_limit_lets_claims_resume_at_once(team):
    team.set_limit("k", 1)
    team.create(*_keyed("k", 4, "k"))
    team.claim("w1")
    assert team.claim("w2") is None
    raised = team.set_limit("k", 2)
    assert raised == ConcurrencyLimit("k", 2, 1)
    assert team.claim("w2") is not None
    assert team.claim("w3") is None
    assert team.set_limit("k", 0) == ConcurrencyLimit("k", 0, 2)
    assert _limits(team) == []
    assert team.claim("w3") is not None and team.claim("w4") is not None


def test_a_limit_set_on_a_key_already_at_work_counts_its_live_claims(team):
    team.create(*_keyed("k", 3, "k"))
    team.claim("w1")
    team.claim("w2")
    assert team.set_limit("k", 2) == ConcurrencyLimit("k", 2, 2)
    assert team.claim("w3") is None


def test_a_restart_recounts_from_the_tasks(team, clock):
    team.set_limit("k", 2)
    team.create(*_keyed("k", 4, "k"))
    kept = team.claim("w1")
    team.claim("w2")
    team.rows("UPDATE concurrency_keys SET in_progress = 7")  # a count gone wrong
    team.restart()
    assert _limits(team) == [ConcurrencyLimit("k", 2, 2)]
    assert team.claim("w3") is None
    team.complete("w1", kept.task.id, kept.token)
    assert team.claim("w3") is not None


def test_a_restart_that_expires_a_lease_frees_its_slot(team, clock):
    team.set_limit("k", 1)
    team.create(*_keyed("k", 2, "k"))
    team.claim("w1")
    clock.advance(LEASE)
    team.reap()  # reaped while the daemon was up: the slot frees
    assert _in_progress(team, "k") == 0
    team.restart()
    assert team.claim("w2") is not None
    assert _in_progress(team, "k") == 1


def test_a_stream_facing_a_full_key_writes_nothing(team):
    team.set_limit("k", 1)
    team.create(*_keyed("k", 2, "k"))
    team.claim("w1")
    cursor = StreamState("w2", ())
    before = team.snapshot()
    assert team.next_for("w2", cursor, look_first=True) == []
    assert team.next_for("w2", cursor) == []
    assert team.snapshot() == before


def test_the_key_is_part_of_the_spec(team):
    team.create(spec("t", concurrency_key="k"))
    assert team.task("t").concurrency_key == "k"
    assert team.create(spec("t", concurrency_key="k"))[0].concurrency_key == "k"  # the same spec again
    with pytest.raises(errors.AlreadyExists):
        team.create(spec("t", concurrency_key="other"))
    with pytest.raises(errors.AlreadyExists):
        team.create(spec("t"))


def test_bad_keys_and_limits_are_refused_before_anything_is_written(team):
    before = team.snapshot()
    for key, limit, field in [
        ("", 1, "key"),
        ("k" * 201, 1, "key"),
        ("a b", 1, "key"),
        ("k", -1, "limit"),
        ("k", 10_001, "limit"),
    ]:
        with pytest.raises(errors.InvalidArgument) as refused:
            team.set_limit(key, limit)
        assert refused.value.field == field
    with pytest.raises(errors.InvalidArgument) as refused:
        team.create(spec("t", concurrency_key="k" * 201))
    assert refused.value.field == "tasks[0].concurrency_key"
    assert team.snapshot() == before
    assert team.set_limit("k" * 200, 10_000).limit == 10_000


@pytest.mark.sqlite_only  # reads SQLite's query plan
def test_the_claim_query_stays_on_its_index_with_keys_present(team):
    for index in range(50):
        team.set_limit(f"key{index}", 1)
    team.create(*(spec(f"t{i}", concurrency_key=f"key{i % 50}") for i in range(200)), spec("plain"))
    roles = ["", "x"]
    plan = team.rows(
        "EXPLAIN QUERY PLAN SELECT seq FROM tasks WHERE state = 1 AND unmet_deps = 0 AND required_role IN (?, ?)"
        f"{keys.FULL_KEYS} ORDER BY priority DESC, seq LIMIT 1",
        roles,
    )
    details = " / ".join(str(row[3]) for row in plan)
    assert "USING INDEX tasks_ready" in details, details
    assert "SEARCH k USING PRIMARY KEY" in details, details
    assert "TEMP B-TREE" not in details, details


def test_a_spec_without_a_key_keeps_the_digest_it_had_before_keys():
    raw = validate.normalize_spec(0, spec("old", "dep", priority=2, retry_backoff_ms=None), Limits(), 0)
    before_keys = ["old", "old", "", "", ["dep"], 2, raw.max_attempts, raw.lease_ms, ""]
    expected = hashlib.sha256(json.dumps(before_keys, separators=(",", ":")).encode()).digest()
    assert validate.spec_digest(raw) == expected
    keyed = dataclasses.replace(raw, concurrency_key="k")
    assert validate.spec_digest(keyed) != expected
