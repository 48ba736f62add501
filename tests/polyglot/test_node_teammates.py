"""Polyglot proof: Node.js teammates, speaking only corral.v1, next to Python ones.

The Node programs live in tests/polyglot/node/ and load proto/corral/v1/corral.proto
at run time (no generated code): if they can do the job, any language can.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import threading
from collections import Counter
from datetime import timedelta

import grpc
import pytest

from corral import ExitReason, Lead, RunSummary, TaskChanged, TaskSpec, TaskState, run_teammate
from corral.v1 import corral_pb2, corral_pb2_grpc
from tests.support import wait_until

NODE_DIR = pathlib.Path(__file__).resolve().parent / "node"

# gRPC status codes as numbers, the way the Node programs report them.
OK = grpc.StatusCode.OK.value[0]
INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT.value[0]
FAILED_PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION.value[0]
PERMISSION_DENIED = grpc.StatusCode.PERMISSION_DENIED.value[0]
UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED.value[0]


# ---------------------------------------------------------------- helpers


def node_executable() -> str:
    """The node binary, failing (never skipping) with a fix when the toolchain is missing."""
    node = shutil.which("node")
    if node is None:
        pytest.fail(
            "Node.js is required for tests/polyglot: install node (v18+) and npm, then run `make test`",
            pytrace=False,
        )
    if not (NODE_DIR / "node_modules" / "@grpc" / "grpc-js").is_dir():
        pytest.fail(
            f"{NODE_DIR / 'node_modules'} is missing: run `make test` (it runs npm ci)",
            pytrace=False,
        )
    return node


class NodeProcess:
    """A Node program whose stdout is one JSON object per line, collected as it arrives."""

    def __init__(self, script: str, env: dict[str, str], log_dir: pathlib.Path, label: str):
        self.label = label
        self.lines: list[dict] = []
        self._cond = threading.Condition()
        self._stderr_path = log_dir / f"{label}.stderr"
        self._stderr = open(self._stderr_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [node_executable(), str(NODE_DIR / script)],
            cwd=NODE_DIR,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        self._reader = threading.Thread(target=self._read, name=f"read-{label}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            text = raw.decode("utf-8", "replace").strip()
            if not text:
                continue
            try:
                item = json.loads(text)
            except json.JSONDecodeError:
                item = {"event": "unparsed", "text": text}
            with self._cond:
                self.lines.append(item)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def events(self, name: str) -> list[dict]:
        with self._cond:
            return [line for line in self.lines if line.get("event") == name]

    def wait_exit(self, timeout: float) -> int:
        """The exit code; the stdout reader has drained everything by then."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.label} did not exit within {timeout}s; output so far:\n{self.describe()}")
        self._reader.join(timeout=10)
        return code

    def describe(self) -> str:
        with self._cond:
            out = "\n".join(json.dumps(line) for line in self.lines[-40:])
        err = self._stderr_path.read_text(errors="replace")[-4000:] if self._stderr_path.exists() else ""
        return f"--- stdout (last 40) ---\n{out}\n--- stderr ---\n{err}"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._stderr.close()


@pytest.fixture
def node_procs(tmp_path):
    """Starts Node programs; kills whatever is still running when the test ends."""
    started: list[NodeProcess] = []

    def start(script: str, label: str, **env: str) -> NodeProcess:
        proc = NodeProcess(script, env, tmp_path, label)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()


def layered_dag() -> list[TaskSpec]:
    """65 tasks in 7 layers: one root fanning out, overlapping fan-in between
    layers, a skip-layer edge, and one sink that waits for the whole last layer."""
    widths = [1, 12, 15, 18, 12, 6, 1]
    layers: list[list[str]] = []
    specs: list[TaskSpec] = []
    for depth, width in enumerate(widths):
        layer = [f"L{depth}-{i:02d}" for i in range(width)]
        for i, task_id in enumerate(layer):
            deps: set[str] = set()
            if depth > 0:
                prev = layers[-1]
                if width == 1:
                    deps.update(prev)  # fan-in of the whole layer
                else:
                    deps.update({prev[i % len(prev)], prev[(i * 7 + 3) % len(prev)], prev[(i + 1) % len(prev)]})
            if depth >= 2 and i % 4 == 0:
                deps.add(layers[-2][i % len(layers[-2])])  # skip a layer
            ordered = tuple(sorted(deps))
            specs.append(
                TaskSpec(
                    id=task_id,
                    title=f"layer {depth} task {i}",
                    payload=json.dumps({"layer": depth, "index": i}).encode(),
                    depends_on=ordered,
                )
            )
        layers.append(layer)
    return specs


def board_history(lead, task_ids: set[str]) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """Watch-feed sequence numbers at which each task entered IN_PROGRESS and
    COMPLETED, replayed from the start until every task has completed."""
    claimed: dict[str, list[int]] = {task_id: [] for task_id in task_ids}
    completed: dict[str, list[int]] = {task_id: [] for task_id in task_ids}
    last_state: dict[str, TaskState] = {}
    remaining = set(task_ids)
    events = lead.watch(after_seq=0)
    try:
        for event in events:
            if not isinstance(event, TaskChanged) or event.task.id not in task_ids:
                continue
            task = event.task
            if task.state != last_state.get(task.id):
                if task.state == TaskState.IN_PROGRESS:
                    claimed[task.id].append(event.seq)
                elif task.state == TaskState.COMPLETED:
                    completed[task.id].append(event.seq)
                    remaining.discard(task.id)
            last_state[task.id] = task.state
            if not remaining:
                break
    finally:
        events.close()
    return claimed, completed


# ---------------------------------------------------------------- a. a mixed team


@pytest.mark.timeout(180)
def test_node_and_python_teammates_share_a_dag(tmp_path, node_procs):
    node_executable()  # fail fast, with the fix, when Node or node_modules is missing
    specs = layered_dag()
    assert len(specs) >= 60
    by_id = {spec.id: spec for spec in specs}

    with Lead.launch(tmp_path / "state") as lead:
        # Node teammates: subprocesses that speak the proto through grpc-js.
        node_names = ["node-1", "node-2", "node-3"]
        nodes = {}
        for name in node_names:
            mate = lead.add_teammate(name)
            nodes[name] = node_procs(
                "teammate.js",
                name,
                CORRAL_ADDRESS=lead.address,
                CORRAL_TOKEN=mate.token,
                CORRAL_NAME=name,
                CORRAL_MAX_IDLE_POLLS="600",
                CORRAL_POLL_INTERVAL_MS="200",
                CORRAL_WORK_MS="10",  # the same simulated work as the Python handler
            )

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

        # Tasks arrive after the team is idle: the daemon must wake them.
        lead.create_tasks(specs)
        lead.wait_until_done(timeout=120)

        tasks = {task.id: task for task in lead.list_tasks()}
        assert set(tasks) == set(by_id)
        not_done = {tid: task.state for tid, task in tasks.items() if task.state != TaskState.COMPLETED}
        assert not not_done, f"tasks not completed: {not_done}"

        # A Node teammate logs "completed" once CompleteTask has returned,
        # which can be a moment after the board saw the last task finish.
        node_owned = {tid for tid, task in tasks.items() if task.owner in nodes}

        def node_logged() -> set[str]:
            return {ev["task"] for proc in nodes.values() for ev in proc.events("completed")}

        wait_until(lambda: node_owned <= node_logged(), 10, "Node teammates to log their completions")

        # Exactly once: each task was worked on by exactly one teammate, once.
        node_done = [(name, ev["task"]) for name, proc in nodes.items() for ev in proc.events("completed")]
        executions = Counter(task_id for _, task_id in node_done + py_done)
        assert set(executions) == set(by_id)
        assert [tid for tid, n in executions.items() if n != 1] == []
        for proc in nodes.values():
            assert proc.events("dropped") == [], proc.describe()
            assert proc.events("duplicate_claim") == [], proc.describe()

        # The board's owner is the teammate that did the work (identity from its credential).
        for name, task_id in node_done + py_done:
            assert tasks[task_id].owner == name

        # Dependency order: no task finished before any of its dependencies.
        for task in tasks.values():
            assert tuple(task.depends_on) == by_id[task.id].depends_on
            for dep in task.depends_on:
                assert task.finish_time >= tasks[dep].finish_time, (task.id, dep)
        # ... and none was claimed before all its dependencies completed, and
        # each was claimed and completed once: replay the board's event feed.
        claimed_at, completed_at = board_history(lead, set(by_id))
        for task_id, spec in by_id.items():
            assert len(claimed_at[task_id]) == 1, (task_id, claimed_at[task_id])
            assert len(completed_at[task_id]) == 1, (task_id, completed_at[task_id])
            for dep in spec.depends_on:
                assert claimed_at[task_id][0] > completed_at[dep][0], (task_id, dep)

        # Both languages did real work, and Node's results are stored verbatim.
        owners = Counter(task.owner for task in tasks.values())
        print(f"tasks per teammate: {dict(sorted(owners.items()))}")
        assert sum(owners[name] for name in node_names) > 0, owners
        assert sum(owners[name] for name in py_names) > 0, owners
        for name, task_id in node_done:
            result = json.loads(lead.get_task(task_id).result)
            assert result == {
                "by": "node",
                "teammate": name,
                "task": task_id,
                "deps": list(by_id[task_id].depends_on),
            }
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


def start_node_teammate(lead, node_procs, name: str, work_ms: int) -> NodeProcess:
    mate = lead.add_teammate(name)
    return node_procs(
        "teammate.js",
        name,
        CORRAL_ADDRESS=lead.address,
        CORRAL_TOKEN=mate.token,
        CORRAL_NAME=name,
        CORRAL_MAX_IDLE_POLLS="600",
        CORRAL_POLL_INTERVAL_MS="200",
        CORRAL_WORK_MS=str(work_ms),
    )


def logged(proc: NodeProcess, event: str, task: str) -> bool:
    return any(ev.get("task") == task for ev in proc.events(event))


@pytest.mark.timeout(60)
def test_node_teammate_renews_and_finishes_before_approving_shutdown(tmp_path, node_procs):
    node_executable()  # fail fast, with the fix, when Node or node_modules is missing
    with Lead.launch(tmp_path / "state") as lead:
        # A 1 s lease and 2.5 s of work: only renewing every third of the lease keeps it.
        lead.create_tasks([TaskSpec(id="long", title="outlives its lease", lease_duration=timedelta(seconds=1))])
        proc = start_node_teammate(lead, node_procs, "node-long", work_ms=2500)
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
def test_node_teammate_drops_a_canceled_task_and_carries_on(tmp_path, node_procs):
    node_executable()  # fail fast, with the fix, when Node or node_modules is missing
    with Lead.launch(tmp_path / "state") as lead:
        lead.create_tasks([TaskSpec(id="doomed", title="canceled mid-work", lease_duration=timedelta(seconds=1))])
        proc = start_node_teammate(lead, node_procs, "node-drop", work_ms=1500)
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
