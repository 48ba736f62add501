"""`corral`: the command-line face of the corral SDK.

Every command but `serve` and `demo` talks to a running daemon, found with
`--state-dir DIR` (socket and lead token inside it), `--address`/`--token`,
or CORRAL_ADDRESS / CORRAL_TOKEN. Failures are one `corral: ...` line on
stderr and a non-zero exit status; listings take `--json`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

# gRPC core reads its log level once, when grpc is first imported: set before any
# import that may bring it in, so a command prints only its own lines (a user who
# wants gRPC's sets GRPC_VERBOSITY, which wins). Child processes inherit it.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

import click

import corral

from ._artifacts import artifacts_group
from ._connect import EXIT_FAILED, CliError, connection_options
from ._limits import limits_group
from ._mcp import mcp_command
from ._proposals import proposals_group
from ._resources import resources_group
from ._stop import stop_command
from ._tasks import tasks_group
from ._team import plans_group, send_command, shutdown_command, teammates_group
from ._views import board_command, graph_command, stats_command, watch_command
from ._web import viewers_group, web_command

__all__ = ["main"]

_CORRALD_PROG_NAME_ENV = "CORRALD_PROG_NAME"  # read by corrald's entry point

_EPILOG = """\b
Exit status: 0 ok; 1 the daemon refused the request, an input file is
wrong, or the demo failed; 2 bad usage or no daemon configured; 3 the
daemon cannot be reached.
"""


class _Group(click.Group):
    """Reports any failure that escaped a command as one line, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, KeyboardInterrupt):
            raise
        except BrokenPipeError:
            # The reader went away (`corral watch | head`): stop quietly, as other tools do.
            with contextlib.suppress(OSError, ValueError):  # not a real file (e.g. under CliRunner)
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise click.exceptions.Exit(EXIT_FAILED) from None
        except corral.CorralError as exc:
            raise CliError(str(exc)) from None
        except Exception as exc:
            if os.environ.get("CORRAL_DEBUG"):
                raise
            raise CliError(
                f"internal error: {type(exc).__name__}: {exc} (set CORRAL_DEBUG=1 for a traceback)", EXIT_FAILED
            ) from None


@click.group(cls=_Group, epilog=_EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="corral", prog_name="corral")
@connection_options
def main() -> None:
    """corral: coordinate a Lead and a team of agents through corrald."""


@main.command(
    "serve",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def serve_command(args: tuple[str, ...]) -> None:
    """Run the daemon: the same as `corrald serve ARGS` (try `corral serve --help`)."""
    command = [sys.executable, "-m", "corrald", "serve", *args]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        # corrald's usage lines then say `corral serve`, the command the user ran.
        os.execve(sys.executable, command, {**os.environ, _CORRALD_PROG_NAME_ENV: "corral"})
    except OSError as exc:
        raise CliError(f"cannot start corrald ({sys.executable} -m corrald): {exc.strerror or exc}") from None


@main.command("demo")
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=120.0,
    show_default=True,
    help="Fail if the whole demo takes longer than this many seconds.",
)
@click.option(
    "--work-ms",
    type=click.IntRange(min=0, max=10_000),
    default=100,
    show_default=True,
    help="Simulated work per task, in milliseconds.",
)
@click.option(
    "--dag",
    "dag_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Run this DAG file instead of the sample one.",
)
@click.option(
    "--dir",
    "base_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Parent directory for the run (default: the system temp directory).",
)
@click.option("--plain", is_flag=True, help="Print progress lines even on a terminal.")
@click.option(
    "--web",
    metavar="HOST:PORT",
    default=None,
    help="Serve the web board here too (e.g. 127.0.0.1:0) and print its address with a one-time login link.",
)
@click.option(
    "--store",
    metavar="DSN",
    default=None,
    help="postgresql://USER@HOST[:PORT]/DB: keep the board in PostgreSQL (a new schema) and serve it "
    "with two daemons, the teammates split between them. The schema is dropped at the end.",
)
@click.option("--keep-schema", is_flag=True, help="With --store: keep the board's schema after the run.")
def demo_command(
    timeout: float,
    work_ms: int,
    dag_file: Path | None,
    base_dir: Path | None,
    plain: bool,
    web: str | None,
    store: str | None,
    keep_schema: bool,
) -> None:
    """Launch a daemon, a sample DAG and a team of teammate processes, and show the board."""
    from corral.demo import DemoFailed, run_demo

    try:
        run_demo(
            timeout=timeout,
            work_ms=work_ms,
            dag_file=dag_file,
            base_dir=base_dir,
            plain=plain,
            web=web,
            store=store,
            keep_schema=keep_schema,
        )
    except DemoFailed as exc:
        raise CliError(f"demo failed: {exc}") from None


for _command in (
    tasks_group,
    artifacts_group,
    teammates_group,
    plans_group,
    proposals_group,
    limits_group,
    resources_group,
    send_command,
    shutdown_command,
    board_command,
    watch_command,
    stats_command,
    graph_command,
    stop_command,
    web_command,
    viewers_group,
    mcp_command,
):
    main.add_command(_command)
