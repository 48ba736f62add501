"""The teammate's tools: design §5 as calls, and claims finished by task id alone."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pydantic

import corral

from . import views
from .artifact_tools import put_artifact_tool
from .errors import ToolFailure
from .output_tools import append_output_tool
from .proposals import propose_tool
from .registry import (
    ANY_OBJECT,
    BOOLEAN,
    INTEGER,
    STRING,
    Arguments,
    Count,
    Outcome,
    Progress,
    ToolSpec,
    array,
    obj,
)
from .rendering import TextBudget
from .teammate_link import TeammateLink

__all__ = ["UsageArgument", "teammate_tools"]

# The daemon refuses bigger results (design §7); refused here first, naming the field.
RESULT_MAX_BYTES = 1024 * 1024
TEXT_MAX_CHARS = 64 * 1024
# The daemon's text limit on a question, an answer or a review's feedback: refused here first, naming the field.
TEXT_MAX_BYTES = 64 * 1024
WAIT_MIN_SECONDS, WAIT_MAX_SECONDS = 1, 50
# Listings stop here to stay within a result's text cap; the total says how many there are.
TEAMMATES_LISTED = 100

TaskId = Annotated[str, pydantic.Field(min_length=1, max_length=200)]
KINDS = [
    *("claim", "review", "shutdown_request", "plan_decision", "proposals_decided", "message", "claim_ended"),
    *("idle_timeout", "none"),
]
BLOCKED_BY = ["shutdown_pending", "plan_required", "protocol_unacknowledged", "no_ready_task"]


class UsageArgument(Arguments):
    """What the work spent since the last report."""

    input_tokens: Count = 0
    output_tokens: Count = 0
    cost_micros: Count = 0
    model: Annotated[str, pydantic.Field(max_length=200)] = ""

    def value(self) -> corral.Usage:
        return corral.Usage(self.input_tokens, self.output_tokens, self.cost_micros, self.model)


def _usage(usage: UsageArgument | None) -> corral.Usage | None:
    return usage.value() if usage is not None else None


class NextItemArgs(Arguments):
    wait_seconds: Annotated[int, pydantic.Field(ge=WAIT_MIN_SECONDS, le=WAIT_MAX_SECONDS)] = 20


class GetTaskArgs(Arguments):
    task_id: TaskId
    offset: Annotated[int, pydantic.Field(ge=0)] = 0


TaskStateName = Literal[
    "PENDING", "IN_PROGRESS", "COMPLETED", "FAILED", "CANCELED", "NEEDS_INPUT", "IN_REVIEW", "PROPOSED"
]


class ListTasksArgs(Arguments):
    states: list[TaskStateName] = []
    owner: str = ""
    page_token: str = ""


class NoArgs(Arguments):
    pass


class RenewArgs(Arguments):
    task_id: TaskId
    progress: Annotated[str, pydantic.Field(max_length=1024)] = ""
    progress_fraction: Annotated[float, pydantic.Field(ge=0.0, le=1.0)] | None = None
    usage: UsageArgument | None = None


class CompleteArgs(Arguments):
    task_id: TaskId
    result: str
    usage: UsageArgument | None = None


class FailArgs(Arguments):
    task_id: TaskId
    error: Annotated[str, pydantic.Field(max_length=TEXT_MAX_CHARS)]
    retryable: bool
    usage: UsageArgument | None = None


class ReleaseArgs(Arguments):
    task_id: TaskId


class AskLeadArgs(Arguments):
    task_id: TaskId
    question: Annotated[str, pydantic.Field(min_length=1, max_length=TEXT_MAX_CHARS)]


class SubmitReviewArgs(Arguments):
    task_id: TaskId
    approve: bool
    feedback: Annotated[str, pydantic.Field(max_length=TEXT_MAX_CHARS)] = ""


def verdict_of(approve: bool, feedback: str) -> corral.Verdict:
    """A review's verdict, checked as the daemon checks it (before any call): feedback
    at most 64 KiB of UTF-8, and required to reject."""
    size = len(feedback.encode("utf-8"))
    if size > TEXT_MAX_BYTES:
        raise ToolFailure("INVALID_ARGUMENT", f"feedback: {size} bytes is over the 64 KiB limit; say it shorter")
    if approve:
        return corral.Approve(feedback)
    if not feedback.strip():
        raise ToolFailure(
            "INVALID_ARGUMENT", "feedback: required to reject; say what to change so the author can revise the result"
        )
    return corral.Reject(feedback)


class SendMessageArgs(Arguments):
    to: Annotated[str, pydantic.Field(min_length=1, max_length=200)]
    body: Annotated[str, pydantic.Field(max_length=TEXT_MAX_CHARS)]


class SubmitPlanArgs(Arguments):
    plan: Annotated[str, pydantic.Field(min_length=1, max_length=TEXT_MAX_CHARS)]


class RespondShutdownArgs(Arguments):
    request_id: Annotated[str, pydantic.Field(min_length=1, max_length=200)]
    approve: bool
    reason: Annotated[str, pydantic.Field(max_length=TEXT_MAX_CHARS)]


_PAGE_SIZE = 25


def _finished(verb: str, task: corral.Task) -> Outcome:
    return Outcome(f"task {task.id} {verb}: now {task.state.name}", {"task_id": task.id, "state": task.state.name})


_FINISHED_OUT = obj(["task_id", "state"], task_id=STRING, state=STRING)


def teammate_tools(link: TeammateLink) -> list[ToolSpec]:
    """The tool set of a teammate bridge."""

    async def next_item(args: NextItemArgs, progress: Progress) -> Outcome:
        item = await link.next_item(args.wait_seconds, progress)
        kind = item["kind"]
        if kind == "claim":
            summary = f"claim: task {item['claim']['task_id']}; do it, then complete_task or fail_task"
            if item["claim"].get("answers"):
                summary += " (the lead answered the questions asked on it: see claim.answers)"
            if "rejected_result" in item["claim"]:
                summary += (
                    " (a review rejected its result: revise claim.rejected_result as "
                    "claim.previous_attempt.feedback says)"
                )
        elif kind == "review":
            shown = item["review"]
            summary = (
                f"review: task {shown['task_id']}, round {shown['round']}, the result of {shown['author']}; "
                "answer with submit_review"
            )
        elif kind == "none":
            summary = f"none (blocked_by {item['blocked_by']}): {item['hint']}"
        else:
            summary = f"{kind}: {item.get('hint', 'read it, then call next_item')}"
        return Outcome(summary, item)

    async def get_task(args: GetTaskArgs, progress: Progress) -> Outcome:
        budget = TextBudget()
        found = await link.teammate.get_task(args.task_id)
        view = views.task(found, budget, offset=args.offset)
        out: dict[str, Any] = {"task": view, "truncated": budget.truncated}
        if budget.truncated:
            out["next_offset"] = min(
                part["next_offset"] for part in view.values() if isinstance(part, dict) and "next_offset" in part
            )
        return Outcome(f"task {found.id}: {found.state.name}", out)

    async def list_tasks(args: ListTasksArgs, progress: Progress) -> Outcome:
        tasks, next_token = await link.teammate.list_tasks_page(
            states=[corral.TaskState[name] for name in args.states],
            owner=args.owner,
            page_size=_PAGE_SIZE,
            page_token=args.page_token,
        )
        budget = TextBudget()
        listed = [views.task(t, budget, brief=True) for t in tasks]
        return Outcome(
            f"{len(listed)} task(s)" + ("; more with page_token" if next_token else ""),
            {"tasks": listed, "next_page_token": next_token, "truncated": budget.truncated},
        )

    async def list_teammates(args: NoArgs, progress: Progress) -> Outcome:
        mates = await link.teammate.list_teammates()
        shown = [views.teammate(mate) for mate in mates[:TEAMMATES_LISTED]]
        out = {"teammates": shown, "teammates_total": len(mates), "truncated": len(shown) < len(mates)}
        return Outcome(f"{len(mates)} teammate(s)", out)

    async def renew_lease(args: RenewArgs, progress: Progress) -> Outcome:
        claim = await link.renew(args.task_id, args.progress, args.progress_fraction, _usage(args.usage))
        expire = views.iso(claim.lease_expire_time)
        return Outcome(
            f"lease on {args.task_id} renewed until {expire}",
            {"task_id": args.task_id, "lease_expire_time": expire, "protocol_pending": claim.protocol_pending},
        )

    async def complete_task(args: CompleteArgs, progress: Progress) -> Outcome:
        result = args.result.encode("utf-8")
        if len(result) > RESULT_MAX_BYTES:
            raise ToolFailure(
                "INVALID_ARGUMENT",
                f"result: {len(result)} bytes is over the 1 MiB limit; store it elsewhere, complete with a path",
            )
        return _finished("completed", await link.complete(args.task_id, result, _usage(args.usage)))

    async def fail_task(args: FailArgs, progress: Progress) -> Outcome:
        return _finished("failed", await link.fail(args.task_id, args.error, args.retryable, _usage(args.usage)))

    async def release_task(args: ReleaseArgs, progress: Progress) -> Outcome:
        return _finished("released", await link.release(args.task_id))

    async def ask_lead(args: AskLeadArgs, progress: Progress) -> Outcome:
        if not args.question.strip():
            raise ToolFailure(
                "INVALID_ARGUMENT", "question: must not be empty; ask the lead something, or finish the task"
            )
        size = len(args.question.encode("utf-8"))
        if size > TEXT_MAX_BYTES:
            raise ToolFailure("INVALID_ARGUMENT", f"question: {size} bytes is over the 64 KiB limit; ask it shorter")
        task = await link.ask(args.task_id, args.question)
        state = task.state.name
        hint = (
            "your claim on it ended; the lead answers, then the task is claimed again and that claim's answers "
            "carry the answer; call next_item for other work meanwhile"
        )
        return Outcome(
            f"task {task.id} waits for the lead's answer ({state}): {hint}",
            {"task_id": task.id, "state": state, "hint": hint},
        )

    async def submit_review(args: SubmitReviewArgs, progress: Progress) -> Outcome:
        verdict = verdict_of(args.approve, args.feedback)
        task = await link.submit_review(args.task_id, verdict)
        said = "approved" if args.approve else "rejected"
        return Outcome(
            f"review of {task.id} {said}: now {task.state.name}",
            {"task_id": task.id, "state": task.state.name, "approved": args.approve},
        )

    async def send_message(args: SendMessageArgs, progress: Progress) -> Outcome:
        recipients = await link.teammate.send_message(args.to, args.body)
        return Outcome(f"sent to {', '.join(recipients) or 'nobody'}", {"recipients": recipients})

    async def submit_plan(args: SubmitPlanArgs, progress: Progress) -> Outcome:
        plan_id = await link.teammate.submit_plan(args.plan)
        return Outcome(f"plan {plan_id} submitted; call next_item for the decision", {"plan_id": plan_id})

    async def respond_shutdown(args: RespondShutdownArgs, progress: Progress) -> Outcome:
        await link.respond_shutdown(args.request_id, args.approve, args.reason)
        then = "your claims were released: end your session" if args.approve else "you may take work again"
        return Outcome(f"shutdown {'approved' if args.approve else 'rejected'}; {then}", {"approved": args.approve})

    async def my_status(args: NoArgs, progress: Progress) -> Outcome:
        blocked, hint = await link.gate()
        held = link.claims_status()
        out: dict[str, Any] = {
            "name": link.identity.name,
            "roles": list(link.identity.roles),
            "held_claims": held,
            "gate": blocked,
            "hint": hint,
            "renewing_leases": link.renewing,
        }
        return Outcome(f"{link.identity.name}: gate {blocked}; holds {len(held)} claim(s)", out)

    return [
        ToolSpec(
            "next_item",
            "Wait up to wait_seconds (1-50) for your next item, in the daemon's order: a held claim re-sent, "
            "shutdown_request, plan_decision, proposals_decided (the Lead's decision on tasks you proposed: "
            "task_ids, approve, feedback), message, claim, review, claim_ended, idle_timeout, or none with "
            "blocked_by and a hint. A claim of a task asked about before carries answers: each question with the "
            "Lead's answer; a task you split (propose_tasks) comes back with the proposed tasks' results in "
            "dependency_results; dependency_artifacts names the files its dependencies attached (name, media "
            "type, size, sha256: references, not the bytes); a claim whose result a review rejected carries "
            "rejected_result and, in previous_attempt, the reviewer's feedback. A review is another teammate's "
            "result for you to judge "
            "(answer with submit_review). Call it again after handling each item (that acknowledges it). Always "
            "call this instead of picking tasks yourself.",
            NextItemArgs,
            obj(
                ["kind"],
                kind={"type": "string", "enum": KINDS},
                claim=ANY_OBJECT,
                review=ANY_OBJECT,
                shutdown_request=ANY_OBJECT,
                plan_decision=ANY_OBJECT,
                proposals_decided=ANY_OBJECT,
                message=ANY_OBJECT,
                claim_ended=ANY_OBJECT,
                idle_timeout=ANY_OBJECT,
                blocked_by={"type": "string", "enum": BLOCKED_BY},
                hint=STRING,
            ),
            next_item,
        ),
        ToolSpec(
            "get_task",
            "One task by id with its description, payload and result (labelled with their author); long "
            "texts are cut at 32 KiB: page with offset=next_offset.",
            GetTaskArgs,
            obj(["task"], task=ANY_OBJECT, truncated=BOOLEAN, next_offset=INTEGER),
            get_task,
            read_only=True,
        ),
        ToolSpec(
            "list_tasks",
            "A page of tasks (id, state, owner, title), filtered by states and owner; pass next_page_token "
            "as page_token for the next page.",
            ListTasksArgs,
            obj(["tasks", "next_page_token"], tasks=array(ANY_OBJECT), next_page_token=STRING, truncated=BOOLEAN),
            list_tasks,
            read_only=True,
        ),
        ToolSpec(
            "list_teammates",
            "Every teammate with roles, status and held task ids.",
            NoArgs,
            obj(["teammates"], teammates=array(ANY_OBJECT), teammates_total=INTEGER, truncated=BOOLEAN),
            list_teammates,
            read_only=True,
        ),
        ToolSpec(
            "renew_lease",
            "Extend the lease on a task you hold, optionally reporting progress text (at most 1 KiB), "
            "progress_fraction (0-1) and usage. The bridge renews held leases by itself while you keep "
            "calling corral tools; call this to report progress.",
            RenewArgs,
            obj(["task_id"], task_id=STRING, lease_expire_time=STRING, protocol_pending=BOOLEAN),
            renew_lease,
            idempotent=True,
        ),
        ToolSpec(
            "complete_task",
            "Finish a task you hold with its result (text, at most 1 MiB) and optional usage. Repeating it "
            "returns the stored outcome.",
            CompleteArgs,
            _FINISHED_OUT,
            complete_task,
            idempotent=True,
        ),
        ToolSpec(
            "fail_task",
            "Report that a task you hold failed; retryable=true lets another attempt run while attempts remain.",
            FailArgs,
            _FINISHED_OUT,
            fail_task,
        ),
        ToolSpec(
            "release_task",
            "Give a task you hold back to the board without using up an attempt.",
            ReleaseArgs,
            _FINISHED_OUT,
            release_task,
            idempotent=True,
        ),
        ToolSpec(
            "ask_lead",
            "Ask the Lead a question about a task you hold, when you cannot go on without the answer (the "
            "question: text, at most 64 KiB). Your claim ends (no attempt is used) and the task waits, "
            "NEEDS_INPUT, for the Lead's answer; then it is claimed again, and that claim's answers carry every "
            "question asked on the task with its answer. Call next_item after it.",
            AskLeadArgs,
            obj(["task_id", "state"], task_id=STRING, state=STRING, hint=STRING),
            ask_lead,
        ),
        propose_tool(link),
        ToolSpec(
            "submit_review",
            "Answer a review next_item gave you (kind review: the result of another teammate's task): "
            "approve=true completes the task with that result; approve=false sends it back to its author for "
            "rework, and feedback (required then, at most 64 KiB) says what to change.",
            SubmitReviewArgs,
            obj(["task_id", "state", "approved"], task_id=STRING, state=STRING, approved=BOOLEAN),
            submit_review,
        ),
        append_output_tool(link),
        put_artifact_tool(link),
        ToolSpec(
            "send_message",
            'Send a message to "lead", a teammate by name, or "*" (every teammate).',
            SendMessageArgs,
            obj(["recipients"], recipients=array(STRING)),
            send_message,
        ),
        ToolSpec(
            "submit_plan",
            "Submit a plan for the Lead to decide; the decision comes through next_item.",
            SubmitPlanArgs,
            obj(["plan_id"], plan_id=STRING),
            submit_plan,
        ),
        ToolSpec(
            "respond_shutdown",
            "Answer a shutdown_request: approve releases your claims and ends your work; reject lets you go on.",
            RespondShutdownArgs,
            obj(["approved"], approved=BOOLEAN),
            respond_shutdown,
        ),
        ToolSpec(
            "my_status",
            "Your name, roles, the claims you hold with lease time left, and which gate (if any) keeps work away.",
            NoArgs,
            obj(
                ["name", "roles", "held_claims", "gate"],
                name=STRING,
                roles=array(STRING),
                held_claims=array(ANY_OBJECT),
                gate=STRING,
                hint=STRING,
                renewing_leases=BOOLEAN,
            ),
            my_status,
            read_only=True,
        ),
    ]
