"""`corral proposals list|approve|reject`: the tasks teammates proposed, waiting for the Lead."""

from __future__ import annotations

import click

import corral
from corral._terminal.output import console, emit_json, proposals_table, task_json

from ._connect import CliError, connection_options, lead_session

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


@click.group("proposals")
def proposals_group() -> None:
    """List the tasks teammates proposed (PROPOSED), and approve or reject them."""


@proposals_group.command("list")
@json_option
@connection_options
@click.pass_context
def list_command(ctx: click.Context, as_json: bool) -> None:
    """List the proposed tasks waiting for the Lead's decision, in board order: who
    proposed each, and the task it was discovered from."""
    with lead_session(ctx) as lead:
        tasks = list(lead.list_tasks(states=[corral.TaskState.PROPOSED]))
    if as_json:
        emit_json([task_json(task) for task in tasks])
        return
    if not tasks:
        click.echo("no proposals waiting")
        return
    console().print(proposals_table(tasks))


@proposals_group.command("approve")
@click.argument("task_ids", nargs=-1, required=True)
@json_option
@connection_options
@click.pass_context
def approve_command(ctx: click.Context, task_ids: tuple[str, ...], as_json: bool) -> None:
    """Approve proposed TASK_IDS: they are PENDING, claimed like any task once ready."""
    decided = _decide(ctx, task_ids, approve=True, feedback="")
    if as_json:
        emit_json([task_json(task) for task in decided])
        return
    click.echo(f"approved {len(decided)} proposed task(s): {', '.join(task.id for task in decided)}; pending now")


@proposals_group.command("reject")
@click.argument("task_ids", nargs=-1, required=True)
@click.option("--feedback", default="", help="Why: kept in each task's error, and sent to the proposers.")
@json_option
@connection_options
@click.pass_context
def reject_command(ctx: click.Context, task_ids: tuple[str, ...], feedback: str, as_json: bool) -> None:
    """Reject proposed TASK_IDS: they are CANCELED ("proposal rejected: FEEDBACK"), with
    their dependents; a task split on one of them drops it and is ready again."""
    decided = _decide(ctx, task_ids, approve=False, feedback=feedback)
    if as_json:
        emit_json([task_json(task) for task in decided])
        return
    named = set(task_ids)
    lines = [f"rejected {len(named)} proposed task(s): {', '.join(t.id for t in decided if t.id in named)}"]
    canceled = [t.id for t in decided if t.id not in named and t.state is corral.TaskState.CANCELED]
    if canceled:
        lines.append(f"canceled with them: {', '.join(canceled)}")
    freed = [t.id for t in decided if t.id not in named and t.state is not corral.TaskState.CANCELED]
    if freed:
        lines.append(f"split tasks ready again: {', '.join(freed)}")
    click.echo("\n".join(lines))


def _decide(ctx: click.Context, task_ids: tuple[str, ...], *, approve: bool, feedback: str) -> list[corral.Task]:
    verb = "approve" if approve else "reject"
    with lead_session(ctx) as lead:
        try:
            return lead.decide_proposals(task_ids, approve, feedback)
        except corral.FailedPrecondition as exc:
            raise CliError(f"{exc.reason or 'FAILED_PRECONDITION'}: cannot {verb}: {exc.details}") from None
