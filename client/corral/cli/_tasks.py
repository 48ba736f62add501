"""`corral tasks add|list|show|cancel|retry|revoke|answer|review|depend|output`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

import corral
from corral._dagadd import AddRefused, add_dag
from corral._dagfile import FORMATS, DagError, load_dag
from corral._terminal.artifacts import artifacts_table
from corral._terminal.output import (
    attempts_table,
    console,
    emit_json,
    task_detail,
    task_json,
    task_with_attempts_json,
    tasks_table,
)

from ._connect import CliError, connection_options, lead_session

STATE_NAMES = [state.name.lower() for state in corral.TaskState]
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


@click.group("tasks")
def tasks_group() -> None:
    """Add, list, show, cancel, retry and revoke tasks, answer their questions, review
    their results, add dependencies and print their live output."""


@tasks_group.command("add")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(FORMATS), help="File format (default: from the file suffix).")
@click.option("--request-id", help="Make a retried add idempotent: the same id returns the same tasks.")
@json_option
@connection_options
@click.pass_context
def add_command(ctx: click.Context, file: Path, fmt: str | None, request_id: str | None, as_json: bool) -> None:
    """Add every task of a DAG FILE (TOML, YAML or JSON) in one atomic batch.

    See docs/dag-format.md for the schema. Nothing is written if any task is refused
    (a file too big for one request goes in parts, each all or nothing: see there).
    A task already on the board that the file gives more dependencies (the same spec
    otherwise) gains them once the new tasks are added.
    """
    try:
        dag = load_dag(file, fmt)
    except DagError as exc:
        raise CliError(str(exc)) from None
    with lead_session(ctx) as lead:
        try:
            added = add_dag(lead, dag, request_id=request_id)
        except AddRefused as refused:
            explained = refused.explain(dag)
            if explained is None:
                raise refused.error from None
            raise CliError(explained) from None
    if as_json:
        emit_json([task_json(task) for task in [*added.created, *(task for task, _ in added.deepened)]])
        return
    new = len(added.created) - len(set(added.unchanged) & {task.id for task in added.created})
    existing = f"; {len(added.unchanged)} already existed unchanged" if added.unchanged else ""
    click.echo(f"added {new} new task(s) from {file}{existing}")
    for task, edges in added.deepened:
        click.echo(f"{task.id} (on the board already) now also depends on {', '.join(edges)}")


@tasks_group.command("list")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(STATE_NAMES, case_sensitive=False),
    help="Only tasks in this state (repeatable).",
)
@click.option("--owner", default="", help="Only tasks held (or last held) by this teammate.")
@json_option
@connection_options
@click.pass_context
def list_command(ctx: click.Context, states: tuple[str, ...], owner: str, as_json: bool) -> None:
    """List tasks in board order."""
    wanted = [corral.TaskState[name.upper()] for name in states]
    with lead_session(ctx) as lead:
        tasks = list(lead.list_tasks(states=wanted, owner=owner))
    if as_json:
        emit_json([task_json(task) for task in tasks])
        return
    if not tasks:
        click.echo("no tasks")
        return
    console().print(tasks_table(tasks))


@tasks_group.command("show")
@click.argument("task_id")
@json_option
@connection_options
@click.pass_context
def show_command(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """Show one task, with its payload, result, last error, its attempts and its artifacts."""
    with lead_session(ctx) as lead:
        task = lead.get_task(task_id)
    if as_json:
        emit_json(task_with_attempts_json(task))
        return
    console().print(task_detail(task))
    if task.attempts:
        console().print(attempts_table(task.attempts))
    if task.artifacts:
        console().print(artifacts_table(task.artifacts, title="artifacts"))


@tasks_group.command("cancel")
@click.argument("task_ids", nargs=-1, required=True)
@json_option
@connection_options
@click.pass_context
def cancel_command(ctx: click.Context, task_ids: tuple[str, ...], as_json: bool) -> None:
    """Cancel tasks and, transitively, every task depending on them."""
    with lead_session(ctx) as lead:
        changed = lead.cancel_tasks(task_ids)
    if as_json:
        emit_json([task_json(task) for task in changed])
        return
    if not changed:
        click.echo("nothing to cancel (already finished)")
        return
    click.echo(f"canceled {len(changed)} task(s): {', '.join(task.id for task in changed)}")


@tasks_group.command("retry")
@click.argument("task_ids", nargs=-1, required=True)
@click.option("--reset-attempts", is_flag=True, help="start their attempt counts again from zero")
@json_option
@connection_options
@click.pass_context
def retry_command(ctx: click.Context, task_ids: tuple[str, ...], reset_attempts: bool, as_json: bool) -> None:
    """Send FAILED or CANCELED tasks back to PENDING, with the dependents canceled because of them."""
    with lead_session(ctx) as lead:
        changed = lead.retry_tasks(task_ids, reset_attempts=reset_attempts)
    if as_json:
        emit_json([task_json(task) for task in changed])
        return
    click.echo(f"retrying {len(changed)} task(s): {', '.join(task.id for task in changed)}")


@tasks_group.command("revoke")
@click.argument("task_id")
@click.option("--reason", default="", help="Why, for the attempt's history and the holder.")
@json_option
@connection_options
@click.pass_context
def revoke_command(ctx: click.Context, task_id: str, reason: str, as_json: bool) -> None:
    """Take TASK_ID's live claim from its holder: the task is PENDING again at once,
    the holder is told on its stream, and its claim token is dead."""
    with lead_session(ctx) as lead:
        try:
            task = lead.revoke_claim(task_id, reason)
        except corral.FailedPrecondition as exc:
            raise CliError(f"{exc.reason or 'FAILED_PRECONDITION'}: cannot revoke: {exc.details}") from None
    if as_json:
        emit_json(task_json(task))
        return
    click.echo(f"revoked the claim on {task.id}; it is {task.state.name.lower()} again")


@tasks_group.command("answer")
@click.argument("task_id")
@click.argument("text")
@json_option
@connection_options
@click.pass_context
def answer_command(ctx: click.Context, task_id: str, text: str, as_json: bool) -> None:
    """Answer the question TASK_ID's holder asked (the task is NEEDS_INPUT: see
    `tasks list --state needs_input`) with TEXT: the task is PENDING again, and its
    next claim carries every question and answer so far."""
    with lead_session(ctx) as lead:
        try:
            task = lead.answer_question(task_id, text)
        except corral.FailedPrecondition as exc:
            raise CliError(f"{exc.reason or 'FAILED_PRECONDITION'}: cannot answer: {exc.details}") from None
    if as_json:
        emit_json(task_json(task))
        return
    click.echo(f"answered the question on {task.id}; it is {task.state.name.lower()} again")


@tasks_group.command("review")
@click.argument("task_id")
@click.option("--approve/--reject", "approve", default=None, help="Approve the result, or reject it for rework.")
@click.option("--feedback", default="", help="Why (required with --reject): the rework's claim carries it.")
@json_option
@connection_options
@click.pass_context
def review_command(ctx: click.Context, task_id: str, approve: bool | None, feedback: str, as_json: bool) -> None:
    """Decide the review of TASK_ID's result (the task is IN_REVIEW: see `tasks list
    --state in_review` and `tasks show`): --approve completes it with that result;
    --reject --feedback TEXT sends it back for rework (its next claim carries the
    feedback and the rejected result), or fails it at its policy's max_rounds. A
    review a teammate holds is taken from it."""
    if approve is None:
        raise click.UsageError("say --approve or --reject")
    if not approve and not feedback.strip():
        raise click.UsageError("--reject needs --feedback TEXT: the rework is told why")
    verdict: corral.Verdict = corral.Approve(feedback) if approve else corral.Reject(feedback)
    with lead_session(ctx) as lead:
        try:
            task = lead.review_task(task_id, verdict)
        except corral.FailedPrecondition as exc:
            raise CliError(f"{exc.reason or 'FAILED_PRECONDITION'}: cannot review: {exc.details}") from None
    if as_json:
        emit_json(task_json(task))
        return
    if task.state is corral.TaskState.COMPLETED:
        click.echo(f"approved {task.id}; it is completed")
    elif task.state is corral.TaskState.FAILED:
        click.echo(f"rejected {task.id} for the last time; it failed: {task.error}")
    else:
        click.echo(f"rejected {task.id} (round {task.review_rounds}); it is {task.state.name.lower()} again for rework")


@tasks_group.command("depend")
@click.argument("task_id")
@click.option("--on", "depends_on", required=True, metavar="A,B", help="The tasks it must wait for, comma-separated.")
@json_option
@connection_options
@click.pass_context
def depend_command(ctx: click.Context, task_id: str, depends_on: str, as_json: bool) -> None:
    """Make TASK_ID (PENDING or PROPOSED) wait for the tasks named by --on too, as for
    the dependencies it was created with. An edge that would close a cycle is refused,
    naming the cycle; so is a task IN_PROGRESS or finished."""
    wanted = [task.strip() for task in depends_on.split(",") if task.strip()]
    if not wanted:
        raise click.UsageError("--on names at least one task: --on A,B")
    with lead_session(ctx) as lead:
        try:
            task = lead.add_dependencies(task_id, wanted)
        except corral.FailedPrecondition as exc:
            raise CliError(f"{exc.reason or 'FAILED_PRECONDITION'}: cannot add dependencies: {exc.details}") from None
    if as_json:
        emit_json(task_json(task))
        return
    click.echo(f"{task.id} now depends on {', '.join(task.depends_on)}")


@tasks_group.command("output")
@click.argument("task_id")
@click.option("-f", "--follow", is_flag=True, help="Keep printing what is appended until the attempt ends.")
@click.option(
    "--attempt",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Which attempt's output (Task.attempts); 0 is the latest.",
)
@click.option(
    "--offset", type=click.IntRange(min=0), default=0, show_default=True, help="Start at this byte of the output."
)
@connection_options
@click.pass_context
def output_command(ctx: click.Context, task_id: str, follow: bool, attempt: int, offset: int) -> None:
    """Print a task's live output (what its holder appended) as raw bytes.

    With -f, keep following as the holder appends, through a daemon restart, and exit
    once the attempt ends (Ctrl-C leaves at once).
    """
    out = sys.stdout.buffer
    with lead_session(ctx) as lead:
        # A one-off read fails at once when the daemon cannot be reached; a follow rides out a restart.
        chunks = lead.tail_output(
            task_id, attempt=attempt, offset=offset, follow=follow, reconnect_timeout=60.0 if follow else 0.0
        )
        try:
            for chunk in chunks:
                if chunk.data:
                    out.write(chunk.data)
                    out.flush()
        except KeyboardInterrupt:
            return
        finally:
            chunks.close()
