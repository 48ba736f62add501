"""`corral limits ...`: concurrency limits, per concurrency key."""

from __future__ import annotations

import click

from corral._terminal.output import console, emit_json, limit_json, table

from ._connect import connection_options, lead_session

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


@click.group("limits")
def limits_group() -> None:
    """Limit how many tasks of a concurrency key run at once."""


# A negative LIMIT is a value to refuse with the range, not an unknown option.
@limits_group.command("set", context_settings={"ignore_unknown_options": True})
@click.argument("key")
@click.argument("limit", type=int)
@json_option
@connection_options
@click.pass_context
def set_command(ctx: click.Context, key: str, limit: int, as_json: bool) -> None:
    """At most LIMIT tasks with concurrency key KEY in progress at once (1-10000); 0 removes the limit."""
    with lead_session(ctx) as lead:
        stored = lead.set_concurrency_limit(key, limit)
    if as_json:
        emit_json(limit_json(stored))
    elif stored.limit:
        click.echo(f"{stored.key}: at most {stored.limit} in progress ({stored.in_progress} now)")
    else:
        click.echo(f"{stored.key}: no limit ({stored.in_progress} in progress now)")


@limits_group.command("list")
@json_option
@connection_options
@click.pass_context
def list_command(ctx: click.Context, as_json: bool) -> None:
    """List every concurrency key with a limit, and how many of its tasks are in progress."""
    with lead_session(ctx) as lead:
        limits = lead.list_concurrency_limits()
    if as_json:
        emit_json([limit_json(limit) for limit in limits])
        return
    if not limits:
        click.echo("no concurrency limits")
        return
    shown = table("key", "limit", "in progress")
    for limit in limits:
        shown.add_row(limit.key, str(limit.limit), str(limit.in_progress))
    console().print(shown)
