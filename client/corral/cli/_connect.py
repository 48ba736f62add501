"""Where the CLI finds the daemon, and how its failures become one line on stderr.

Address and Lead token come, in this order, from `--address` / `--token`,
from `--state-dir DIR` (`unix:DIR/corral.sock` and `DIR/lead.token`), or from
CORRAL_ADDRESS / CORRAL_TOKEN. The options may be given on the `corral` group
or on the command itself; the command's win.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import click
import grpc

import corral

ADDRESS_ENV = "CORRAL_ADDRESS"
TOKEN_ENV = "CORRAL_TOKEN"
STATE_DIR_ENV = "CORRAL_STATE_DIR"
SOCKET_NAME = "corral.sock"
LEAD_TOKEN_NAME = "lead.token"
BOARD_ID_NAME = "board.id"  # a state directory bound to a PostgreSQL board
BOARD_CREATOR_NAME = "board.creator"  # where the daemon that created that board runs, if another did
LOCK_NAME = "corrald.lock"  # holds the serving daemon's pid

# Exit statuses (documented in `corral --help`).
EXIT_FAILED = 1  # the daemon refused the request, or an input file is wrong
EXIT_USAGE = 2  # click's own status for bad usage; also: no daemon configured
EXIT_UNREACHABLE = 3  # the daemon cannot be reached

_F = TypeVar("_F", bound=Callable[..., Any])
_OPTION_KEYS = ("state_dir", "address", "token")


class CliError(click.ClickException):
    """A failure reported as one `corral: ...` line on stderr."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        # click declares exit_code on the class; each of our errors sets its own.
        self.exit_code = exit_code  # type: ignore[misc]

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"corral: {self.format_message()}", err=True, file=file)


@dataclass(frozen=True)
class Target:
    """A resolved daemon address and Lead credential."""

    address: str
    token: str
    source: str  # where they came from, for error messages
    state_dir: Path | None = None


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if value is not None:
        ctx.ensure_object(dict)[param.name] = value
    return value


def connection_options(func: _F) -> _F:
    """Add --state-dir, --address and --token (stored on the context, not passed on)."""
    options = [
        click.option(
            "--state-dir",
            type=click.Path(file_okay=False, path_type=Path),
            expose_value=False,
            callback=_remember,
            help=f"corrald state directory: connect to unix:DIR/{SOCKET_NAME} with DIR/{LEAD_TOKEN_NAME}.",
        ),
        click.option(
            "--address",
            expose_value=False,
            callback=_remember,
            help=f"Daemon address (unix:PATH or HOST:PORT); default ${ADDRESS_ENV}.",
        ),
        click.option(
            "--token",
            expose_value=False,
            callback=_remember,
            help=f"Lead token; default ${TOKEN_ENV}.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def resolve_target(ctx: click.Context) -> Target:
    """The address and token to use for this invocation."""
    chosen: dict[str, Any] = {}
    for context in reversed(_lineage(ctx)):  # the innermost (the command's own) wins
        chosen.update({k: v for k, v in (context.obj or {}).items() if k in _OPTION_KEYS})
    state_dir = chosen.get("state_dir") or os.environ.get(STATE_DIR_ENV) or None
    address, token = chosen.get("address") or "", chosen.get("token") or ""
    source = "--token"
    if state_dir is not None:
        state_dir = Path(state_dir).expanduser().absolute()
        address = address or f"unix:{state_dir / SOCKET_NAME}"
        if not token:
            token, source = _read_token(state_dir), str(state_dir / LEAD_TOKEN_NAME)
    address = address or os.environ.get(ADDRESS_ENV, "")
    if not token:
        token, source = os.environ.get(TOKEN_ENV, ""), f"${TOKEN_ENV}"
    if not address or not token:
        missing = "address" if not address else "lead token"
        raise CliError(
            f"no {missing} for the daemon: pass --state-dir DIR (or --address and --token), "
            f"or set {ADDRESS_ENV} and {TOKEN_ENV}",
            EXIT_USAGE,
        )
    return Target(address=address, token=token.strip(), source=source, state_dir=state_dir)


def _lineage(ctx: click.Context) -> list[click.Context]:
    chain: list[click.Context] = []
    current: click.Context | None = ctx
    while current is not None:
        chain.append(current)
        current = current.parent
    return chain


def _read_token(state_dir: Path) -> str:
    # A directory without a lead token has no daemon configured in it, which
    # the exit statuses count as a usage error (2), not as "cannot be reached".
    path = state_dir / LEAD_TOKEN_NAME
    if not state_dir.is_dir():
        raise CliError(
            f"no state directory at {state_dir} (start a daemon there with `corral serve --state-dir {state_dir}`)",
            EXIT_USAGE,
        )
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise CliError(_no_lead_token(state_dir, path), EXIT_USAGE) from None
    except OSError as exc:
        raise CliError(f"cannot read the lead token {path}: {exc.strerror or exc}") from None


def _no_lead_token(state_dir: Path, path: Path) -> str:
    """Why a state directory holds no lead token, and what to do; never "start one"
    where a daemon runs."""
    board = _read_small(state_dir / BOARD_ID_NAME)
    creator = _board_creator(state_dir) if board else None
    if creator is not None:
        host, creator_dir = creator
        return (
            f"no lead token at {path}: the daemon of {state_dir} joined PostgreSQL board {board},"
            f" which another daemon created; the board's lead token is in"
            f" {host}:{os.path.join(creator_dir, LEAD_TOKEN_NAME)}:"
            f" pass --state-dir {shlex.quote(creator_dir)} or --token"
        )
    if board:
        # A board created before its creator was recorded (or a note unreadable). Only the
        # daemon whose start created a PostgreSQL board ever held its lead token in plain
        # (the board keeps its hash); the others joined the board.
        return (
            f"no lead token at {path}: the daemon of {state_dir} joined PostgreSQL board {board},"
            f" which another daemon created, and the lead token is the lead.token in that daemon's"
            f" state directory (the one with a lead.token and this board.id): pass that --state-dir,"
            f" pass --token, or copy its lead.token into {state_dir}"
        )
    pid = _running_daemon(state_dir)
    if pid is not None:
        return f"no lead token at {path}, though corrald pid {pid} serves {state_dir}: pass --token"
    return (
        f"no lead token at {path} (is {state_dir} a corrald state directory? start one with "
        f"`corral serve --state-dir {state_dir}`)"
    )


def _board_creator(state_dir: Path) -> tuple[str, str] | None:
    """The host and state directory of the daemon that created the PostgreSQL board a
    joined daemon serves, as that daemon noted them (None: not noted, or unreadable)."""
    try:
        noted = json.loads((state_dir / BOARD_CREATOR_NAME).read_text(encoding="utf-8")[:65536])
        host, creator_dir = noted["host"], noted["state_dir"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if not (isinstance(host, str) and isinstance(creator_dir, str) and creator_dir):
        return None
    return host, creator_dir


def _read_small(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")[:200].strip()
    except OSError:
        return ""


def _running_daemon(state_dir: Path) -> int | None:
    """The pid of the daemon serving `state_dir`, if one does: it holds the lock file,
    which names it, and its socket, which it removes when it stops."""
    if not (state_dir / SOCKET_NAME).exists():
        return None
    try:
        pid = int(_read_small(state_dir / LOCK_NAME))
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return None
    except PermissionError:  # alive, someone else's
        pass
    return pid


@contextlib.contextmanager
def lead_session(ctx: click.Context) -> Iterator[corral.Lead]:
    """A Lead connected to the configured daemon; errors become CliError."""
    target = resolve_target(ctx)
    with translate_errors(target):
        # A command fails at once (exit 3) when the daemon cannot be reached: no waiting.
        lead = corral.Lead.connect(target.address, target.token, connect_timeout=0)
        try:
            yield lead
        finally:
            lead.close()


@contextlib.contextmanager
def translate_errors(target: Target) -> Iterator[None]:
    """Turn SDK and gRPC failures into one clear CliError."""
    try:
        yield
    except corral.CorralError as exc:
        raise describe_error(exc, target) from None
    except grpc.RpcError as exc:  # should not escape the SDK, but never show a traceback
        raise describe_error(corral.CorralError(str(exc)), target) from None


def describe_error(exc: corral.CorralError, target: Target) -> CliError:
    """The one-line message (and exit status) for a failed call: every error the daemon
    (or the lack of one) gives reads `LABEL: what happened`, the label being the
    daemon's reason or the gRPC status code, as in the MCP bridge's tool errors."""
    label = exc.reason or (exc.code.name if exc.code else "")
    if isinstance(exc, corral.Unavailable) or exc.code is grpc.StatusCode.UNAVAILABLE:
        draining = "drain" in exc.details.lower() or "shutting down" in exc.details.lower()
        if draining:
            return CliError(f"UNAVAILABLE: corrald at {target.address} is shutting down", EXIT_UNREACHABLE)
        return unreachable(target.address)
    if exc.code is grpc.StatusCode.DEADLINE_EXCEEDED:
        return CliError(
            f"DEADLINE_EXCEEDED: corrald at {target.address} did not answer in time ({exc.details})",
            EXIT_UNREACHABLE,
        )
    if isinstance(exc, corral.Unauthenticated):
        return CliError(
            f"{label or 'UNAUTHENTICATED'}: corrald refused the credential from {target.source}: {exc.details}"
        )
    if isinstance(exc, corral.PermissionDenied):
        return CliError(
            f"{label or 'PERMISSION_DENIED'}: {exc.details} (these commands need the lead token; "
            f"the one from {target.source} may be a teammate's)"
        )
    if isinstance(exc, corral.Overloaded):
        after = f"; retry after {exc.retry_after.total_seconds():g}s" if exc.retry_after else ""
        return CliError(f"{label or 'OVERLOADED'}: corrald is overloaded: {exc.details}{after}")
    return CliError(f"{label}: {exc.details}" if label else exc.details)


def unreachable(address: str) -> CliError:
    """The error (exit 3) for a daemon that is not running or cannot be reached."""
    return CliError(f"UNAVAILABLE: cannot reach corrald at {address} (is it running?)", EXIT_UNREACHABLE)
