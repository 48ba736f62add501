"""`corral mcp`: serve MCP on stdio for one credential (see docs/mcp.md)."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import click

import corral

from ._connect import ADDRESS_ENV, EXIT_FAILED, EXIT_USAGE, TOKEN_ENV, CliError, Target, describe_error

_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in "90", "90s", "500ms", "30m" or "2h"."""
    value = text.strip().lower()
    for unit in sorted(_DURATION_UNITS, key=len, reverse=True):
        if value.endswith(unit):
            number, scale = value[: -len(unit)], _DURATION_UNITS[unit]
            break
    else:
        number, scale = value, 1.0
    try:
        seconds = float(number) * scale
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a duration (try 30m, 90s or 500ms)") from None
    if not seconds > 0:
        raise click.BadParameter(f"{text!r} must be longer than zero")
    return seconds


@click.command("mcp")
@click.option("--address", "address_option", help=f"Daemon address; default ${ADDRESS_ENV}.")
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help=f"Read the credential from this file; default ${TOKEN_ENV}.",
)
@click.option(
    "--agent-quiet-limit",
    default="30m",
    show_default=True,
    help="Stop renewing leases once the agent has called no corral tool for this long.",
)
@click.option(
    "--allow-mint",
    "mint_dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Lead only: offer add_teammate, writing each new token to DIR/NAME.token (0600).",
)
# Tests and the bench wait in next_item for less than the 10 s between progress notifications.
@click.option("--progress-every", default="10s", hidden=True)
@click.pass_context
def mcp_command(
    ctx: click.Context,
    address_option: str | None,
    token_file: Path | None,
    agent_quiet_limit: str,
    mint_dir: Path | None,
    progress_every: str,
) -> None:
    """Serve the Model Context Protocol on stdin/stdout for one credential: a teammate's
    credential gets the teammate tools, the Lead's the Lead tools."""
    parent = ctx.find_root().obj or {}
    address = address_option or parent.get("address") or os.environ.get(ADDRESS_ENV, "")
    token = _token(token_file)
    if not address or not token:
        missing = "address" if not address else "credential"
        raise CliError(f"no {missing}: pass --address and --token-file, or set {ADDRESS_ENV} and {TOKEN_ENV}")
    quiet_limit = parse_duration(agent_quiet_limit)
    try:
        from corral.mcp_bridge import BridgeConfig, serve_stdio
    except ImportError:
        raise CliError("corral mcp needs the MCP SDK: pip install 'corral[mcp]'", EXIT_USAGE) from None
    logging.basicConfig(level=logging.INFO, format="corral mcp: %(levelname)s %(name)s: %(message)s")
    config = BridgeConfig(
        address=address,
        token=token,
        quiet_limit=quiet_limit,
        mint_dir=mint_dir,
        progress_interval=parse_duration(progress_every),
    )
    source = str(token_file) if token_file else f"${TOKEN_ENV}"
    try:
        asyncio.run(serve_stdio(config))
    except corral.CorralError as exc:
        raise describe_error(exc, Target(address, token, source)) from None
    except KeyboardInterrupt:
        raise click.exceptions.Exit(EXIT_FAILED) from None


def _token(token_file: Path | None) -> str:
    if token_file is None:
        return os.environ.get(TOKEN_ENV, "").strip()
    try:
        return token_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise CliError(f"cannot read the token file {token_file}: {exc.strerror or exc}") from None
