"""`corral teammates ...`, `corral send`, `corral shutdown`, `corral plans ...`."""

from __future__ import annotations

import shlex
import time

import click

import corral
from corral._terminal.events import REPLAY_LIMIT_SECONDS, EventPump, StreamEnded, replay
from corral._terminal.output import (
    budget_json,
    budget_label,
    console,
    emit_json,
    iso,
    short,
    table,
    teammate_json,
    teammates_table,
)

from ._connect import CliError, connection_options, lead_session, resolve_target, translate_errors

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


# ---------------------------------------------------------------- teammates


@click.group("teammates")
def teammates_group() -> None:
    """Mint, list and remove teammates; set their budgets and task creation."""


@teammates_group.command("add")
@click.argument("name")
@click.option("--role", "roles", multiple=True, help="A role the teammate holds (repeatable).")
@click.option("--plan-required", is_flag=True, help="The teammate gets no work until the Lead approves its plan.")
@click.option("--env", "as_env", is_flag=True, help="Print `export CORRAL_ADDRESS=... CORRAL_TOKEN=...` lines.")
@click.option(
    "--mcp-config",
    "as_mcp_config",
    is_flag=True,
    help="Print an MCP client configuration that runs `corral mcp` as this teammate (docs/mcp.md).",
)
@json_option
@connection_options
@click.pass_context
def add_command(
    ctx: click.Context,
    name: str,
    roles: tuple[str, ...],
    plan_required: bool,
    as_env: bool,
    as_mcp_config: bool,
    as_json: bool,
) -> None:
    """Mint a teammate credential. Its token is printed once, on stdout; keep it."""
    with lead_session(ctx) as lead:
        new = lead.add_teammate(name, roles=roles, require_plan_approval=plan_required)
        env = lead.teammate_env(new)
    if as_mcp_config:
        from corral.mcp_bridge.snippets import mcp_config_snippet

        emit_json(mcp_config_snippet(new.name, env["CORRAL_ADDRESS"], token=new.token))
    elif as_json:
        emit_json({**teammate_json(new.info), "token": new.token, "env": env})
    elif as_env:
        for key, value in env.items():
            click.echo(f"export {key}={shlex.quote(value)}")
    else:
        click.echo(new.token)
    click.echo(f"teammate {new.name!r} added; its token is shown only this once", err=True)


@teammates_group.command("list")
@json_option
@connection_options
@click.pass_context
def list_command(ctx: click.Context, as_json: bool) -> None:
    """List teammates with their status and held claims."""
    with lead_session(ctx) as lead:
        mates = lead.list_teammates()
    if as_json:
        emit_json([teammate_json(mate) for mate in mates])
        return
    if not mates:
        click.echo("no teammates")
        return
    console().print(teammates_table(mates))


@teammates_group.command("remove")
@click.argument("name")
@json_option
@connection_options
@click.pass_context
def remove_command(ctx: click.Context, name: str, as_json: bool) -> None:
    """Revoke a teammate: its streams end and its claims go back to pending."""
    with lead_session(ctx) as lead:
        removed = lead.remove_teammate(name)
    if as_json:
        emit_json(teammate_json(removed))
        return
    click.echo(f"removed teammate {removed.name!r}")


# A budget is an int64 on the wire: a larger one is a usage error here, not protobuf's ValueError.
_BUDGET_RANGE = click.IntRange(min=0, max=2**63 - 1)


@teammates_group.command("budget")
@click.argument("name")
@click.option("--cost-micros", type=_BUDGET_RANGE, default=0, show_default=True, help="Cost limit in micros (0: none).")
@click.option(
    "--tokens", type=_BUDGET_RANGE, default=0, show_default=True, help="Input + output token limit (0: none)."
)
@json_option
@connection_options
@click.pass_context
def budget_command(ctx: click.Context, name: str, cost_micros: int, tokens: int, as_json: bool) -> None:
    """Set teammate NAME's budget, or with "*" the default of every teammate without
    its own. A teammate whose spending reached its budget gets no new claim until
    the budget is raised; the claims it holds stay."""
    with lead_session(ctx) as lead:
        budget = lead.set_budget(name, max_cost_micros=cost_micros, max_tokens=tokens)
    if as_json:
        emit_json({"teammate": name, "budget": budget_json(budget)})
        return
    who = "the default budget" if name == "*" else f"budget of {name!r}"
    click.echo(f"{who}: {budget_label(budget) or 'no limit'}")


_POLICIES = {policy.name.lower(): policy for policy in corral.TaskCreationPolicy}


@teammates_group.command("task-creation")
@click.argument("name")
@click.argument("policy", type=click.Choice(list(_POLICIES), case_sensitive=False))
@json_option
@connection_options
@click.pass_context
def task_creation_command(ctx: click.Context, name: str, policy: str, as_json: bool) -> None:
    """Set how teammate NAME's proposed tasks land, or with "*" the default of every
    teammate without its own: propose (the default: PROPOSED, waiting for `corral
    proposals approve|reject`), allow (PENDING at once) or deny (refused)."""
    with lead_session(ctx) as lead:
        stored = lead.set_task_creation(name, _POLICIES[policy.lower()])
    if as_json:
        emit_json({"teammate": name, "task_creation": stored.name.lower()})
        return
    who = "the default task creation" if name == "*" else f"task creation of {name!r}"
    click.echo(f"{who}: {stored.name.lower()}")


# ---------------------------------------------------------------- messages and shutdown


@click.command("send")
@click.argument("to")
@click.argument("text")
@json_option
@connection_options
@click.pass_context
def send_command(ctx: click.Context, to: str, text: str, as_json: bool) -> None:
    """Send TEXT to a teammate, to "lead", or to "*" (every teammate)."""
    with lead_session(ctx) as lead:
        recipients = lead.send_message(to, text)
    if as_json:
        emit_json({"recipients": recipients})
        return
    click.echo(f"sent to {', '.join(recipients) or 'nobody'}")


@click.command("shutdown")
@click.argument("name")
@click.option("--reason", default="", help="Why; the teammate sees it.")
@click.option(
    "--grace",
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds to answer before removal (default: the daemon's, 5 min).",
)
@click.option("--wait", is_flag=True, help="Wait for the teammate's answer.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="With --wait: give up after this many seconds.",
)
@json_option
@connection_options
@click.pass_context
def shutdown_command(
    ctx: click.Context, name: str, reason: str, grace: float | None, wait: bool, timeout: float, as_json: bool
) -> None:
    """Ask teammate NAME to finish its work and stop."""
    with lead_session(ctx) as lead:
        request_id = lead.request_shutdown(name, reason=reason, grace=grace)
    answer = _await_answer(ctx, request_id, timeout) if wait else None
    if as_json:
        result: dict[str, object] = {"request_id": request_id}
        if answer is not None:
            result.update(approve=answer.approve, reason=answer.reason)
        emit_json(result)
        return
    click.echo(f"shutdown request sent to {name!r} (request {request_id})")
    if answer is not None:
        verdict = "approved" if answer.approve else "rejected"
        click.echo(f"{name} {verdict}" + (f": {answer.reason}" if answer.reason else ""))


def _await_answer(ctx: click.Context, request_id: str, timeout: float) -> corral.ShutdownAnswered:
    target = resolve_target(ctx)
    deadline = time.monotonic() + timeout
    with translate_errors(target), EventPump(target.address, target.token) as pump:
        while (left := deadline - time.monotonic()) > 0:
            try:
                event = pump.get(timeout=left)
            except StreamEnded as ended:
                raise ended.error or CliError("the daemon ended the watch stream") from None
            if isinstance(event, corral.ShutdownAnswered) and event.request_id == request_id:
                return event
    raise CliError(f"no answer to shutdown request {request_id} within {timeout:g}s")


# ---------------------------------------------------------------- plans


@click.group("plans")
def plans_group() -> None:
    """List submitted plans; approve or reject them."""


@plans_group.command("list")
@click.option(
    "--limit",
    "limit_seconds",
    type=click.FloatRange(min=0, min_open=True),
    default=REPLAY_LIMIT_SECONDS,
    show_default=True,
    help="Stop replaying the event feed after this many seconds on a board that never goes quiet.",
)
@json_option
@connection_options
@click.pass_context
def plans_list_command(ctx: click.Context, limit_seconds: float, as_json: bool) -> None:
    """List every plan submitted so far (from the event feed; newest per author marked)."""
    target = resolve_target(ctx)
    with translate_errors(target):
        events = replay(target.address, target.token, limit=limit_seconds)
    plans = [event for event in events if isinstance(event, corral.PlanSubmitted)]
    newest = {plan.author: plan.plan_id for plan in plans}
    rows = [
        {
            "plan_id": plan.plan_id,
            "author": plan.author,
            "plan": plan.plan,
            "submit_time": iso(plan.time),
            "newest": newest[plan.author] == plan.plan_id,
        }
        for plan in plans
    ]
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("no plans submitted")
        return
    result = table("plan id", "author", "submitted", "newest", "plan")
    for row in rows:
        result.add_row(
            str(row["plan_id"]),
            str(row["author"]),
            str(row["submit_time"]),
            "yes" if row["newest"] else "-",
            short(str(row["plan"]), 60),
        )
    console().print(result)


@plans_group.command("approve")
@click.argument("plan_id")
@click.option("--feedback", default="", help="A note for the author.")
@connection_options
@click.pass_context
def approve_command(ctx: click.Context, plan_id: str, feedback: str) -> None:
    """Approve a plan: its author may start claiming work."""
    with lead_session(ctx) as lead:
        lead.decide_plan(plan_id, approve=True, feedback=feedback)
    click.echo(f"approved plan {plan_id}")


@plans_group.command("reject")
@click.argument("plan_id")
@click.option("--feedback", default="", help="What to change; the author sees it.")
@connection_options
@click.pass_context
def reject_command(ctx: click.Context, plan_id: str, feedback: str) -> None:
    """Reject a plan: its author gets the feedback and must plan again."""
    with lead_session(ctx) as lead:
        lead.decide_plan(plan_id, approve=False, feedback=feedback)
    click.echo(f"rejected plan {plan_id}")
