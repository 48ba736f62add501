"""Discovered work (issue #34) as tools: a teammate proposes tasks from the task it
holds, and may split that task on them; the Lead decides proposals, adds dependencies
to tasks on the board and sets who may propose how. board_summary lists the
proposals waiting through `proposals_waiting`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pydantic

import corral
from corral import aio

from .errors import ToolFailure, failure_from_error
from .registry import ANY_OBJECT, BOOLEAN, STRING, Arguments, Outcome, Progress, ToolSpec, array, obj
from .rendering import TextBudget
from .task_specs import TaskArgument, explain_refusal, specs_of
from .teammate_link import TeammateLink

__all__ = ["PROPOSALS_LISTED", "proposal_lead_tools", "proposals_waiting", "propose_tool"]

Name = Annotated[str, pydantic.Field(min_length=1, max_length=200)]
# The daemon's limits: refused here first, naming the field.
PROPOSE_MAX_TASKS = 100
DECIDE_MAX_TASKS = 1000
FEEDBACK_MAX_CHARS = 64 * 1024
# board_summary lists at most this many proposed tasks; proposals_waiting_total counts them all.
PROPOSALS_LISTED = 20


class ProposeTasksArgs(Arguments):
    tasks: Annotated[list[TaskArgument], pydantic.Field(min_length=1, max_length=PROPOSE_MAX_TASKS)]
    task_id: Annotated[str, pydantic.Field(max_length=200)] = ""
    block_current_task: bool = False


class DecideProposalsArgs(Arguments):
    task_ids: Annotated[list[Name], pydantic.Field(min_length=1, max_length=DECIDE_MAX_TASKS)]
    approve: bool
    feedback: Annotated[str, pydantic.Field(max_length=FEEDBACK_MAX_CHARS)] = ""


class AddDependenciesArgs(Arguments):
    task_id: Name
    depends_on: Annotated[list[Name], pydantic.Field(min_length=1, max_length=DECIDE_MAX_TASKS)]


class SetTaskCreationArgs(Arguments):
    teammate: Name
    policy: Literal["propose", "allow", "deny"]


# ---------------------------------------------------------------- the teammate's


def _propose_failure(exc: corral.CorralError, specs: tuple[corral.TaskSpec, ...], source: str) -> ToolFailure:
    """A refused proposal, said in the tool's terms; nothing was written, the claim is still held."""
    if isinstance(exc, corral.PermissionDenied):
        failure = ToolFailure(
            "PERMISSION_DENIED",
            f"{exc.details}; nothing was proposed: go on without it, or tell the Lead with send_message",
        )
    else:
        failure = explain_refusal(exc, specs) or failure_from_error(exc)
    message = failure.message.replace("block_claimed_task", "block_current_task")
    if source:
        message += f" (nothing was proposed; you still hold task {source!r})"
    return ToolFailure(failure.reason, message)


def propose_tool(link: TeammateLink) -> ToolSpec:
    """propose_tasks, for a teammate bridge."""

    async def propose_tasks(args: ProposeTasksArgs, progress: Progress) -> Outcome:
        specs = specs_of(args.tasks)
        source = link.proposal_source(args.task_id, args.block_current_task)
        try:
            ids = await link.propose(specs, source, args.block_current_task)
        except corral.CorralError as exc:
            raise _propose_failure(exc, specs, source) from None
        waiting = await _waiting_for_lead(link.teammate, ids[0])
        out: dict[str, Any] = {"task_ids": ids, "discovered_from": source, "split": args.block_current_task}
        if waiting is not None:
            out["waiting_for_lead"] = waiting
        landed = "they wait for the Lead's decision (next_item brings proposals_decided)" if waiting else "PENDING"
        if args.block_current_task:
            hint = (
                f"your claim on {source} ended (no attempt used): it waits for the tasks proposed and comes back, "
                "to you or another teammate, with their results in dependency_results; call next_item"
            )
            summary = f"task {source} split on {', '.join(ids)} ({landed}); {hint}"
        else:
            hint = f"go on with task {source}" if source else "call next_item for work"
            summary = f"{len(ids)} task(s) proposed ({landed}); {hint}"
        out["hint"] = hint
        return Outcome(summary, out)

    return ToolSpec(
        "propose_tasks",
        "Propose tasks you discovered while working (1-100, with create_tasks' fields: id, title, description, "
        "payload, depends_on (tasks on the board or in this list), priority (at most your task's), "
        "required_role, ...; ids must be new). They come from the task next_item gave you (task_id: which one, "
        "when you hold several; none held: from no task). As the Lead's policy for you says they wait, PROPOSED, "
        "for the Lead's decision (next_item brings proposals_decided), or are PENDING at once, or are refused. "
        "block_current_task=true splits your task instead of going on with it: it waits for the proposed tasks, "
        "your claim on it ends (no attempt used), and its next claim carries their results in "
        "dependency_results.",
        ProposeTasksArgs,
        obj(
            ["task_ids", "discovered_from", "split"],
            task_ids=array(STRING),
            discovered_from=STRING,
            split=BOOLEAN,
            waiting_for_lead=BOOLEAN,
            hint=STRING,
        ),
        propose_tasks,
    )


async def _waiting_for_lead(teammate: aio.Teammate, task_id: str) -> bool | None:
    """Whether the tasks just proposed wait for the Lead (None: the daemon did not say)."""
    try:
        return (await teammate.get_task(task_id)).state is corral.TaskState.PROPOSED
    except corral.CorralError:
        return None


# ---------------------------------------------------------------- the Lead's


async def proposals_waiting(lead: aio.Lead, budget: TextBudget) -> tuple[list[dict[str, Any]], bool]:
    """The first PROPOSED tasks, each with who proposed it and from which task; and
    whether there are more."""
    found, more = await lead.list_tasks_page(states=[corral.TaskState.PROPOSED], page_size=PROPOSALS_LISTED)
    shown = [
        {
            "task_id": t.id,
            "proposed_by": t.proposed_by,
            "discovered_from": t.discovered_from,
            "depends_on": list(t.depends_on),
            "priority": t.priority,
            "title": budget.labelled(t.title, source=t.proposed_by or "teammate", role="teammate"),
        }
        for t in found
    ]
    return shown, bool(more)


_POLICIES = {
    "propose": corral.TaskCreationPolicy.PROPOSE,
    "allow": corral.TaskCreationPolicy.ALLOW,
    "deny": corral.TaskCreationPolicy.DENY,
}


def proposal_lead_tools(lead: aio.Lead) -> list[ToolSpec]:
    """decide_proposals, add_dependencies and set_task_creation, for a Lead bridge."""

    async def decide_proposals(args: DecideProposalsArgs, progress: Progress) -> Outcome:
        decided = await lead.decide_proposals(args.task_ids, args.approve, args.feedback)
        tasks = [{"task_id": t.id, "state": t.state.name} for t in decided]
        said = "approved" if args.approve else "rejected"
        return Outcome(f"{len(args.task_ids)} proposal(s) {said}; {len(decided)} task(s) changed", {"tasks": tasks})

    async def add_dependencies(args: AddDependenciesArgs, progress: Progress) -> Outcome:
        task = await lead.add_dependencies(args.task_id, args.depends_on)
        out = {"task_id": task.id, "state": task.state.name, "depends_on": list(task.depends_on)}
        return Outcome(f"task {task.id} depends on {', '.join(task.depends_on)}", out)

    async def set_task_creation(args: SetTaskCreationArgs, progress: Progress) -> Outcome:
        policy = await lead.set_task_creation(args.teammate, _POLICIES[args.policy])
        out = {"teammate": args.teammate, "policy": policy.name.lower()}
        return Outcome(f"task creation of {args.teammate}: {out['policy']}", out)

    return [
        ToolSpec(
            "decide_proposals",
            "Decide tasks teammates proposed (PROPOSED; board_summary lists them in proposals_waiting, "
            "watch_events shows tasks_proposed): approve=true makes them PENDING; approve=false cancels them "
            "with their dependents (error 'proposal rejected: <feedback>'), and a task split on one is "
            "ready again without it. The proposer's next_item brings the decision. Returns every task changed.",
            DecideProposalsArgs,
            obj(["tasks"], tasks=array(ANY_OBJECT)),
            decide_proposals,
        ),
        ToolSpec(
            "add_dependencies",
            "Make a PENDING or PROPOSED task wait for more tasks too (edges it has already are left alone); an "
            "edge that would close a cycle is refused, naming it (a → c → b → a).",
            AddDependenciesArgs,
            obj(["task_id", "state", "depends_on"], task_id=STRING, state=STRING, depends_on=array(STRING)),
            add_dependencies,
            idempotent=True,
        ),
        ToolSpec(
            "set_task_creation",
            'How a teammate\'s proposed tasks land ("*": the default of teammates without their own): propose '
            "(the default: PROPOSED, waiting for decide_proposals), allow (PENDING at once) or deny (refused).",
            SetTaskCreationArgs,
            obj(["teammate", "policy"], teammate=STRING, policy=STRING),
            set_task_creation,
            idempotent=True,
        ),
    ]
