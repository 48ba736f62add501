"""Lead calls, typed errors from the real daemon, paging, and launching."""

from __future__ import annotations

import os
import stat
import traceback
from pathlib import Path

import grpc
import pytest

import corral

PENDING = corral.TaskState.PENDING


@pytest.mark.timeout(30)
def test_invalid_batches_are_refused_whole_with_field_violations(lead: corral.Lead) -> None:
    cycle = [corral.TaskSpec("a", depends_on=("b",)), corral.TaskSpec("b", depends_on=("a",))]
    with pytest.raises(corral.InvalidArgument) as raised:
        lead.create_tasks(cycle)
    assert raised.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.field_violations, "a refused batch says which fields are wrong"
    with pytest.raises(corral.InvalidArgument):
        lead.create_tasks([corral.TaskSpec("ok"), corral.TaskSpec("bad", depends_on=("missing",))])
    assert list(lead.list_tasks()) == [], "nothing of a refused batch is written"


@pytest.mark.timeout(30)
def test_retried_batch_is_idempotent_and_conflicts_are_typed(lead: corral.Lead) -> None:
    specs = [corral.TaskSpec("a", title="A"), corral.TaskSpec("b", depends_on=("a",))]
    first = lead.create_tasks(specs, request_id="batch-1")
    again = lead.create_tasks(specs, request_id="batch-1")
    assert [t.id for t in again] == [t.id for t in first] == ["a", "b"]
    assert [t.seq for t in again] == [t.seq for t in first]
    with pytest.raises(corral.AlreadyExists):
        lead.create_tasks([corral.TaskSpec("a", title="something else")])


@pytest.mark.timeout(30)
def test_not_found_carries_a_reason(lead: corral.Lead) -> None:
    with pytest.raises(corral.NotFound) as raised:
        lead.get_task("nope")
    assert raised.value.reason == "TASK_NOT_FOUND"
    with pytest.raises(corral.NotFound) as raised:
        lead.remove_teammate("nobody")
    assert raised.value.reason == "TEAMMATE_NOT_FOUND"
    with pytest.raises(corral.NotFound) as raised:
        lead.decide_plan("no-such-plan", approve=True)
    assert raised.value.reason == "PLAN_NOT_FOUND"


@pytest.mark.timeout(30)
def test_credentials_are_checked(lead: corral.Lead) -> None:
    with corral.Lead.connect(lead.address, "not-a-token") as stranger, pytest.raises(corral.Unauthenticated):
        stranger.get_stats()
    new = lead.add_teammate("ann")
    with corral.Lead.connect(lead.address, new.token) as impostor:
        with pytest.raises(corral.PermissionDenied):
            impostor.create_tasks([corral.TaskSpec("x")])
        assert impostor.get_stats().active_tasks == 0, "board reads are allowed to teammates"
    with pytest.raises(corral.AlreadyExists):
        lead.add_teammate("ann")


@pytest.mark.timeout(30)
def test_list_tasks_follows_every_page_and_filters(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec(f"t{i:03d}") for i in range(250)])
    lead.cancel_tasks(["t000", "t001"])
    every = list(lead.list_tasks(page_size=100))
    assert [t.id for t in every] == [f"t{i:03d}" for i in range(250)]
    pending = list(lead.list_tasks(states=[PENDING], page_size=7))
    assert len(pending) == 248 and {t.state for t in pending} == {PENDING}
    canceled = lead.cancel_tasks(["t002"])
    assert [t.id for t in canceled] == ["t002"]
    stats = lead.get_stats()
    assert stats.count(corral.TaskState.CANCELED) == 3 and stats.active_tasks == 247


@pytest.mark.timeout(30)
def test_wait_until_done_times_out_and_returns_when_done(lead: corral.Lead) -> None:
    empty = lead.wait_until_done(timeout=5)
    assert (empty.completed, empty.failed, empty.canceled, empty.stats.active_tasks) == (0, 0, 0, 0)
    lead.create_tasks([corral.TaskSpec("waiting")])
    with pytest.raises(TimeoutError, match=r"^wait_until_done: 1 task\(s\) unfinished after 0.5s \(1 pending"):
        lead.wait_until_done(timeout=0.5)
    lead.cancel_tasks(["waiting"])
    done = lead.wait_until_done(timeout=5)
    assert done.canceled_ids == ("waiting",) and done.stats.count(corral.TaskState.CANCELED) == 1


@pytest.mark.timeout(30)
def test_wait_until_done_names_what_completed_failed_and_was_canceled(lead: corral.Lead) -> None:
    lead.create_tasks(
        [
            corral.TaskSpec("ok"),
            corral.TaskSpec("bad", max_attempts=1),
            corral.TaskSpec("after-bad", depends_on=("bad",)),
            corral.TaskSpec("also-ok"),
        ]
    )
    new = lead.add_teammate("ann")
    with corral.Teammate.connect(lead.address, new.token) as ann:
        events = ann.idle()
        for _ in range(3):
            claim = next(events)
            assert isinstance(claim, corral.Claim)
            if claim.task.id == "bad":
                claim.fail("no good", retryable=False)
            else:
                claim.complete(b"fine")
        events.close()
    done = lead.wait_until_done(timeout=10)
    assert done.completed_ids == ("ok", "also-ok") and done.failed_ids == ("bad",)
    assert done.canceled_ids == ("after-bad",) and (done.completed, done.failed, done.canceled) == (2, 1, 1)
    with pytest.raises(corral.TasksFailed, match=r"1 task\(s\) failed: bad") as raised:
        lead.wait_until_done(timeout=10, raise_on_failure=True)
    again = raised.value.summary  # a second look: the same tasks, later writer figures
    assert (again.completed_ids, again.failed_ids, again.canceled_ids) == (
        done.completed_ids,
        done.failed_ids,
        done.canceled_ids,
    )


@pytest.mark.timeout(30)
def test_teammates_are_listed_with_status(lead: corral.Lead) -> None:
    new = lead.add_teammate("ann", roles=("dev", "ops"), require_plan_approval=True)
    assert new.name == "ann" and new.token and new.token not in repr(new)
    (info,) = lead.list_teammates()
    assert (info.name, set(info.roles), info.require_plan_approval) == ("ann", {"dev", "ops"}, True)
    env = lead.teammate_env(new)
    assert env == {"CORRAL_ADDRESS": lead.address, "CORRAL_TOKEN": new.token}
    removed = lead.remove_teammate("ann")
    assert removed.status is corral.TeammateStatus.REMOVED


@pytest.mark.timeout(30)
def test_launch_reports_startup_failures(tmp_path: Path) -> None:
    with pytest.raises(corral.CorralError, match="exited") as raised:
        corral.Lead.launch(tmp_path / "state", extra_args=["--no-such-flag"])
    assert "no-such-flag" in str(raised.value), "the daemon's stderr is in the error"

    with corral.Lead.launch(tmp_path / "shared") as lead:
        assert stat.S_IMODE(os.stat(lead.state_dir).st_mode) == 0o700
        with pytest.raises(corral.CorralError, match="exited"):
            corral.Lead.launch(tmp_path / "shared")
        assert lead.get_stats().active_tasks == 0, "the first daemon is unharmed"


@pytest.mark.timeout(30)
def test_launch_without_a_state_dir_uses_and_removes_a_temporary_one() -> None:
    with corral.Lead.launch() as lead:
        state_dir = lead.state_dir
        assert state_dir is not None and state_dir.name.startswith("corral-") and state_dir.exists()
        assert lead.pid is not None
    assert not state_dir.exists()


@pytest.mark.timeout(30)
def test_tcp_listener(tmp_path: Path) -> None:
    with corral.Lead.launch(tmp_path / "state", listen="127.0.0.1:0") as lead:
        assert not lead.address.startswith("unix:")
        lead.create_tasks([corral.TaskSpec("over-tcp")])
        assert lead.get_task("over-tcp").state is PENDING


@pytest.mark.timeout(30)
def test_launch_gives_up_after_the_ready_timeout(tmp_path: Path) -> None:
    with pytest.raises(corral.CorralError, match="did not become ready"):
        corral.Lead.launch(tmp_path / "state", ready_timeout=0.001)
    # The abandoned daemon was killed, so the directory is free for a new one.
    with corral.Lead.launch(tmp_path / "state") as lead:
        assert lead.get_stats().active_tasks == 0


@pytest.mark.timeout(30)
def test_sdk_errors_are_not_chained_to_grpc_internals(lead: corral.Lead) -> None:
    lead.add_teammate("ann")
    with pytest.raises(corral.AlreadyExists) as raised:
        lead.add_teammate("ann")
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
    shown = "".join(traceback.format_exception(raised.value))
    assert "RpcError" not in shown and "direct cause" not in shown and "During handling" not in shown
    assert "teammate 'ann' exists" in shown
