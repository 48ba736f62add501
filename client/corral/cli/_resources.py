"""`corral resources list`: the path leases held now, by tasks in progress."""

from __future__ import annotations

import click
from rich.markup import escape

from corral._terminal.output import console, emit_json, held_resource_json, table

from ._connect import connection_options, lead_session


@click.group("resources")
def resources_group() -> None:
    """Path leases: the resources tasks in progress hold."""


@resources_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@connection_options
@click.pass_context
def list_command(ctx: click.Context, as_json: bool) -> None:
    """List every resource held now: the resource, exclusive or shared, the task and its teammate."""
    with lead_session(ctx) as lead:
        stats = lead.get_stats()
    held = stats.held_resources
    if as_json:  # a list, as `limits list --json` prints; the daemon sends at most 1,000
        emit_json([held_resource_json(one) for one in held])
        return
    if not held:
        click.echo("no resources held")
        return
    shown = table("resource", "mode", "task", "teammate")
    for one in held:
        mode = "exclusive" if one.exclusive else "shared"
        shown.add_row(escape(one.resource), mode, escape(one.task_id), escape(one.teammate))
    console().print(shown)
    if stats.held_resources_total > len(held):
        click.echo(f"({len(held)} of {stats.held_resources_total} shown)")
