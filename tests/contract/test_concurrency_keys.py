"""Concurrency keys through the wire: SetConcurrencyLimit / ListConcurrencyLimits,
a task's concurrency_key on Idle, unary calls and the Session's handoff, what is
refused, and a restart."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import code_pb2

from corral.v1 import corral_pb2 as pb

from .wire import assert_status, rpc_error, spec

pytestmark = pytest.mark.timeout(60)

POLL_NEVER = 300.0  # seconds: a claim that comes within a test's wait came from a wake-up, not a poll


def _set(daemon, key: str, limit: int) -> pb.ConcurrencyLimit:
    return daemon.lead.lead.SetConcurrencyLimit(pb.SetConcurrencyLimitRequest(key=key, limit=limit)).limit


def _limits(daemon) -> list[tuple[str, int, int]]:
    listed = daemon.lead.lead.ListConcurrencyLimits(pb.ListConcurrencyLimitsRequest()).limits
    return [(limit.key, limit.limit, limit.in_progress) for limit in listed]


def _snapshot(daemon):
    return [t.SerializeToString() for t in daemon.all_tasks()], _limits(daemon), dict(daemon.stats().tasks_by_state)


BAD_LIMITS = {
    "key_empty": ("", 1, "key"),
    "key_201_characters": ("k" * 201, 1, "key"),
    "key_with_whitespace": ("two words", 1, "key"),
    "limit_negative": ("openai", -1, "limit"),
    "limit_10001": ("openai", 10_001, "limit"),
}


@pytest.mark.parametrize("case", list(BAD_LIMITS))
def test_a_bad_limit_is_invalid_argument_naming_the_field_and_writes_nothing(daemon, case):
    key, limit, field = BAD_LIMITS[case]
    _set(daemon, "kept", 3)
    before = _snapshot(daemon)
    error = rpc_error(_set, daemon, key, limit)
    assert_status(error, grpc.StatusCode.INVALID_ARGUMENT, field=field)
    assert _snapshot(daemon) == before


def test_a_key_over_200_characters_refuses_the_batch(daemon):
    before = _snapshot(daemon)
    error = rpc_error(daemon.create_tasks, spec("fine"), spec("long", concurrency_key="k" * 201))
    assert_status(error, grpc.StatusCode.INVALID_ARGUMENT, field="tasks[1].concurrency_key")
    assert _snapshot(daemon) == before
    assert daemon.create_tasks(spec("edge", concurrency_key="k" * 200))[0].id == "edge"


def test_a_teammate_may_not_set_or_list_limits(daemon):
    mate = daemon.add_teammate("ada")
    before = _snapshot(daemon)
    error = rpc_error(mate.lead.SetConcurrencyLimit, pb.SetConcurrencyLimitRequest(key="openai", limit=1))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error.details()
    error = rpc_error(mate.lead.ListConcurrencyLimits, pb.ListConcurrencyLimitsRequest())
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error.details()
    assert _snapshot(daemon) == before


def test_set_list_and_remove(daemon):
    assert _limits(daemon) == []
    stored = _set(daemon, "openai", 4)
    assert (stored.key, stored.limit, stored.in_progress) == ("openai", 4, 0)
    _set(daemon, "repo:web", 1)
    assert _limits(daemon) == [("openai", 4, 0), ("repo:web", 1, 0)]
    removed = _set(daemon, "openai", 0)
    assert (removed.key, removed.limit) == ("openai", 0)
    assert _limits(daemon) == [("repo:web", 1, 0)]


def test_get_and_list_tasks_show_the_key(daemon):
    daemon.create_tasks(spec("keyed", concurrency_key="repo:web"), spec("plain"))
    assert daemon.get_task("keyed").concurrency_key == "repo:web"
    assert {t.id: t.concurrency_key for t in daemon.all_tasks()} == {"keyed": "repo:web", "plain": ""}


def test_an_idle_stream_skips_a_full_key_and_is_woken_when_its_slot_frees(daemon):
    _set(daemon, "repo:web", 1)
    daemon.create_tasks(
        spec("w0", concurrency_key="repo:web", priority=5),
        spec("w1", concurrency_key="repo:web", priority=5),
        spec("plain"),
    )
    ada, bob = daemon.add_teammate("ada"), daemon.add_teammate("bob")
    ada_stream = ada.idle()
    held = ada_stream.next_event("claim")
    assert held.task.id == "w0" and held.task.concurrency_key == "repo:web"
    bob_stream = bob.idle(slots=2, poll_interval=POLL_NEVER)
    assert bob_stream.next_event("claim").task.id == "plain", "the full key is passed over"
    assert _limits(daemon) == [("repo:web", 1, 1)]
    woken = bob_stream.expect_quiet(0.3, then=lambda: ada.complete(held), arrives="claim", within=10)
    assert woken.task.id == "w1"
    assert _limits(daemon) == [("repo:web", 1, 1)]
    ada_stream.cancel()
    bob_stream.cancel()


def test_a_session_handoff_takes_the_slot_its_completion_freed(daemon):
    _set(daemon, "openai", 1)
    daemon.create_tasks(*(spec(f"ai{i}", concurrency_key="openai") for i in range(3)))
    ada = daemon.add_teammate("ada")
    session = ada.session(slots=2)
    first = session.next_event("claim")
    # A second slot, but the key is full: the completion's response is the next item.
    response = session.expect_quiet(0.3, then=lambda: session.complete(first))
    for expected in ("ai1", "ai2"):
        assert response.op_result.status.code == code_pb2.OK
        assert response.WhichOneof("event") == "claim", "the freed slot goes to the completer in the same response"
        first = response.claim
        assert first.task.id == expected
        assert _limits(daemon) == [("openai", 1, 1)]
        response = session.complete(first)
    assert response.WhichOneof("event") is None
    assert _limits(daemon) == [("openai", 1, 0)]
    session.cancel()


def test_a_session_waiter_is_served_the_freed_slot_first(daemon):
    _set(daemon, "openai", 1)
    daemon.create_tasks(spec("ai0", concurrency_key="openai"), spec("ai1", concurrency_key="openai"))
    ada, bob = daemon.add_teammate("ada"), daemon.add_teammate("bob")
    ada_session = ada.session()
    held = ada_session.next_event("claim")
    bob_session = bob.session()
    daemon.wait_open_streams(2)
    assert bob_session.expect_quiet(0.3, then=lambda: daemon.get_task("ai1")).state == pb.TASK_STATE_PENDING
    response = ada_session.complete(held)
    assert response.WhichOneof("event") is None, "the waiter was served before the completer"
    assert bob_session.next_event("claim", timeout=10).task.id == "ai1"
    assert _limits(daemon) == [("openai", 1, 1)]
    ada_session.cancel()
    bob_session.cancel()


def test_limits_and_counts_survive_a_restart(corrald):
    before = corrald()
    ada = before.add_teammate("ada")
    _set(before, "repo:web", 1)
    before.create_tasks(spec("w0", concurrency_key="repo:web", lease=30), spec("w1", concurrency_key="repo:web"))
    stream = ada.idle()
    held = stream.next_event("claim")
    stream.cancel()
    before.stop_and_check()

    after = corrald(before.state_dir)
    assert _limits(after) == [("repo:web", 1, 1)]
    bob = after.add_teammate("bob")
    bob_stream = bob.idle(poll_interval=POLL_NEVER)
    ada_after = after.client(ada.token, "ada")
    assert (
        bob_stream.expect_quiet(0.5, then=lambda: ada_after.complete(held), arrives="claim", within=10).task.id == "w1"
    )
    bob_stream.cancel()
