"""One demo teammate process: `python -m corral.demo.worker --name NAME ...`.

It gets CORRAL_ADDRESS and CORRAL_TOKEN from its environment and runs
`corral.run_teammate` until the Lead asks it to shut down. Its handler
understands the sample DAG's JSON payloads: it reads the results of the
tasks named in `reads` (GetTask), adds its own `weight`, and raises on the
first attempt of a task marked `fail_first_attempt`. A task marked `ask` asks the
Lead that question first (`NeedsInput`) and carries the answer in its result. A
task marked `discovers` proposes that prerequisite and splits itself on it
(`Claim.propose_tasks(..., block=True)`); claimed again once it is done, it names
it in its result. A
teammate holding the reviewer role of a task's review (`DemoReviewer`) rejects a
first draft with the task's `review_feedback`; the author's rework (its claim
carries the rejected result and the feedback) marks its result `revised`, and the
reviewer approves that. A task marked `artifact` attaches its report (JSON) under
that name; a task whose claim lists its dependencies' artifacts downloads each,
checks it, and names it with its SHA-256 in its result (`artifacts_read`). Every
step is written to the task's live output (`corral.output`).

The last line on stdout is a JSON summary of the run. Exit status 0 means
the run ended with an approved shutdown.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from typing import Any

import corral


class SimulatedFailure(RuntimeError):
    """The planned failure of a `fail_first_attempt` task's first attempt."""


class DemoHandler:
    """The task handler; `reader` is a separate teammate connection for GetTask."""

    def __init__(self, name: str, reader: corral.Teammate, work_seconds: float) -> None:
        self._name = name
        self._reader = reader
        self._work_seconds = work_seconds
        self._random = random.Random(f"{name}-{os.getpid()}")

    def __call__(self, task: corral.Task) -> str:
        claim = corral.current_claim()
        spec = _payload(task.payload)
        corral.output(f"{self._name} took {task.id} (attempt {claim.attempt}): {task.title or 'untitled'}\n")
        # A little simulated work, so the board has something to show.
        seconds = self._work_seconds * self._random.uniform(0.5, 1.5)
        corral.output(f"working for {seconds:.2f} s\n")
        time.sleep(seconds)
        if spec.get("fail_first_attempt") and claim.attempt == 1:
            corral.output("simulated flaky failure: giving up this attempt (a retry will succeed)\n")
            raise SimulatedFailure(f"{task.id}: simulated flaky failure on attempt 1 (a retry will succeed)")
        if spec.get("ask") and not claim.answers:
            corral.output(f"asking the lead: {spec['ask']}\n")
            raise corral.NeedsInput(spec["ask"])  # the task comes back, answered, to whoever is free
        found = spec.get("discovers")
        if found and found["id"] not in claim.dependency_results:
            corral.output(f"found a prerequisite, {found['id']}: proposing it and waiting for it\n")
            # Found mid-task: the prerequisite goes to the Lead, and this task waits for it.
            prerequisite = corral.TaskSpec(
                id=found["id"],
                title=found["title"],
                payload=json.dumps({"weight": found["weight"]}).encode(),
                priority=task.priority,
            )
            claim.propose_tasks([prerequisite], block=True)
            print(f"{self._name}: {task.id} needs {found['id']} first: proposed it and split the task", flush=True)
            return ""  # a split claim is over: run_teammate reports no outcome for it
        inputs = {dep: self._value_of(dep) for dep in spec.get("reads", ())}
        if inputs:
            corral.output(f"read {', '.join(f'{dep} = {value}' for dep, value in inputs.items())}\n")
        read = {f"{dep.task_id}/{dep.artifact.name}": self._read_artifact(dep) for dep in claim.dependency_artifacts}
        weight = spec.get("weight")
        value = None if weight is None else weight + sum(v or 0 for v in inputs.values())
        result: dict[str, Any] = {
            "value": value,
            "inputs": inputs,
            "by": self._name,
            "attempt": claim.attempt,
            "fence": claim.fence,
        }
        if read:
            result["artifacts_read"] = read  # each dependency artifact read, by its SHA-256
        if spec.get("artifact"):
            self._attach_report(claim, task, spec["artifact"], result)
        corral.output(f"done: value {value}\n" if weight is not None else "done\n")
        if claim.answers:
            result["answer"] = claim.answers[-1].answer
        if found:
            result["after"] = found["id"]  # the prerequisite it waited for
        if claim.rejected_result and claim.previous_attempt is not None:
            # A rework: the same work, revised as the review asked.
            result["revised"] = claim.previous_attempt.feedback
        return json.dumps(result, separators=(",", ":"))

    def _read_artifact(self, dep: corral.DependencyArtifact) -> str:
        """Download a dependency's artifact (checked against its SHA-256) and check it is
        the report that task wrote; returns the SHA-256."""
        artifact = dep.artifact
        data = self._reader.get_artifact(dep.task_id, artifact.name, sha256=artifact.sha256)
        if _payload(data).get("task") != dep.task_id:
            raise corral.PermanentFailure(f"artifact {artifact.name} of {dep.task_id} is not that task's report")
        corral.output(f"read {dep.task_id}'s {artifact.name} ({len(data)} bytes, sha256 {artifact.sha256[:12]})\n")
        return artifact.sha256

    def _attach_report(self, claim: corral.Claim, task: corral.Task, name: str, result: dict[str, Any]) -> None:
        """Attach the task's report (what it read and computed) as an artifact; its
        dependents read it through their claims' dependency_artifacts."""
        report = {"task": task.id, "title": task.title, **result}
        artifact = claim.put_artifact(name, json.dumps(report, indent=2) + "\n", "application/json")
        corral.output(f"attached {artifact.name} ({artifact.size} bytes, sha256 {artifact.sha256[:12]})\n")

    def _value_of(self, task_id: str) -> Any:
        dep = self._reader.get_task(task_id)
        if dep.state is not corral.TaskState.COMPLETED:
            # Cannot happen (claims wait for their dependencies); fail loudly if it does.
            raise corral.PermanentFailure(f"dependency {task_id} is {dep.state.name}, not COMPLETED")
        return _payload(dep.result).get("value")


class DemoReviewer:
    """The review handler: a first draft of a task with `review_feedback` is sent back
    with that feedback; a result marked `revised` (or any other) is approved."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, task: corral.Task, result: bytes) -> corral.Verdict:
        feedback = _payload(task.payload).get("review_feedback")
        corral.output(f"{self._name} reviews {task.id}'s result ({len(result)} bytes)\n")
        if feedback and "revised" not in _payload(result):
            print(f"{self._name}: rejecting {task.id}: {feedback}", flush=True)
            corral.output(f"rejected: {feedback}\n")
            return corral.Reject(feedback)
        print(f"{self._name}: approving {task.id}", flush=True)
        corral.output("approved\n")
        return corral.Approve()


def _payload(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data.decode("utf-8")) if data else {}
    except (UnicodeDecodeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m corral.demo.worker")
    parser.add_argument("--name", required=True, help="this teammate's name (for logs; identity is the token)")
    parser.add_argument("--work-ms", type=int, default=100, help="simulated work per task")
    parser.add_argument("--plan", help="submit this plan first and wait for the Lead's approval")
    parser.add_argument("--hello", help="send this message to the Lead before starting")
    args = parser.parse_args(argv)

    def on_message(message: corral.Message) -> None:
        print(f"{args.name}: message from {message.sender}: {message.body}", flush=True)

    with corral.Teammate.connect() as reader:
        if args.hello:
            reader.send_message("lead", args.hello)
        handler = DemoHandler(args.name, reader, args.work_ms / 1000)
        summary = corral.run_teammate(
            handler,
            plan=args.plan,
            reviewer=DemoReviewer(args.name),  # only a teammate holding a review's role is offered one
            on_message=on_message,
            stop_on_idle_timeout=False,  # stay until the Lead says stop
            reconnect_timeout=10.0,
        )
    print(
        json.dumps(
            {
                "name": args.name,
                "exit_reason": summary.exit_reason.value,
                "completed": summary.completed,
                "failed": summary.failed,
                "lost": summary.lost,
                "asked": summary.asked,
                "reviewed": summary.reviewed,
                "split": summary.split,
                "plan_id": summary.plan_id,
            }
        ),
        flush=True,
    )
    return 0 if summary.exit_reason is corral.ExitReason.SHUTDOWN else 1


if __name__ == "__main__":
    sys.exit(main())
