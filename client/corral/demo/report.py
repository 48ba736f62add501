"""Checking what the demo's team did, and the summary it prints."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import corral
from corral._terminal.boardview import BoardModel
from corral._terminal.output import first_line, short

from .evidence import ArtifactProof, Evidence
from .team import DemoFailed, Member


def _payload(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data.decode("utf-8")) if data else {}
    except (UnicodeDecodeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def expected_values(specs: Sequence[corral.TaskSpec]) -> dict[str, int]:
    """Each weighted task's value: its weight plus the values of the tasks it reads."""
    payloads = {spec.id: _payload(spec.payload) for spec in specs}
    values: dict[str, int] = {}

    def value(task_id: str, trail: tuple[str, ...] = ()) -> int:
        if task_id in values:
            return values[task_id]
        if task_id in trail or task_id not in payloads:
            return 0
        spec = payloads[task_id]
        total = int(spec.get("weight") or 0) + sum(value(dep, (*trail, task_id)) for dep in spec.get("reads", ()))
        values[task_id] = total
        return total

    for task_id, spec in payloads.items():
        if "weight" in spec:
            value(task_id)
    return {task_id: v for task_id, v in values.items() if "weight" in payloads[task_id]}


def verify(
    tasks: Sequence[corral.Task],
    specs: Sequence[corral.TaskSpec],
    model: BoardModel,
    members: Sequence[Member],
    *,
    answer: str = "",
) -> None:
    """Raise DemoFailed unless the run did everything the demo promises."""
    by_id = {task.id: task for task in tasks}
    missing = [spec.id for spec in specs if spec.id not in by_id]
    if missing:
        raise DemoFailed(f"tasks missing from the board: {', '.join(missing)}")
    unfinished = [task for task in tasks if task.state is not corral.TaskState.COMPLETED]
    if unfinished:
        described = "; ".join(
            f"{task.id} is {task.state.name}" + (f" ({short(first_line(task.error), 80)})" if task.error else "")
            for task in unfinished[:5]
        )
        raise DemoFailed(f"{len(unfinished)} of {len(tasks)} task(s) not completed: {described}")
    for task_id, expected in expected_values(specs).items():
        actual = _payload(by_id[task_id].result).get("value")
        if actual != expected:
            raise DemoFailed(f"task {task_id} computed {actual!r} from its dependencies' results, expected {expected}")
    for spec in specs:
        if _payload(spec.payload).get("fail_first_attempt") and by_id[spec.id].attempt < 2:
            raise DemoFailed(f"task {spec.id} should have failed once and been retried, but took 1 attempt")
    for spec in specs:
        payload, task = _payload(spec.payload), by_id[spec.id]
        if payload.get("review_feedback") and task.review_rounds != 1:
            raise DemoFailed(
                f"task {spec.id} should have been rejected once, then approved; rejections: {task.review_rounds}"
            )
        if payload.get("review_feedback") and _payload(task.result).get("revised") != payload["review_feedback"]:
            raise DemoFailed(f"task {spec.id} was approved without the revision its review asked for")
        if payload.get("ask") and _payload(task.result).get("answer") != answer:
            raise DemoFailed(f"task {spec.id} asked the Lead a question but its result has no answer {answer!r}")
        if payload.get("discovers"):
            _check_discovered(spec.id, payload["discovers"]["id"], by_id)
    senders = {event.message.sender for event in model.messages}
    authors = {event.author for event in model.plans.values()}
    for member in members:
        if member.hello is not None and member.name not in senders:
            raise DemoFailed(f"the Lead never saw the message {member.name} sends on start")
        if member.plan is not None and member.name not in authors:
            raise DemoFailed(f"the Lead never saw the plan {member.name} submits on start")


def _check_discovered(task_id: str, found_id: str, by_id: dict[str, corral.Task]) -> None:
    """The task's teammate proposed `found_id` from it and split the task on it; the Lead
    approved it, it completed, and the task then completed knowing it."""
    found = by_id.get(found_id)
    if found is None or found.discovered_from != task_id or not found.proposed_by:
        raise DemoFailed(f"task {task_id} should have discovered {found_id} and proposed it, but the board has no such")
    if found_id not in by_id[task_id].depends_on:
        raise DemoFailed(f"task {task_id} should have been split on {found_id}, which it does not depend on")
    if _payload(by_id[task_id].result).get("after") != found_id:
        raise DemoFailed(f"task {task_id} completed without the result of {found_id}, the prerequisite it found")


@dataclass(frozen=True)
class DemoReport:
    """What a demo run did (returned by `run_demo`, printed as its summary)."""

    run_dir: Path
    tasks: int
    completed: int
    attempts: int
    retried: tuple[str, ...]
    wall_seconds: float
    work_seconds: float
    stats: corral.Stats
    done_by: dict[str, int] = field(default_factory=dict)
    messages: tuple[tuple[str, str], ...] = ()
    plans_approved: tuple[str, ...] = ()
    # (task id, question, answer) for each question a teammate asked the Lead.
    questions: tuple[tuple[str, str, str], ...] = ()
    # Each review decided, in order: (task id, reviewer, round, approved, feedback).
    reviews: tuple[tuple[str, str, int, bool, str], ...] = ()
    # Each proposal the Lead approved: (the task it came from, the teammate, the ids, split or not).
    proposals: tuple[tuple[str, str, tuple[str, ...], bool], ...] = ()
    # What `corral serve --state-dir state/` takes besides to serve the run's board again
    # (" --store DSN --pg-schema S" for PostgreSQL); None when that board was dropped.
    serve_args: str | None = ""
    # The live output the tasks' last attempts wrote, and the artifacts read back.
    output_tasks: int = 0
    output_lines: int = 0
    artifacts: tuple[ArtifactProof, ...] = ()

    @property
    def retries(self) -> int:
        return self.attempts - self.completed

    @property
    def cycles_per_second(self) -> float:
        """Claim-to-finish cycles (every attempt) per second of work."""
        return self.attempts / self.work_seconds if self.work_seconds > 0 else 0.0

    def lines(self) -> list[str]:
        writer = self.stats.writer
        retried = f": {', '.join(self.retried)}" if self.retried else ""
        team = ", ".join(f"{name} {count}" for name, count in sorted(self.done_by.items()))
        messages = "; ".join(f"{sender}: {short(body, 70)!r}" for sender, body in self.messages) or "none"
        plans = ", ".join(self.plans_approved) or "none"
        return [
            f"corral demo: {self.completed}/{self.tasks} tasks completed in {self.wall_seconds:.1f} s wall time",
            f"  attempts    {self.attempts} ({self.retries} retr{'y' if self.retries == 1 else 'ies'}{retried})",
            (
                f"  throughput  {self.cycles_per_second:.1f} cycles/s ({self.attempts} claim-to-finish cycles in "
                f"{self.work_seconds:.2f} s from first claim to last completion)"
            ),
            f"  teammates   tasks done: {team}; every one approved its shutdown and exited 0",
            f"  lead inbox  {len(self.messages)} message(s): {messages}",
            f"  plans       approved: {plans}",
            f"  reviews     {self._reviews()}",
            f"  questions   {self._questions()}",
            f"  discovered  {self._proposals()}",
            (
                f"  output      {self.output_tasks} tasks wrote {self.output_lines} lines as they worked: "
                "`corral tasks output ID` (-f follows), or a task's drawer on the web board"
            ),
            f"  artifacts   {self._artifacts()}",
            (
                f"  writer      queue depth p99 {writer.queue_depth_p99:g}, {writer.commits} commits of "
                f"{writer.jobs} jobs (mean batch {writer.mean_batch_size:.2f}), commit p99 "
                f"{writer.commit_latency_p99_ms:.2f} ms"
            ),
            self._kept(),
        ]

    def _reviews(self) -> str:
        """`changelog: round 1 rejected by cyd ("..."), round 2 approved by cyd`, per task."""
        rounds: dict[str, list[str]] = {}
        for task_id, reviewer, number, approved, feedback in self.reviews:
            why = f" ({short(feedback, 50)!r})" if feedback and not approved else ""
            rounds.setdefault(task_id, []).append(
                f"round {number} {'approved' if approved else 'rejected'} by {reviewer}{why}"
            )
        return "; ".join(f"{task_id}: {', '.join(lines)}" for task_id, lines in rounds.items()) or "none"

    def _questions(self) -> str:
        asked = [
            f"{task_id} asked {short(q, 50)!r}, the lead answered {short(a, 40)!r}" for task_id, q, a in self.questions
        ]
        return "; ".join(asked) or "none"

    def _proposals(self) -> str:
        """`migrate: dee proposed backup-db and split its task on it; the lead approved`."""
        shown = [
            f"{source}: {teammate} proposed {', '.join(ids)}"
            + (" and split its task on it" if split else "")
            + "; the lead approved"
            for source, teammate, ids, split in self.proposals
        ]
        return "; ".join(shown) or "none"

    def _artifacts(self) -> str:
        """`perf: perf-report.json (...) read by ada (publish) and the lead; `corral artifacts get ...``."""
        if not self.artifacts:
            return "none"
        shown = [
            f"{proof.line()}: `corral artifacts get {proof.task_id} {proof.artifact.name}`" for proof in self.artifacts
        ]
        return "; ".join(shown)

    def _kept(self) -> str:
        state = self.run_dir / "state"
        if self.serve_args is None:
            return f"  kept        {self.run_dir} (logs/; state/ served a board that was dropped)"
        return f"  kept        {self.run_dir} (state/: `corral serve --state-dir {state}{self.serve_args}`; logs/)"


def build_report(
    *,
    run_dir: Path,
    tasks: Sequence[corral.Task],
    model: BoardModel,
    stats: corral.Stats,
    wall_seconds: float,
    approved: Sequence[str],
    answered: Sequence[tuple[corral.QuestionAsked, str]] = (),
    reviews: Sequence[corral.ReviewDecided] = (),
    proposals: Sequence[corral.TasksProposed] = (),
    serve_args: str | None = "",
    evidence: Evidence | None = None,
    artifacts: Sequence[ArtifactProof] = (),
) -> DemoReport:
    first, last = model.first_claim, model.last_finish
    work = (last - first) if first is not None and last is not None else 0.0
    return DemoReport(
        run_dir=run_dir,
        tasks=len(tasks),
        completed=sum(1 for task in tasks if task.state is corral.TaskState.COMPLETED),
        attempts=sum(task.attempt for task in tasks),
        retried=tuple(task.id for task in tasks if task.attempt > 1),
        wall_seconds=wall_seconds,
        work_seconds=work,
        stats=stats,
        done_by={mate.name: mate.done for mate in model.mates.values()},
        messages=tuple((event.message.sender, event.message.body) for event in model.messages),
        plans_approved=tuple(approved),
        questions=tuple((asked.task_id, asked.question, answer) for asked, answer in answered),
        reviews=tuple((r.task_id, r.reviewer, r.round, r.approve, r.feedback) for r in reviews),
        proposals=tuple((p.discovered_from, p.teammate, p.task_ids, p.split) for p in proposals),
        serve_args=serve_args,
        output_tasks=evidence.tasks_with_output if evidence is not None else 0,
        output_lines=evidence.output_lines if evidence is not None else 0,
        artifacts=tuple(artifacts),
    )
