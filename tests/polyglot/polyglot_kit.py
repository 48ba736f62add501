"""What the polyglot tests share: child programs that log JSON lines, the DAG they work, and its checks."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import sqlite3
import subprocess
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable

import pytest

from corral import Lead, Task, TaskChanged, TaskSpec, TaskState
from corrald.store.ops import REQUEST_ID_SEPARATOR
from tests.support import wait_until

NODE_DIR = pathlib.Path(__file__).resolve().parent / "node"


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


class LoggingProcess:
    """A program whose stdout is one JSON object per line, collected as it arrives."""

    def __init__(self, argv: list[str], cwd: pathlib.Path, env: dict[str, str], log_dir: pathlib.Path, label: str):
        self.label = label
        self.lines: list[dict] = []
        self._cond = threading.Condition()
        self._stderr_path = log_dir / f"{label}.stderr"
        self._stderr = open(self._stderr_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
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


def logged(proc: LoggingProcess, event: str, task: str) -> bool:
    return any(ev.get("task") == task for ev in proc.events(event))


def check_worked_once(lead: Lead, specs: Iterable[TaskSpec], done: list[tuple[str, str]]) -> dict[str, Task]:
    """Every task completed, worked on once, by its owner, in dependency order; `done` is
    (teammate, task id) for each time a teammate finished the work. Returns the tasks by id."""
    by_id = {spec.id: spec for spec in specs}
    tasks = {task.id: task for task in lead.list_tasks()}
    assert set(tasks) == set(by_id)
    not_done = {tid: task.state for tid, task in tasks.items() if task.state != TaskState.COMPLETED}
    assert not not_done, f"tasks not completed: {not_done}"

    # Exactly once: each task was worked on by exactly one teammate, once.
    executions = Counter(task_id for _, task_id in done)
    assert set(executions) == set(by_id)
    assert [tid for tid, n in executions.items() if n != 1] == []

    # The board's owner is the teammate that did the work (identity from its credential).
    for name, task_id in done:
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
    return tasks


def node_result(name: str, spec: TaskSpec) -> dict:
    """The result a Node teammate stores for a task."""
    return {"by": "node", "teammate": name, "task": spec.id, "deps": list(spec.depends_on)}


def wait_while_running(condition: Callable[[], object], timeout: float, what: str, procs: Iterable[LoggingProcess]):
    """wait_until(condition), failing at once, with its output, when one of `procs` exits meanwhile."""
    procs = list(procs)

    def holds_or_exited() -> object:
        for proc in procs:
            if proc.proc.poll() is not None:
                pytest.fail(
                    f"{proc.label} exited ({proc.proc.returncode}) while waiting for {what}:\n{proc.describe()}"
                )
        return condition()

    return wait_until(holds_or_exited, timeout, what)


def recorded_session_ops(state_dir: pathlib.Path) -> dict[str, set[str]]:
    """The Session op ids the daemon has recorded, by teammate (table session_ops): a
    Session op leaves one, whether it ran or was answered from the record; an
    Idle teammate leaves none. (The table also keeps the request ids of unary
    writes, the Lead's among them, named after their RPC: those are left out.)"""
    database = state_dir / "corral.sqlite3"
    recorded: dict[str, set[str]] = defaultdict(set)
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        for teammate, op_id in db.execute("SELECT teammate, op_id FROM session_ops"):
            if REQUEST_ID_SEPARATOR not in op_id:
                recorded[teammate].add(op_id)
    return dict(recorded)
