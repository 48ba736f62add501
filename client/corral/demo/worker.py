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
reviewer approves that.

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
        # A little simulated work, so the board has something to show.
        time.sleep(self._work_seconds * self._random.uniform(0.5, 1.5))
        if spec.get("fail_first_attempt") and claim.attempt == 1:
            raise SimulatedFailure(f"{task.id}: simulated flaky failure on attempt 1 (a retry will succeed)")
        if spec.get("ask") and not claim.answers:
            raise corral.NeedsInput(spec["ask"])  # the task comes back, answered, to whoever is free
        found = spec.get("discovers")
        if found and found["id"] not in claim.dependency_results:
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
        weight = spec.get("weight")
        value = None if weight is None else weight + sum(v or 0 for v in inputs.values())
        result: dict[str, Any] = {
            "value": value,
            "inputs": inputs,
            "by": self._name,
            "attempt": claim.attempt,
            "fence": claim.fence,
        }
        if claim.answers:
            result["answer"] = claim.answers[-1].answer
        if found:
            result["after"] = found["id"]  # the prerequisite it waited for
        if claim.rejected_result and claim.previous_attempt is not None:
            # A rework: the same work, revised as the review asked.
            result["revised"] = claim.previous_attempt.feedback
        return json.dumps(result, separators=(",", ":"))

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
        if feedback and "revised" not in _payload(result):
            print(f"{self._name}: rejecting {task.id}: {feedback}", flush=True)
            return corral.Reject(feedback)
        print(f"{self._name}: approving {task.id}", flush=True)
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
