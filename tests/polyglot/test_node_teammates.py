"""Polyglot proof: Node.js teammates, speaking only corral.v1, next to Python ones.

The Node programs live in tests/polyglot/node/ and load proto/corral/v1/corral.proto
at run time (no generated code): if they can do the job, any language can. The
Node teammate speaks either transport: an Idle stream with unary calls (the
default) or one Session stream (CORRAL_TRANSPORT=session).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from datetime import timedelta

import grpc
import pytest
from polyglot_kit import (
    check_worked_once,
    layered_dag,
    logged,
    node_executable,
    node_result,
    recorded_session_ops,
    wait_while_running,
)

from corral import ExitReason, Lead, RunSummary, TaskSpec, TaskState, TeammateStatus, run_teammate
from corral.v1 import corral_pb2, corral_pb2_grpc
from tests.support import wait_until

# gRPC status codes as numbers, the way the Node programs report them.
OK = grpc.StatusCode.OK.value[0]
INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT.value[0]
FAILED_PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION.value[0]
PERMISSION_DENIED = grpc.StatusCode.PERMISSION_DENIED.value[0]
UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED.value[0]


# ---------------------------------------------------------------- a. a mixed team


@pytest.mark.timeout(180)
def test_node_and_python_teammates_share_a_dag(tmp_path, node_teammate):
    node_executable()  # fail fast, with the fix, when Node or node_modules is missing
    specs = layered_dag()
    assert len(specs) >= 60
    by_id = {spec.id: spec for spec in specs}

    with Lead.launch(tmp_path / "state") as lead:
        # Node teammates: subprocesses that speak the proto through grpc-js.
        node_names = ["node-1", "node-2", "node-3"]
        # 10 ms of simulated work each, as the Python handler's.
        nodes = {name: node_teammate(lead, name, work_ms=10) for name in node_names}

        # Python teammates: threads running the SDK's loop.
        py_names = ["py-1", "py-2"]
        py_done: list[tuple[str, str]] = []
        py_lock = threading.Lock()
        simulated_work = threading.Event()  # never set: wait() below is the work's duration, not a wait

        def handler_for(name: str):
            def handle(task) -> bytes:
                simulated_work.wait(0.01)
                with py_lock:
                    py_done.append((name, task.id))
                return json.dumps({"by": "python", "teammate": name, "task": task.id}).encode()

            return handle

        py_errors: list[BaseException] = []
        py_summaries: dict[str, RunSummary] = {}
        py_threads = []
        for name in py_names:
            mate = lead.add_teammate(name)

            def run(name=name, token=mate.token):
                try:
                    py_summaries[name] = run_teammate(
                        handler_for(name),
                        address=lead.address,
                        token=token,
                        max_idle_polls=600,
                        poll_interval=0.2,
                    )
                except BaseException as exc:  # surfaced by the assertions below
                    py_errors.append(exc)

            thread = threading.Thread(target=run, name=f"teammate-{name}", daemon=True)
            thread.start()
            py_threads.append(thread)

        # Tasks arrive after the whole team is idle (the daemon must wake them), and only
        # then: a teammate still starting would find the work already taken.
        wait_until(lambda: team_waiting(lead, set(nodes) | set(py_names)), 30, "the whole team to connect")
        lead.create_tasks(specs)
        lead.wait_until_done(timeout=120)

        # A Node teammate logs "completed" once CompleteTask has returned,
        # which can be a moment after the board saw the last task finish.
        node_owned = {task.id for task in lead.list_tasks() if task.owner in nodes}

        def node_logged() -> set[str]:
            return {ev["task"] for proc in nodes.values() for ev in proc.events("completed")}

        wait_until(lambda: node_owned <= node_logged(), 10, "Node teammates to log their completions")
        node_done = [(name, ev["task"]) for name, proc in nodes.items() for ev in proc.events("completed")]
        tasks = check_worked_once(lead, specs, node_done + py_done)
        for proc in nodes.values():
            assert proc.events("dropped") == [], proc.describe()
            assert proc.events("duplicate_claim") == [], proc.describe()

        # Both languages did real work, and Node's results are stored verbatim.
        owners = Counter(task.owner for task in tasks.values())
        print(f"tasks per teammate: {dict(sorted(owners.items()))}")
        assert sum(owners[name] for name in node_names) > 0, owners
        assert sum(owners[name] for name in py_names) > 0, owners
        for name, task_id in node_done:
            assert json.loads(lead.get_task(task_id).result) == node_result(name, by_id[task_id])
        for _name, task_id in py_done:
            assert json.loads(lead.get_task(task_id).result)["by"] == "python"

        # The Lead ends the session: every teammate approves and stops cleanly.
        for name in node_names + py_names:
            lead.request_shutdown(name, reason="the board is done", grace=timedelta(seconds=30))
        for proc in nodes.values():
            code = proc.wait_exit(timeout=30)
            assert code == 0, proc.describe()
            assert [ev["reason"] for ev in proc.events("exit")] == ["shutdown"], proc.describe()
            assert len(proc.events("shutdown")) == 1
            # Control before work: nothing was claimed once a shutdown request arrived.
            assert not [ev for ev in proc.events("claimed") if ev["after_shutdown_request"]]
        for thread in py_threads:
            thread.join(timeout=30)
            assert not thread.is_alive(), f"{thread.name} still running after shutdown"
        assert py_errors == []
        assert {name: summary.exit_reason for name, summary in py_summaries.items()} == {
            name: ExitReason.SHUTDOWN for name in py_names
        }


# ---------------------------------------------------------------- b. a hostile client


def teammate_stub(address: str, token: str):
    channel = grpc.insecure_channel(address)
    return channel, corral_pb2_grpc.TeammateServiceStub(channel), (("authorization", f"Bearer {token}"),)


@pytest.mark.timeout(90)
def test_hostile_node_client_is_refused(tmp_path, node_procs):
    node_executable()  # fail fast, with the fix, when Node or node_modules is missing
    with Lead.launch(tmp_path / "state") as lead:
        lead.create_tasks(
            [
                TaskSpec(id="victim-task", title="held by the victim", priority=10),
                TaskSpec(id="bait-task", title="the hostile client's own claim"),
            ]
        )
        victim = lead.add_teammate("victim")
        hostile = lead.add_teammate("node-hostile")

        # The victim takes the high-priority task with a plain stub; its claim
        # outlives the stream (until the 60 s default lease ends).
        channel, stub, victim_md = teammate_stub(lead.address, victim.token)
        with channel:
            stream = stub.Idle(
                corral_pb2.IdleRequest(max_idle_polls=50, poll_interval={"nanos": 100_000_000}),
                metadata=victim_md,
                timeout=30,
            )
            first = next(stream)
            stream.cancel()
            assert first.WhichOneof("event") == "claim"
            victim_claim = first.claim
            assert victim_claim.task.id == "victim-task"

            proc = node_procs(
                "hostile.js",
                "hostile",
                CORRAL_ADDRESS=lead.address,
                CORRAL_TOKEN=hostile.token,
                CORRAL_FOREIGN_TASK="victim-task",
                CORRAL_FOREIGN_CLAIM_TOKEN=victim_claim.claim_token,
            )
            assert proc.wait_exit(timeout=60) == 0, proc.describe()
            seen = {line["attempt"]: line for line in proc.lines if "attempt" in line}

            def verdict(attempt: str) -> tuple[int, str]:
                assert attempt in seen, f"{attempt} missing:\n{proc.describe()}"
                return seen[attempt]["code"], seen[attempt]["reason"]

            # Lead-only calls with a teammate's credential.
            assert verdict("lead_create_tasks")[0] == PERMISSION_DENIED
            assert verdict("lead_add_teammate")[0] == PERMISSION_DENIED
            # No credential, or one the daemon never minted.
            assert verdict("no_token")[0] == UNAUTHENTICATED
            assert verdict("no_token_complete")[0] == UNAUTHENTICATED
            assert verdict("bogus_token")[0] == UNAUTHENTICATED
            # Someone else's claim token is useless with our credential.
            for attempt in ("foreign_claim_complete", "foreign_claim_renew", "foreign_claim_release"):
                assert verdict(attempt) == (FAILED_PRECONDITION, "CLAIM_TOKEN_MISMATCH"), seen[attempt]
                assert seen[attempt].get("domain") == "corral"
            # A field the schema does not know (a forged "owner") is refused,
            # even on a request that would otherwise succeed.
            assert seen["own_claim"]["code"] == OK, proc.describe()
            assert seen["own_claim"]["task"] == "bait-task"
            assert seen["own_claim"]["owner"] == "node-hostile"
            assert verdict("raw_renew_known_fields") == (OK, "")
            assert verdict("unknown_field_renew")[0] == INVALID_ARGUMENT
            assert verdict("unknown_field_complete")[0] == INVALID_ARGUMENT
            assert seen["after_forgery"]["state"] == "TASK_STATE_IN_PROGRESS"
            assert seen["after_forgery"]["owner"] == "node-hostile"
            assert seen["after_forgery"]["result"] == ""
            assert (
                verdict("get_task_by_id") == (OK, "")
                and seen["get_task_by_id"]["task"] == seen["after_forgery"]["task"]
            )
            assert verdict("made_up_claim_token") == (FAILED_PRECONDITION, "CLAIM_TOKEN_MISMATCH")
            assert verdict("release_own") == (OK, "")

            # Nothing the hostile client tried changed the board.
            assert sorted(task.id for task in lead.list_tasks()) == ["bait-task", "victim-task"]
            bait = lead.get_task("bait-task")
            assert bait.state == TaskState.PENDING
            held = lead.get_task("victim-task")
            assert (held.state, held.owner, held.result) == (TaskState.IN_PROGRESS, "victim", b"")

            # The victim's claim still works for the victim.
            done = stub.CompleteTask(
                corral_pb2.CompleteTaskRequest(
                    task_id="victim-task", claim_token=victim_claim.claim_token, result=b"victim's work"
                ),
                metadata=victim_md,
                timeout=10,
            )
            assert done.task.state == corral_pb2.TASK_STATE_COMPLETED
            assert done.task.owner == "victim"
            assert lead.get_task("victim-task").result == b"victim's work"


# ---------------------------------------------------------------- c. leases and control while working


# Both transports: the ops about a claim, and their errors, as unary calls or as Session ops.
TRANSPORTS = pytest.mark.parametrize("transport", ["idle", "session"])


@pytest.mark.timeout(60)
@TRANSPORTS
def test_node_teammate_renews_and_finishes_before_approving_shutdown(tmp_path, node_teammate, transport):
    node_executable()  # fail fast, with the fix, when Node or node_modules is missing
    with Lead.launch(tmp_path / "state") as lead:
        # A 1 s lease and 2.5 s of work: only renewing every third of the lease keeps it.
        lead.create_tasks([TaskSpec(id="long", title="outlives its lease", lease_duration=timedelta(seconds=1))])
        proc = node_teammate(lead, "node-long", transport=transport, work_ms=2500)
        wait_until(lambda: logged(proc, "claimed", "long"), 20, "node-long to claim the task")

        # Shutdown while it works: it acknowledges at once, approves only when done.
        lead.request_shutdown("node-long", reason="wrap up", grace=timedelta(seconds=30))
        assert proc.wait_exit(timeout=30) == 0, proc.describe()

        order = [
            ev["event"] for ev in proc.lines if ev["event"] in ("claimed", "shutdown_request", "completed", "shutdown")
        ]
        assert order == ["claimed", "shutdown_request", "completed", "shutdown"], proc.describe()
        assert proc.events("shutdown_request")[0]["holding"] == 1
        assert len(proc.events("renewed")) >= 3, proc.describe()
        assert proc.events("dropped") == []
        task = lead.get_task("long")
        assert (task.state, task.owner, task.attempt) == (TaskState.COMPLETED, "node-long", 1)
        assert json.loads(task.result)["by"] == "node"


@pytest.mark.timeout(60)
@TRANSPORTS
def test_node_teammate_drops_a_canceled_task_and_carries_on(tmp_path, node_teammate, transport):
    node_executable()  # fail fast, with the fix, when Node or node_modules is missing
    with Lead.launch(tmp_path / "state") as lead:
        lead.create_tasks([TaskSpec(id="doomed", title="canceled mid-work", lease_duration=timedelta(seconds=1))])
        proc = node_teammate(lead, "node-drop", transport=transport, work_ms=1500)
        wait_until(lambda: logged(proc, "claimed", "doomed"), 20, "node-drop to claim the task")

        lead.cancel_tasks(["doomed"])
        # Its next renewal (a third of the lease later) learns the task is gone.
        wait_until(lambda: logged(proc, "dropped", "doomed"), 10, "node-drop to drop the canceled task")
        dropped = proc.events("dropped")[0]
        assert (dropped["code"], dropped["reason"]) == (FAILED_PRECONDITION, "TASK_CANCELED"), proc.describe()

        # ... and carries on with the next task.
        lead.create_tasks([TaskSpec(id="after", title="the next job")])
        wait_until(lambda: logged(proc, "completed", "after"), 20, "node-drop to complete the next task")
        lead.request_shutdown("node-drop", reason="done", grace=timedelta(seconds=30))
        assert proc.wait_exit(timeout=30) == 0, proc.describe()

        assert not logged(proc, "completed", "doomed")
        assert lead.get_task("doomed").state == TaskState.CANCELED
        assert (lead.get_task("after").state, lead.get_task("after").owner) == (TaskState.COMPLETED, "node-drop")


# ---------------------------------------------------------------- d. both transports in one team


def team_waiting(lead: Lead, names: set[str]) -> bool:
    """Every one of `names` is online with nothing to do."""
    return {mate.name for mate in lead.list_teammates() if mate.status is TeammateStatus.IDLE} >= names


@pytest.mark.timeout(180)
def test_node_session_teammates_work_beside_python_session_and_idle_ones(tmp_path, node_teammate, python_teammate):
    node_executable()  # fail fast, with the fix, when Node or node_modules is missing
    specs = layered_dag()
    by_id = {spec.id: spec for spec in specs}

    with Lead.launch(tmp_path / "state") as lead:
        sessions = {name: node_teammate(lead, name, transport="session") for name in ("node-s1", "node-s2")}
        nodes = {**sessions, "node-i1": node_teammate(lead, "node-i1", transport="idle")}
        pythons = {
            "py-session": python_teammate(lead, "py-session", transport="session"),
            "py-idle": python_teammate(lead, "py-idle", transport="idle"),
        }
        team = {**nodes, **pythons}
        # Tasks arrive once the whole team waits for work, so that each has its chance at them.
        wait_while_running(lambda: team_waiting(lead, set(team)), 30, "the whole team to connect", team.values())
        lead.create_tasks(specs)
        lead.wait_until_done(timeout=120)

        node_owned = {task.id for task in lead.list_tasks() if task.owner in nodes}

        def node_logged() -> set[str]:
            return {ev["task"] for proc in nodes.values() for ev in proc.events("completed")}

        wait_until(lambda: node_owned <= node_logged(), 10, "Node teammates to log their completions")
        done = [(name, ev["task"]) for name, proc in nodes.items() for ev in proc.events("completed")]
        done += [(name, ev["task"]) for name, proc in pythons.items() for ev in proc.events("handled")]
        tasks = check_worked_once(lead, specs, done)
        owners = Counter(task.owner for task in tasks.values())
        print(f"tasks per teammate: {dict(sorted(owners.items()))}")
        assert set(owners) == set(team), owners  # everyone, on either transport, did some of the work
        for name, proc in nodes.items():
            assert proc.events("dropped") == [], proc.describe()
            assert proc.events("duplicate_claim") == [], proc.describe()
            for ev in proc.events("completed"):
                assert json.loads(tasks[ev["task"]].result) == node_result(name, by_id[ev["task"]])

        # Each used the transport it was told to, as the daemon saw it: it records
        # every Session op by its op id (table session_ops), and an Idle teammate sends none.
        assert set(recorded_session_ops(tmp_path / "state")) == {"node-s1", "node-s2", "py-session"}

        # The Node Session teammates did it all on one stream each: every completion an op
        # with an id of its own, no stream broken, so nothing sent twice.
        op_ids = [ev["op_id"] for proc in sessions.values() for ev in proc.events("completed")]
        assert len(set(op_ids)) == len(op_ids) == sum(owners[name] for name in sessions)
        handed_off = 0
        for proc in sessions.values():
            assert [ev["transport"] for ev in proc.events("stream_open")] == ["session"], proc.describe()
            assert proc.events("op_resent") == [] and proc.events("op_timeout") == [], proc.describe()
            completions = {ev["op_id"] for ev in proc.events("completed")}
            # A claim that came with an op result came with one of this teammate's completions.
            after = [ev["after_op"] for ev in proc.events("claimed") if ev["after_op"] is not None]
            assert set(after) <= completions, proc.describe()
            handed_off += len(after)
        print(f"claims handed off with a completion's result: {handed_off} of {len(op_ids)}")
        assert all(ev["after_op"] is None for ev in nodes["node-i1"].events("claimed"))

        # The Lead ends the session: every teammate approves and stops cleanly.
        for name in team:
            lead.request_shutdown(name, reason="the board is done", grace=timedelta(seconds=30))
        for proc in nodes.values():
            assert proc.wait_exit(timeout=30) == 0, proc.describe()
            assert [ev["reason"] for ev in proc.events("exit")] == ["shutdown"], proc.describe()
            assert not [ev for ev in proc.events("claimed") if ev["after_shutdown_request"]]
        for name, proc in pythons.items():
            assert proc.wait_exit(timeout=30) == 0, proc.describe()
            [summary] = proc.events("exit")
            assert (summary["reason"], summary["completed"]) == (ExitReason.SHUTDOWN.name, owners[name])
