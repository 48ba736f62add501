"""`corral web` and `corral viewers ...`: the web board and its read-only credentials."""

from __future__ import annotations

import webbrowser

import click

from corral._terminal.output import console, emit_json, iso, table
from corral._terminal.weblink import board_url, one_time_link

from ._connect import EXIT_FAILED, EXIT_USAGE, CliError, connection_options, lead_session, resolve_target

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


@click.command("web")
@click.option("--open", "open_browser", is_flag=True, help="Open the login link in a browser.")
@connection_options
@click.pass_context
def web_command(ctx: click.Context, open_browser: bool) -> None:
    """Print the web board's URL of a running daemon (`corrald serve --web HOST:PORT`),
    then a one-time login link (valid once, for two minutes)."""
    target = resolve_target(ctx)
    if target.state_dir is None:
        raise CliError("corral web needs --state-dir DIR (the daemon writes its board's address there)", EXIT_USAGE)
    with lead_session(ctx) as lead:  # not running: exit 3, as every command that cannot reach it
        lead.get_identity()
    url = board_url(target.state_dir)
    if url is None:
        raise CliError(f"the daemon on {target.state_dir} serves no web board (start it with --web HOST:PORT)")
    click.echo(url)
    try:
        link = one_time_link(url, target.token)
    except OSError as exc:
        raise CliError(f"cannot reach the web board at {url}: {exc}", EXIT_FAILED) from None
    click.echo(link)
    click.echo("the link logs in once, within two minutes; `corral viewers add NAME` mints a lasting viewer", err=True)
    if open_browser:
        webbrowser.open(link)


@click.group("viewers")
def viewers_group() -> None:
    """Mint, list and remove read-only viewers of the board (the web board and the board's reads)."""


@viewers_group.command("add")
@click.argument("name")
@json_option
@connection_options
@click.pass_context
def add_viewer_command(ctx: click.Context, name: str, as_json: bool) -> None:
    """Mint a viewer credential. Its token is printed once, on stdout; keep it."""
    with lead_session(ctx) as lead:
        token = lead.add_viewer(name)
    if as_json:
        emit_json({"name": name, "token": token})
    else:
        click.echo(token)
    click.echo(f"viewer {name!r} added; its token is shown only this once", err=True)


@viewers_group.command("list")
@json_option
@connection_options
@click.pass_context
def list_viewers_command(ctx: click.Context, as_json: bool) -> None:
    """List viewers, oldest first."""
    with lead_session(ctx) as lead:
        viewers = lead.list_viewers()
    if as_json:
        emit_json([{"name": v.name, "created": iso(v.created)} for v in viewers])
        return
    if not viewers:
        click.echo("no viewers")
        return
    listing = table("name", "created")
    for viewer in viewers:
        listing.add_row(viewer.name, iso(viewer.created) or "")
    console().print(listing)


@viewers_group.command("remove")
@click.argument("name")
@connection_options
@click.pass_context
def remove_viewer_command(ctx: click.Context, name: str) -> None:
    """Revoke a viewer: its web sessions and open board streams end at once."""
    with lead_session(ctx) as lead:
        lead.remove_viewer(name)
    click.echo(f"removed viewer {name!r}")
