"""What the demo's team left on the board besides results, read back by the Lead: each
task's live output and the artifacts the DAG asks for (`"artifact": NAME` in a
payload), and the dependents that read them. The demo fails unless both round-tripped."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import corral
from corral._terminal.artifacts import size_label

from .team import DemoFailed


@dataclass(frozen=True)
class ArtifactProof:
    """One artifact the DAG asked for: as stored, read back, and who else read it."""

    task_id: str
    artifact: corral.Artifact
    readers: tuple[tuple[str, str], ...]  # (teammate, task) of each dependent that read it

    def line(self) -> str:
        """`perf: perf-report.json (412 B, sha256 ab12cd34ef56…) read by ada (publish) and the lead`."""
        artifact = self.artifact
        readers = [f"{teammate} ({task_id})" for teammate, task_id in self.readers]
        return (
            f"{self.task_id}: {artifact.name} ({size_label(artifact.size)}, sha256 {artifact.sha256[:12]}…) "
            f"read by {' and '.join([*readers, 'the lead'])}"
        )


@dataclass(frozen=True)
class Evidence:
    """The last attempt's output of every task (by id) and the artifacts the DAG asked for
    (task id and name -> its bytes as the Lead downloaded them, or why that failed)."""

    output: dict[str, bytes]
    downloads: dict[tuple[str, str], bytes | str]

    @property
    def output_lines(self) -> int:
        return sum(data.count(b"\n") for data in self.output.values())

    @property
    def tasks_with_output(self) -> int:
        return sum(1 for data in self.output.values() if data)


def gather(lead: corral.Lead, tasks: Sequence[corral.Task], specs: Sequence[corral.TaskSpec]) -> Evidence:
    """Read each task's output and the artifacts the DAG names while the daemon still
    runs; a failure is kept for `check` to report, after the run's own checks."""
    output: dict[str, bytes] = {}
    for task in tasks:
        if task.attempt == 0:
            continue  # never claimed: nothing to read (verify reports why)
        with contextlib.suppress(corral.CorralError):
            output[task.id] = b"".join(chunk.data for chunk in lead.tail_output(task.id, follow=False))
    by_id = {task.id: task for task in tasks}
    downloads: dict[tuple[str, str], bytes | str] = {}
    for task_id, name in _asked_for(specs):
        listed = _listed(by_id.get(task_id), name)
        if listed is None:
            continue
        try:
            downloads[task_id, name] = lead.get_artifact(task_id, name, sha256=listed.sha256)
        except corral.CorralError as exc:
            downloads[task_id, name] = str(exc)
    return Evidence(output, downloads)


def check(evidence: Evidence, tasks: Sequence[corral.Task], specs: Sequence[corral.TaskSpec]) -> list[ArtifactProof]:
    """Raise DemoFailed unless every task wrote output and every artifact the DAG asks for
    is attached, reads back with its SHA-256, and was read by the dependents that claim it."""
    silent = [task.id for task in tasks if not evidence.output.get(task.id)]
    if silent:
        raise DemoFailed(f"{len(silent)} task(s) wrote no live output: {', '.join(silent[:5])}")
    by_id = {task.id: task for task in tasks}
    proofs = []
    for task_id, name in _asked_for(specs):
        listed = _listed(by_id.get(task_id), name)
        if listed is None:
            raise DemoFailed(
                f"task {task_id} should have attached the artifact {name}, but its artifacts do not list it"
            )
        data = evidence.downloads.get((task_id, name), "not downloaded")
        if isinstance(data, str):
            raise DemoFailed(f"the lead could not read artifact {name} of task {task_id}: {data}")
        if _json(data).get("task") != task_id:
            raise DemoFailed(f"artifact {name} of task {task_id} is not that task's report")
        key = f"{task_id}/{name}"
        dependents = [task for task in tasks if task_id in task.depends_on]
        readers = tuple(
            (str(_json(task.result).get("by", "?")), task.id)
            for task in dependents
            if _json(task.result).get("artifacts_read", {}).get(key) == listed.sha256
        )
        unread = [task.id for task in dependents if task.id not in {reader for _, reader in readers}]
        if unread:
            raise DemoFailed(f"artifact {name} of task {task_id} was not read by its dependent(s) {', '.join(unread)}")
        proofs.append(ArtifactProof(task_id, listed, readers))
    return proofs


def _asked_for(specs: Sequence[corral.TaskSpec]) -> list[tuple[str, str]]:
    """(task id, artifact name) for each task whose payload names an artifact."""
    return [(spec.id, str(_json(spec.payload)["artifact"])) for spec in specs if _json(spec.payload).get("artifact")]


def _listed(task: corral.Task | None, name: str) -> corral.Artifact | None:
    if task is None:
        return None
    return next((artifact for artifact in task.artifacts if artifact.name == name), None)


def _json(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data.decode("utf-8")) if data else {}
    except (UnicodeDecodeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
