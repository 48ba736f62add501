"""The Node teammate on the Session transport: handed-off claims, ops sent again after a
broken stream, and how a Session stream ends."""

from __future__ import annotations

import signal
from datetime import timedelta

import pytest
from polyglot_kit import check_worked_once, logged, node_executable, recorded_session_ops, wait_while_running

from corral import Lead, TaskSpec, TaskState, TeammateStatus
from tests.support import Daemon, wait_until

ABORTED_EXIT = 3  # teammate.js: superseded by a newer stream of its identity
REFUSED_EXIT = 2  # teammate.js: credential refused
UNAVAILABLE = 14


def status_of(lead: Lead, name: str) -> TeammateStatus:
    return next(mate.status for mate in lead.list_teammates() if mate.name == name)


def steps(count: int) -> list[TaskSpec]:
    """A chain: each step depends on the one before."""
    return [
        TaskSpec(id=f"step-{i}", title=f"step {i}", depends_on=(f"step-{i - 1}",) if i else ()) for i in range(count)
    ]


@pytest.mark.timeout(60)
def test_a_completion_hands_off_the_next_claim_with_its_op_result(tmp_path, node_teammate):
    node_executable()  # fail fast, with the fix, when Node or node_modules is missing
    chain = steps(5)
    with Lead.launch(tmp_path / "state") as lead:
        proc = node_teammate(lead, "node-alone", transport="session")
        wait_while_running(lambda: status_of(lead, "node-alone") is TeammateStatus.IDLE, 20, "node-alone", [proc])
        lead.create_tasks(chain)
        lead.wait_until_done(timeout=30)
        lead.request_shutdown("node-alone", reason="done", grace=timedelta(seconds=30))
        assert proc.wait_exit(timeout=30) == 0, proc.describe()

        # Alone on the board, the teammate is the one to take each next step: the
        # daemon claims it in the completion's transaction and sends the claim with
        # that op's result. The first claim came to a waiting stream, with no op.
        claimed = proc.events("claimed")
        completed = proc.events("completed")
        assert [ev["task"] for ev in claimed] == [spec.id for spec in chain], proc.describe()
        assert [ev["task"] for ev in completed] == [spec.id for spec in chain], proc.describe()
        assert [ev["after_op"] for ev in claimed] == [None] + [ev["op_id"] for ev in completed[:-1]], proc.describe()
        # The op result is handled before the event that came with it.
        order = [(ev["event"], ev["task"]) for ev in proc.lines if ev["event"] in ("claimed", "completed")]
        assert order == [(event, spec.id) for spec in chain for event in ("claimed", "completed")]
        assert proc.events("duplicate_claim") == [] and proc.events("op_resent") == [], proc.describe()
        for spec in chain:
            task = lead.get_task(spec.id)
            assert (task.state, task.owner, task.attempt) == (TaskState.COMPLETED, "node-alone", 1)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("action", ["error", "kill"])
def test_an_op_committed_and_never_answered_is_sent_again_with_its_op_id(tmp_path, node_teammate, action):
    node_executable()  # fail fast, with the fix, when Node or node_modules is missing
    chain = steps(3)
    # The first op is the first step's completion; it commits (handing off the
    # next step), and then its stream fails, or the daemon dies, before the
    # result is sent.
    daemon = Daemon(tmp_path / "state").start(failpoints=f"before_op_result={action}:1")
    try:
        with Lead.connect(daemon.address, daemon.read_lead_token()) as lead:
            proc = node_teammate(lead, "node-cut", transport="session")
            wait_while_running(lambda: status_of(lead, "node-cut") is TeammateStatus.IDLE, 20, "node-cut", [proc])
            lead.create_tasks(chain)
            if action == "kill":
                assert daemon.wait_exit(20) == -signal.SIGKILL, daemon.stderr_tail()
                daemon.start()
            lead.wait_until_done(timeout=30)
            wait_until(lambda: logged(proc, "completed", "step-2"), 10, "node-cut to log its last completion")
            lead.request_shutdown("node-cut", reason="done", grace=timedelta(seconds=30))
            assert proc.wait_exit(timeout=30) == 0, proc.describe()

            # On the next stream (after some refused while the daemon was down): the
            # completion again, same op id, answered from the record (not run twice);
            # the claim it handed off comes as a held claim.
            completed = proc.events("completed")
            assert [ev["task"] for ev in completed] == [spec.id for spec in chain], proc.describe()
            resent = {(ev["op_id"], ev["kind"]) for ev in proc.events("op_resent")}
            assert resent == {(completed[0]["op_id"], "complete")}, proc.describe()
            assert [ev["task"] for ev in proc.events("claimed")] == [spec.id for spec in chain], proc.describe()
            assert proc.events("duplicate_claim") == [], proc.describe()
            tasks = check_worked_once(lead, chain, [("node-cut", ev["task"]) for ev in completed])
            assert [tasks[spec.id].attempt for spec in chain] == [1, 1, 1]
            # Its ops were the three completions and the shutdown request's ack: the
            # resent one left no record of its own.
            sent = {ev["op_id"] for ev in completed + proc.events("acked")}
            assert len(sent) == 4 and recorded_session_ops(tmp_path / "state") == {"node-cut": sent}
    finally:
        daemon.stop()


@pytest.mark.timeout(90)
def test_a_session_moves_to_the_next_daemon_after_a_drain(tmp_path, node_teammate):
    node_executable()  # fail fast, with the fix, when Node or node_modules is missing
    daemon = Daemon(tmp_path / "state").start()
    try:
        with Lead.connect(daemon.address, daemon.read_lead_token()) as lead:
            lead.create_tasks([TaskSpec(id="long", title="outlives its daemon", lease_duration=timedelta(seconds=10))])
            proc = node_teammate(lead, "node-moving", transport="session", work_ms=2500)
            wait_while_running(lambda: logged(proc, "claimed", "long"), 20, "node-moving to claim", [proc])

            # SIGTERM: the daemon drains (its streams end UNAVAILABLE) and exits; the
            # next one on the same state directory takes over while the work goes on.
            code, _took = daemon.terminate()
            assert code == 0, daemon.stderr_tail()
            daemon.start()
            wait_while_running(lambda: logged(proc, "completed", "long"), 30, "node-moving to complete", [proc])
            lead.request_shutdown("node-moving", reason="done", grace=timedelta(seconds=30))
            assert proc.wait_exit(timeout=30) == 0, proc.describe()

            assert proc.events("stream_end")[0]["code"] == UNAVAILABLE, proc.describe()
            # The new stream re-sent the claim it holds: the same token, deduped.
            assert [ev["task"] for ev in proc.events("duplicate_claim")] == ["long"], proc.describe()
            assert proc.events("dropped") == [], proc.describe()
            task = lead.get_task("long")
            assert (task.state, task.owner, task.attempt) == (TaskState.COMPLETED, "node-moving", 1)
    finally:
        daemon.stop()


@pytest.mark.timeout(60)
def test_a_session_is_superseded_then_revoked(tmp_path, node_procs):
    node_executable()  # fail fast, with the fix, when Node or node_modules is missing
    with Lead.launch(tmp_path / "state") as lead:
        env = {
            **lead.teammate_env(lead.add_teammate("twice")),
            "CORRAL_NAME": "twice",
            "CORRAL_TRANSPORT": "session",
            "CORRAL_MAX_IDLE_POLLS": "600",
            "CORRAL_POLL_INTERVAL_MS": "200",
            "CORRAL_WORK_MS": "1500",
        }
        first = node_procs("teammate.js", "first", **env)
        wait_while_running(lambda: status_of(lead, "twice") is TeammateStatus.IDLE, 20, "the first stream", [first])

        # A second Session of the same identity replaces the first: ABORTED, and the
        # first does not fight it by reconnecting.
        second = node_procs("teammate.js", "second", **env)
        assert first.wait_exit(timeout=20) == ABORTED_EXIT, first.describe()
        assert [ev["reason"] for ev in first.events("exit")] == ["superseded"]
        assert len(first.events("stream_open")) == 1, first.describe()

        # It works on the second stream.
        lead.create_tasks([TaskSpec(id="job", title="for the second stream")])
        lead.wait_until_done(timeout=20)
        assert lead.get_task("job").owner == "twice"
        assert [ev["task"] for ev in second.events("claimed")] == ["job"], second.describe()

        # Removal revokes the credential, here while it works on a task: the stream
        # ends UNAUTHENTICATED, the task goes back to the board, and the teammate
        # exits once its work stops, with nothing left waiting for an answer.
        lead.create_tasks([TaskSpec(id="cut-short", title="held at the removal")])
        wait_while_running(lambda: logged(second, "claimed", "cut-short"), 20, "the second to claim", [second])
        lead.remove_teammate("twice")
        assert second.wait_exit(timeout=15) == REFUSED_EXIT, second.describe()
        assert [ev["reason"] for ev in second.events("exit")] == ["credential_refused"]
        assert not logged(second, "completed", "cut-short")
        assert lead.get_task("cut-short").state == TaskState.PENDING


@pytest.mark.timeout(60)
def test_a_session_ends_after_its_idle_budget(tmp_path, node_teammate):
    node_executable()  # fail fast, with the fix, when Node or node_modules is missing
    with Lead.launch(tmp_path / "state") as lead:
        proc = node_teammate(
            lead, "node-idle", transport="session", CORRAL_MAX_IDLE_POLLS="3", CORRAL_POLL_INTERVAL_MS="100"
        )
        assert proc.wait_exit(timeout=20) == 0, proc.describe()
        assert [ev["idle_polls"] for ev in proc.events("idle_timeout")] == [3], proc.describe()
        assert [ev["reason"] for ev in proc.events("exit")] == ["idle_timeout"]
