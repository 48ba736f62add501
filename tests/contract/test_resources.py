"""Path leases through the wire: TaskSpec.resources / shared_resources on Idle and the
Session (a claim passes over a conflicting task and takes the next; freeing wakes the
waiter), Task.waiting_for.resources, Watch, GetStats, and what is refused."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import code_pb2

from corral.v1 import corral_pb2 as pb

from .wire import assert_status, rpc_error, spec

pytestmark = pytest.mark.timeout(60)

POLL_NEVER = 300.0  # seconds: a claim that comes within a test's wait came from a wake-up, not a poll


def _held(daemon) -> list[tuple[str, str, str, bool]]:
    stats = daemon.stats()
    assert stats.held_resources_total == len(stats.held_resources)
    return [(h.resource, h.task_id, h.teammate, h.exclusive) for h in stats.held_resources]


def _snapshot(daemon):
    return [t.SerializeToString() for t in daemon.all_tasks()], dict(daemon.stats().tasks_by_state), _held(daemon)


def test_get_and_list_tasks_echo_the_resources(daemon):
    daemon.create_tasks(spec("a", resources=["repo:web/src"], shared_resources=["db:staging"]), spec("plain"))
    task = daemon.get_task("a")
    assert (list(task.resources), list(task.shared_resources)) == (["repo:web/src"], ["db:staging"])
    assert {t.id: list(t.resources) for t in daemon.all_tasks()} == {"a": ["repo:web/src"], "plain": []}


def test_an_idle_stream_passes_over_a_conflicting_task_and_is_woken_when_it_frees(daemon):
    daemon.create_tasks(
        spec("merge", resources=["repo:web"], priority=5),
        spec("api", shared_resources=["repo:web/src/api"], priority=5),
        spec("other", resources=["repo:api"]),
    )
    ada, bob = daemon.add_teammate("ada"), daemon.add_teammate("bob")
    ada_stream = ada.idle()
    held = ada_stream.next_event("claim")
    assert held.task.id == "merge" and list(held.task.resources) == ["repo:web"]
    bob_stream = bob.idle(slots=2, poll_interval=POLL_NEVER)
    assert bob_stream.next_event("claim").task.id == "other", "the conflicting task is passed over"
    assert _held(daemon) == [("repo:api", "other", "bob", True), ("repo:web", "merge", "ada", True)]
    waiting = daemon.get_task("api").waiting_for
    assert [(w.resource, w.held_by_task_id, w.held_resource, w.held_exclusive) for w in waiting.resources] == [
        ("repo:web/src/api", "merge", "repo:web", True)
    ]
    woken = bob_stream.expect_quiet(0.3, then=lambda: ada.complete(held), arrives="claim", within=10)
    assert woken.task.id == "api" and list(woken.task.shared_resources) == ["repo:web/src/api"]
    assert daemon.get_task("api").waiting_for.resources == []
    ada_stream.cancel()
    bob_stream.cancel()


def test_a_session_waiter_is_handed_the_freed_resource_by_the_completion(daemon):
    daemon.create_tasks(spec("holder", resources=["repo:web"], priority=1), spec("waiter", resources=["repo:web/x"]))
    ada, bob = daemon.add_teammate("ada"), daemon.add_teammate("bob")
    ada_session = ada.session()
    held = ada_session.next_event("claim")
    assert held.task.id == "holder"
    bob_session = bob.session()
    daemon.wait_open_streams(2)
    assert bob_session.expect_quiet(0.3, then=lambda: daemon.get_task("waiter")).state == pb.TASK_STATE_PENDING
    response = ada_session.complete(held)
    assert response.op_result.status.code == code_pb2.OK
    assert response.WhichOneof("event") is None, "the waiter was served before the completer"
    assert bob_session.next_event("claim", timeout=10).task.id == "waiter"
    assert _held(daemon) == [("repo:web/x", "waiter", "bob", True)]
    ada_session.cancel()
    bob_session.cancel()


def test_watch_events_carry_the_tasks_resources(daemon):
    watch = daemon.watch(0)
    daemon.create_tasks(spec("a", resources=["repo:web"], shared_resources=["db:x"]))
    ada = daemon.add_teammate("ada")
    stream = ada.idle()
    claim = stream.next_event("claim")
    ada.complete(claim)
    states = []
    while len(states) < 3:
        event = watch.next_matching(lambda e: e.WhichOneof("event") == "task_changed", what="a task event")
        task = event.task_changed
        assert (list(task.resources), list(task.shared_resources)) == (["repo:web"], ["db:x"]), task.state
        states.append(task.state)
    assert states == [pb.TASK_STATE_PENDING, pb.TASK_STATE_IN_PROGRESS, pb.TASK_STATE_COMPLETED]
    stream.cancel()
    watch.cancel()


BAD = {
    "seventeen_exclusive": ({"resources": [f"r{i}" for i in range(17)]}, "tasks[1].resources"),
    "seventeen_shared": ({"shared_resources": [f"r{i}" for i in range(17)]}, "tasks[1].shared_resources"),
    "201_characters": ({"resources": ["r" * 201]}, "tasks[1].resources[0]"),
    "empty_segment": ({"resources": ["ok", "a//b"]}, "tasks[1].resources[1]"),
    "leading_slash": ({"shared_resources": ["/a"]}, "tasks[1].shared_resources[0]"),
    "trailing_slash": ({"resources": ["a/"]}, "tasks[1].resources[0]"),
    "dot_dot": ({"resources": ["repo:web/../x"]}, "tasks[1].resources[0]"),
    "dot": ({"resources": ["repo:web/./x"]}, "tasks[1].resources[0]"),
    "whitespace": ({"resources": ["a b"]}, "tasks[1].resources[0]"),
    "control": ({"resources": ["a\x01"]}, "tasks[1].resources[0]"),
    "both_kinds": ({"resources": ["x"], "shared_resources": ["x"]}, "tasks[1].shared_resources[0]"),
    "overlapping": ({"resources": ["repo:web", "repo:web/src"]}, "tasks[1].resources[1]"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_resources_are_invalid_argument_naming_the_field_and_nothing_is_written(daemon, case):
    fields, field = BAD[case]
    daemon.create_tasks(spec("kept", resources=["repo:kept"]))
    before = _snapshot(daemon)
    error = rpc_error(daemon.create_tasks, spec("fine"), spec("bad", **fields))
    assert_status(error, grpc.StatusCode.INVALID_ARGUMENT, field=field)
    assert _snapshot(daemon) == before


def test_a_proposal_is_checked_the_same_way(daemon):
    daemon.create_tasks(spec("work"))
    ada = daemon.add_teammate("ada")
    stream = ada.idle()
    claim = stream.next_event("claim")
    before = _snapshot(daemon)
    request = pb.ProposeTasksRequest(
        tasks=[spec("found", resources=["a//b"])], task_id="work", claim_token=claim.claim_token
    )
    error = rpc_error(ada.teammate.ProposeTasks, request)
    assert_status(error, grpc.StatusCode.INVALID_ARGUMENT, field="tasks[0].resources[0]")
    assert _snapshot(daemon) == before
    stream.cancel()


def test_held_resources_survive_a_restart(corrald):
    before = corrald()
    ada = before.add_teammate("ada")
    before.create_tasks(spec("holder", resources=["repo:web"], lease=30), spec("waiter", shared_resources=["repo:web"]))
    stream = ada.idle()
    held = stream.next_event("claim")
    stream.cancel()
    before.stop_and_check()

    after = corrald(before.state_dir)
    assert _held(after) == [("repo:web", "holder", "ada", True)]
    bob = after.add_teammate("bob")
    bob_stream = bob.idle(poll_interval=POLL_NEVER)
    ada_after = after.client(ada.token, "ada")
    woken = bob_stream.expect_quiet(0.5, then=lambda: ada_after.complete(held), arrives="claim", within=10)
    assert woken.task.id == "waiter"
    bob_stream.cancel()
