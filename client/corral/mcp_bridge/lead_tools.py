"""The Lead's tools: the board, the team, plans and shutdowns, and a long poll over Watch."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
import json
import logging
import os
import time
from pathlib import Path
from typing import Annotated, Any

import pydantic

import corral
from corral import aio

from . import views
from .artifact_tools import get_artifact_tool
from .errors import ToolFailure
from .output_tools import read_output_tool
from .proposals import proposal_lead_tools, proposals_waiting
from .registry import ANY_OBJECT, BOOLEAN, INTEGER, STRING, Arguments, Count, Outcome, Progress, ToolSpec, array, obj
from .rendering import TextBudget
from .snippets import mcp_config_snippet
from .task_specs import TaskArgument, explain_refusal, specs_of
from .teammate_tools import (
    TEAMMATES_LISTED,
    TEXT_MAX_BYTES,
    TEXT_MAX_CHARS,
    WAIT_MAX_SECONDS,
    WAIT_MIN_SECONDS,
    SendMessageArgs,
    verdict_of,
)

__all__ = ["LeadLink", "lead_tools"]

_log = logging.getLogger("corral.mcp")

Name = Annotated[str, pydantic.Field(min_length=1, max_length=200)]
_RECENT_FAILURES = 10
_PLANS_KEPT = 1000
# board_summary lists at most this many tasks waiting for an answer; the count says how many there are.
_QUESTIONS_LISTED = 20
# ... and at most this many results waiting for the Lead's review, found among this many tasks IN_REVIEW
# (those a reviewer role reviews are not the Lead's to decide, though it may).
_REVIEWS_LISTED = 20
_REVIEWS_SCANNED = 1000
_PROGRESS_EVERY = 10.0
# A result's share of the 32 KiB of model-visible text that listings may fill.
_EVENTS_MAX_BYTES = 24 * 1024
# How long a watch_events call that has found events waits for the next one. The
# daemon sends a backlog in pages with a database read between them, and on a
# busy host that read takes well over 50 ms: a shorter wait cut long backlogs
# into short pages.
_NEXT_EVENT_WAIT = 0.25


class CreateTasksArgs(Arguments):
    tasks: Annotated[list[TaskArgument], pydantic.Field(min_length=1, max_length=10_000)]
    request_id: Annotated[str, pydantic.Field(max_length=200)] = ""


class CancelTasksArgs(Arguments):
    ids: Annotated[list[Name], pydantic.Field(min_length=1)]


class AnswerQuestionArgs(Arguments):
    task_id: Name
    answer: Annotated[str, pydantic.Field(max_length=TEXT_MAX_CHARS)]


class ReviewTaskArgs(Arguments):
    task_id: Name
    approve: bool
    feedback: Annotated[str, pydantic.Field(max_length=TEXT_MAX_CHARS)] = ""


class RevokeClaimArgs(Arguments):
    task_id: Name
    reason: Annotated[str, pydantic.Field(max_length=TEXT_MAX_CHARS)]


class SetBudgetArgs(Arguments):
    teammate: Name
    max_cost_micros: Count = 0
    max_tokens: Count = 0


class SetConcurrencyLimitArgs(Arguments):
    key: Name
    limit: Annotated[int, pydantic.Field(ge=0, le=10_000)]


class DecidePlanArgs(Arguments):
    plan_id: Name
    approve: bool
    feedback: Annotated[str, pydantic.Field(max_length=TEXT_MAX_CHARS)]


class RequestShutdownArgs(Arguments):
    name: Name
    reason: Annotated[str, pydantic.Field(max_length=TEXT_MAX_CHARS)]
    grace_seconds: Annotated[float, pydantic.Field(ge=1, le=86_400)] | None = None


class NoArgs(Arguments):
    pass


class WatchEventsArgs(Arguments):
    after_seq: Count
    wait_seconds: Annotated[int, pydantic.Field(ge=WAIT_MIN_SECONDS, le=WAIT_MAX_SECONDS)] = 20
    limit: Annotated[int, pydantic.Field(ge=1, le=1000)] = 100


class AddTeammateArgs(Arguments):
    name: Annotated[str, pydantic.Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
    roles: list[Name] = []
    require_plan_approval: bool = False


class LeadLink:
    """A Lead bridge's state: its client, and a Watch follower that keeps what
    board_summary reports (plans waiting for a decision, recent failures, who asked
    each question still waiting for an answer)."""

    def __init__(self, lead: aio.Lead, *, mint_dir: Path | None) -> None:
        self.lead = lead
        self.mint_dir = mint_dir
        self.plans: collections.OrderedDict[str, corral.PlanSubmitted] = collections.OrderedDict()
        self.failures: collections.deque[corral.Task] = collections.deque(maxlen=_RECENT_FAILURES)
        self.askers: collections.OrderedDict[str, str] = collections.OrderedDict()  # task id -> who asked
        self._follower = asyncio.create_task(self._follow(), name="corral-mcp-lead-watch")

    async def close(self) -> None:
        self._follower.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._follower
        await self.lead.close()

    async def _follow(self) -> None:
        after = 0
        while True:
            try:
                async with contextlib.aclosing(self.lead.watch(after)) as events:
                    async for event in events:
                        after = event.seq
                        self._note(event)
            except corral.CorralError as exc:
                _log.info("watch for board_summary broke (%s); following again", exc)
            await asyncio.sleep(1.0)

    def _note(self, event: corral.WatchEvent) -> None:
        if isinstance(event, corral.PlanSubmitted):
            self.plans[event.plan_id] = event
            while len(self.plans) > _PLANS_KEPT:
                self.plans.popitem(last=False)
        elif isinstance(event, corral.PlanDecided):
            self.plans.pop(event.plan_id, None)  # decided here or by any other client
        elif isinstance(event, corral.QuestionAsked):
            self.askers[event.task_id] = event.asked_by
            while len(self.askers) > _PLANS_KEPT:
                self.askers.popitem(last=False)
        elif isinstance(event, corral.TaskChanged):  # answered, or canceled while it waited
            self.askers.pop(event.task.id, None)
            if event.task.state is corral.TaskState.FAILED:
                self.failures.append(event.task)

    async def watch_events(self, after_seq: int, wait_seconds: float, limit: int, progress: Progress) -> list[Any]:
        """Events after `after_seq`: waits up to `wait_seconds` for the first, then takes
        what is already there (up to `limit`)."""
        arrived: asyncio.Queue[corral.WatchEvent] = asyncio.Queue(maxsize=limit)

        async def read() -> None:
            async with contextlib.aclosing(self.lead.watch(after_seq)) as events:
                async for event in events:
                    await arrived.put(event)

        reader = asyncio.create_task(read(), name="corral-mcp-watch-events")
        found: list[corral.WatchEvent] = []
        deadline = time.monotonic() + wait_seconds
        try:
            while len(found) < limit:
                left = deadline - time.monotonic()
                wait = _NEXT_EVENT_WAIT if found else min(left, _PROGRESS_EVERY)
                if wait <= 0:
                    break
                try:
                    found.append(await asyncio.wait_for(arrived.get(), wait))
                except TimeoutError:
                    if found or deadline - time.monotonic() <= 0:
                        break
                    if reader.done():
                        reader.result()  # raises the stream's error
                        break
                    await progress(f"waiting for events: {deadline - time.monotonic():.0f} s left")
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, corral.CorralError):
                await reader
        return found


def lead_tools(link: LeadLink) -> list[ToolSpec]:
    """The tool set of a Lead bridge (add_teammate only with a mint directory)."""
    lead = link.lead

    async def create_tasks(args: CreateTasksArgs, progress: Progress) -> Outcome:
        specs = specs_of(args.tasks)
        try:
            created = await lead.create_tasks(specs, request_id=args.request_id or None)
        except corral.CorralError as exc:
            failure = explain_refusal(exc, specs)
            if failure is not None:
                raise failure from None
            raise
        ids = [task.id for task in created]
        return Outcome(f"{len(ids)} task(s) on the board", {"task_ids": ids})

    async def cancel_tasks(args: CancelTasksArgs, progress: Progress) -> Outcome:
        canceled = [task.id for task in await lead.cancel_tasks(args.ids)]
        return Outcome(f"{len(canceled)} task(s) canceled", {"canceled": canceled})

    async def revoke_claim(args: RevokeClaimArgs, progress: Progress) -> Outcome:
        task = await lead.revoke_claim(args.task_id, args.reason)
        return Outcome(
            f"claim on {task.id} revoked; now {task.state.name}", {"task_id": task.id, "state": task.state.name}
        )

    async def answer_question(args: AnswerQuestionArgs, progress: Progress) -> Outcome:
        size = len(args.answer.encode("utf-8"))
        if size > TEXT_MAX_BYTES:
            raise ToolFailure("INVALID_ARGUMENT", f"answer: {size} bytes is over the 64 KiB limit; answer shorter")
        task = await lead.answer_question(args.task_id, args.answer)
        link.askers.pop(task.id, None)
        state = task.state.name
        return Outcome(
            f"answered the question of {task.id}; now {state}: its next claim carries the answer",
            {"task_id": task.id, "state": state},
        )

    async def review_task(args: ReviewTaskArgs, progress: Progress) -> Outcome:
        verdict = verdict_of(args.approve, args.feedback)
        task = await lead.review_task(args.task_id, verdict)
        said = "approved" if args.approve else "rejected"
        return Outcome(
            f"review of {task.id} {said}; now {task.state.name}",
            {"task_id": task.id, "state": task.state.name, "review_rounds": task.review_rounds},
        )

    async def lead_reviews() -> tuple[list[corral.Task], int, bool]:
        """Tasks IN_REVIEW whose reviewer is the Lead: the first listed, how many were found,
        and whether the search stopped before the end."""
        found: list[corral.Task] = []
        count = scanned = 0
        async with contextlib.aclosing(lead.list_tasks(states=[corral.TaskState.IN_REVIEW])) as tasks:
            async for task in tasks:
                scanned += 1
                if task.review is not None and not task.review.reviewer_role:
                    count += 1
                    if len(found) < _REVIEWS_LISTED:
                        found.append(task)
                if scanned >= _REVIEWS_SCANNED:
                    return found, count, True
        return found, count, False

    async def set_budget(args: SetBudgetArgs, progress: Progress) -> Outcome:
        budget = await lead.set_budget(args.teammate, max_cost_micros=args.max_cost_micros, max_tokens=args.max_tokens)
        out = {"teammate": args.teammate, "max_cost_micros": budget.max_cost_micros, "max_tokens": budget.max_tokens}
        return Outcome(f"budget of {args.teammate} set", out)

    async def set_concurrency_limit(args: SetConcurrencyLimitArgs, progress: Progress) -> Outcome:
        limit = await lead.set_concurrency_limit(args.key, args.limit)
        return Outcome(f"key {limit.key}: at most {limit.limit}", {"key": limit.key, "limit": limit.limit})

    async def decide_plan(args: DecidePlanArgs, progress: Progress) -> Outcome:
        await lead.decide_plan(args.plan_id, approve=args.approve, feedback=args.feedback)
        link.plans.pop(args.plan_id, None)
        return Outcome(f"plan {args.plan_id} {'approved' if args.approve else 'rejected'}", {"approved": args.approve})

    async def request_shutdown(args: RequestShutdownArgs, progress: Progress) -> Outcome:
        grace = datetime.timedelta(seconds=args.grace_seconds) if args.grace_seconds is not None else None
        request_id = await lead.request_shutdown(args.name, reason=args.reason, grace=grace)
        return Outcome(f"shutdown requested of {args.name}", {"request_id": request_id})

    async def send_message(args: SendMessageArgs, progress: Progress) -> Outcome:
        recipients = await lead.send_message(args.to, args.body)
        return Outcome(f"sent to {', '.join(recipients) or 'nobody'}", {"recipients": recipients})

    async def board_summary(args: NoArgs, progress: Progress) -> Outcome:
        stats = await lead.get_stats()
        by_state = {state.name: count for state, count in stats.tasks_by_state.items()}
        asked, more_asked = await lead.list_tasks_page(
            states=[corral.TaskState.NEEDS_INPUT], page_size=_QUESTIONS_LISTED
        )
        reviews, reviews_total, more_reviews = await lead_reviews()
        mates = await lead.list_teammates()
        budget = TextBudget()
        proposals, more_proposals = await proposals_waiting(lead, budget)
        waiting = list(link.plans.values())[-20:]
        out: dict[str, Any] = {
            "tasks_by_state": by_state,
            "teammates": [views.teammate(mate) for mate in mates[:TEAMMATES_LISTED]],
            "teammates_total": len(mates),
            "plans_waiting": [
                {
                    "plan_id": plan.plan_id,
                    "author": plan.author,
                    "plan": budget.labelled(plan.plan, source=plan.author, role="teammate"),
                }
                for plan in waiting
            ],
            "questions_waiting": [
                {
                    "task_id": t.id,
                    "question": budget.labelled(t.question, source=link.askers.get(t.id, "teammate"), role="teammate"),
                }
                for t in asked
            ],
            "questions_waiting_total": stats.tasks_by_state.get(corral.TaskState.NEEDS_INPUT, len(asked)),
            "reviews_waiting": [
                {
                    "task_id": t.id,
                    "round": t.review_rounds + 1,
                    "result": budget.labelled(t.result, source=f"task {t.id}", role="teammate"),
                }
                for t in reviews
            ],
            "reviews_waiting_total": reviews_total,
            "proposals_waiting": proposals,
            "proposals_waiting_total": stats.tasks_by_state.get(corral.TaskState.PROPOSED, len(proposals)),
            "recent_failures": [
                {"task_id": t.id, "error": budget.labelled(t.error, source=t.owner or "teammate", role="teammate")}
                for t in link.failures
            ],
            "truncated": budget.truncated or bool(more_asked) or more_reviews or more_proposals,
        }
        counts = ", ".join(f"{n} {s}" for s, n in by_state.items() if n) or "no tasks"
        summary = f"{counts}; {len(mates)} teammate(s); {len(waiting)} plan(s) waiting"
        if asked:
            summary += f"; {out['questions_waiting_total']} question(s) waiting: answer them with answer_question"
        if reviews:
            summary += f"; {reviews_total} result(s) waiting for your review: decide them with review_task"
        if proposals:
            total = out["proposals_waiting_total"]
            summary += f"; {total} proposed task(s) waiting: decide them with decide_proposals"
        return Outcome(summary, out)

    async def watch_events(args: WatchEventsArgs, progress: Progress) -> Outcome:
        events = await link.watch_events(args.after_seq, args.wait_seconds, args.limit, progress)
        budget = TextBudget()
        shown: list[dict[str, Any]] = []
        next_seq, size = args.after_seq, 0
        for event in events:
            view = views.event(event, budget)
            size += len(json.dumps(view, ensure_ascii=False))
            if shown and size > _EVENTS_MAX_BYTES:
                budget.truncated = True  # the rest comes with the next call, from next_after_seq
                break
            shown.append(view)
            next_seq = event.seq
        out = {"events": shown, "next_after_seq": next_seq, "truncated": budget.truncated}
        return Outcome(f"{len(shown)} event(s); continue with after_seq={next_seq}", out)

    async def add_teammate(args: AddTeammateArgs, progress: Progress) -> Outcome:
        assert link.mint_dir is not None
        path = link.mint_dir / f"{args.name}.token"
        if path.exists():  # checked before minting: a credential nobody can read is no use
            raise ToolFailure("ALREADY_EXISTS", f"{path} exists; remove it or choose another name")
        new = await lead.add_teammate(args.name, roles=args.roles, require_plan_approval=args.require_plan_approval)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(new.token + "\n")
        snippet = mcp_config_snippet(new.name, lead.address, token_file=path)
        return Outcome(
            f"teammate {new.name} added; its token is in {path} (0600)",
            {"name": new.name, "token_file": str(path), "mcp_config": snippet},
        )

    tools = [
        ToolSpec(
            "create_tasks",
            "Add tasks atomically (all or nothing), with the fields of a DAG file: id, title, description, "
            "payload, depends_on, priority, max_attempts, lease_seconds, required_role, not_before, "
            "retry_backoff_seconds, retry_backoff_max_seconds, concurrency_key, attempt_timeout_seconds, review "
            "({reviewer_role, max_rounds}: the result needs an approved review before it is COMPLETED; "
            "reviewer_role empty: you review it with review_task), resources and shared_resources (path leases: "
            "lists of paths such as repo:web/src/api the task edits, held exclusively, or only reads, held shared; "
            "a task waits while another in progress holds an overlapping path). "
            "A retry with the same request_id returns the same tasks.",
            CreateTasksArgs,
            obj(["task_ids"], task_ids=array(STRING)),
            create_tasks,
        ),
        ToolSpec(
            "cancel_tasks",
            "Cancel tasks and, transitively, their dependents.",
            CancelTasksArgs,
            obj(["canceled"], canceled=array(STRING)),
            cancel_tasks,
        ),
        ToolSpec(
            "revoke_claim",
            "Take a task's live claim from its holder; the task is PENDING again.",
            RevokeClaimArgs,
            obj(["task_id", "state"], task_id=STRING, state=STRING),
            revoke_claim,
        ),
        ToolSpec(
            "answer_question",
            "Answer the question of a task waiting for you (NEEDS_INPUT; board_summary lists them with their "
            "questions, watch_events shows question_asked): the answer is text, at most 64 KiB. The task is "
            "PENDING again, and its next claim carries every question asked on it with its answer.",
            AnswerQuestionArgs,
            obj(["task_id", "state"], task_id=STRING, state=STRING),
            answer_question,
        ),
        ToolSpec(
            "review_task",
            "Decide the review of a task IN_REVIEW (board_summary lists those waiting for you, with their "
            "results; watch_events shows review_decided): approve=true completes it with its result; "
            "approve=false sends it back for rework, and feedback (required then, at most 64 KiB) says what to "
            "change; the rejection that reaches the task's max_rounds fails it. A review a teammate holds is "
            "taken from it.",
            ReviewTaskArgs,
            obj(["task_id", "state"], task_id=STRING, state=STRING, review_rounds=INTEGER),
            review_task,
        ),
        ToolSpec(
            "set_budget",
            'Set a teammate\'s budget ("*" for the default); 0 means no limit on that measure.',
            SetBudgetArgs,
            obj(["teammate"], teammate=STRING, max_cost_micros=INTEGER, max_tokens=INTEGER),
            set_budget,
            idempotent=True,
        ),
        ToolSpec(
            "set_concurrency_limit",
            "At most `limit` tasks with this concurrency key in progress at once; 0 removes the limit.",
            SetConcurrencyLimitArgs,
            obj(["key", "limit"], key=STRING, limit=INTEGER),
            set_concurrency_limit,
            idempotent=True,
        ),
        ToolSpec(
            "decide_plan",
            "Approve or reject a submitted plan (plan ids come from board_summary or watch_events).",
            DecidePlanArgs,
            obj(["approved"], approved=BOOLEAN),
            decide_plan,
        ),
        ToolSpec(
            "request_shutdown",
            "Ask a teammate to stop; if it has not answered within grace_seconds it is removed.",
            RequestShutdownArgs,
            obj(["request_id"], request_id=STRING),
            request_shutdown,
        ),
        ToolSpec(
            "send_message",
            'Send a message to a teammate by name, or "*" (every teammate).',
            SendMessageArgs,
            obj(["recipients"], recipients=array(STRING)),
            send_message,
        ),
        ToolSpec(
            "board_summary",
            "Tasks by state, teammates, plans waiting for a decision, questions waiting for your answer "
            "(NEEDS_INPUT tasks, answered with answer_question), results waiting for your review (IN_REVIEW "
            "tasks the Lead reviews, decided with review_task), tasks teammates proposed (PROPOSED, with who "
            "proposed each and from which task, decided with decide_proposals) and recent failures.",
            NoArgs,
            obj(
                [
                    "tasks_by_state",
                    "teammates",
                    "plans_waiting",
                    "questions_waiting",
                    "reviews_waiting",
                    "proposals_waiting",
                    "recent_failures",
                ],
                tasks_by_state=ANY_OBJECT,
                teammates=array(ANY_OBJECT),
                teammates_total=INTEGER,
                plans_waiting=array(ANY_OBJECT),
                questions_waiting=array(ANY_OBJECT),
                questions_waiting_total=INTEGER,
                reviews_waiting=array(ANY_OBJECT),
                reviews_waiting_total=INTEGER,
                proposals_waiting=array(ANY_OBJECT),
                proposals_waiting_total=INTEGER,
                recent_failures=array(ANY_OBJECT),
                truncated=BOOLEAN,
            ),
            board_summary,
            read_only=True,
        ),
        ToolSpec(
            "watch_events",
            "Board events after after_seq (task changes, teammates, messages to the Lead, plans, questions "
            "asked and answered, reviews decided, tasks proposed and proposals decided, artifacts attached, "
            "shutdown answers): waits up to wait_seconds (1-50) for the first; continue with next_after_seq.",
            WatchEventsArgs,
            obj(["events", "next_after_seq"], events=array(ANY_OBJECT), next_after_seq=INTEGER, truncated=BOOLEAN),
            watch_events,
            read_only=True,
        ),
    ]
    tools += proposal_lead_tools(lead)
    tools.append(read_output_tool(lead))
    tools.append(get_artifact_tool(lead))
    if link.mint_dir is not None:
        tools.append(
            ToolSpec(
                "add_teammate",
                "Mint a teammate credential: the token is written to a 0600 file in the mint directory and "
                "never shown; returns its path and an MCP configuration that reads it.",
                AddTeammateArgs,
                obj(["name", "token_file", "mcp_config"], name=STRING, token_file=STRING, mcp_config=ANY_OBJECT),
                add_teammate,
            )
        )
    return tools
