"""`corrald serve`: parse arguments, build a frozen config, run."""

from __future__ import annotations

import json
import logging
import pathlib
import ssl
import sys

import click

from .config import ConfigError, Limits, WriterConfig
from .daemon import ServeConfig, serve
from .listen import web_address
from .overload.lanes import LaneConfig
from .overload.pacing import PacingConfig
from .statedir import StateDirError
from .store.postgres.target import DEFAULT_CONNECT_TIMEOUT_S as PG_DEFAULT_CONNECT_TIMEOUT_S
from .store.postgres.target import DEFAULT_SCHEMA as PG_DEFAULT_SCHEMA
from .store.postgres.target import DEFAULT_STALL_TIMEOUT_S as PG_DEFAULT_STALL_TIMEOUT_S
from .store.postgres.target import DEFAULT_WRITERS as PG_DEFAULT_WRITERS
from .store.postgres.target import MAX_WRITERS as PG_MAX_WRITERS
from .store.postgres.target import PgTarget
from .web.config import WebConfig


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": self.formatTime(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        activity = getattr(record, "activity", None)
        if activity is not None:
            entry["activity"] = activity
        return json.dumps(entry)


def _configure_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _JsonFormatter() if fmt == "json" else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    logging.basicConfig(level=level.upper(), handlers=[handler])


# `corral serve` runs this program in place and names itself here, so that
# usage lines name the command the user actually typed.
PROG_NAME_ENV = "CORRALD_PROG_NAME"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """corrald: the corral coordination daemon."""


@main.command("serve")
@click.option(
    "--state-dir",
    required=True,
    type=click.Path(path_type=pathlib.Path),
    help="Directory the daemon owns (created 0700): database, lock, socket, lead token.",
)
@click.option("--listen", default=None, help="unix:PATH or HOST:PORT (default unix:STATE_DIR/corral.sock).")
@click.option("--metrics", default=None, help="HOST:PORT to serve Prometheus metrics on.")
@click.option("--tls-cert", type=click.Path(exists=True, path_type=pathlib.Path), default=None)
@click.option("--tls-key", type=click.Path(exists=True, path_type=pathlib.Path), default=None)
@click.option(
    "--synchronous",
    type=click.Choice(["OFF", "NORMAL", "FULL", "EXTRA"], case_sensitive=False),
    default="FULL",
    show_default=True,
    help="SQLite durability (group commit pays for FULL).",
)
@click.option(
    "--calls-per-identity",
    type=click.IntRange(1, 10_000),
    default=LaneConfig.calls_per_identity,
    show_default=True,
    help="Unary calls one caller may have running at once (reads and writes each).",
)
@click.option(
    "--streams-per-identity",
    type=click.IntRange(1, 10_000),
    default=LaneConfig.streams_per_identity,
    show_default=True,
    help="Idle and Watch streams one caller may hold open at once.",
)
@click.option(
    "--waiting-per-identity",
    type=click.IntRange(0, 100_000),
    default=LaneConfig.waiting_per_identity,
    show_default=True,
    help="Calls of one caller that may wait for a place before more are refused (RESOURCE_EXHAUSTED).",
)
@click.option(
    "--pacing-slack",
    type=click.FloatRange(min=0),
    default=PacingConfig.slack,
    show_default=True,
    help="While the daemon is busy, a teammate starting calls faster than this many times the team's "
    "mean rate waits for its turn; 0 turns this off.",
)
@click.option(
    "--stream-send-timeout",
    type=click.FloatRange(min=0.1),
    default=Limits.stream_send_timeout_ms / 1000,
    show_default=True,
    help="Seconds a Watch or Idle stream may wait for its client to take a message before it is "
    "ended with UNAVAILABLE (reason SLOW_CONSUMER).",
)
@click.option(
    "--max-output-bytes",
    type=click.IntRange(min=1),
    default=Limits.output_max_bytes,
    show_default=True,
    help="Bytes of output one attempt of a task keeps (AppendOutput); an append past it is refused "
    "with RESOURCE_EXHAUSTED (reason OUTPUT_LIMIT).",
)
@click.option(
    "--max-artifact-bytes",
    type=click.IntRange(min=1),
    default=Limits.artifact_max_bytes,
    show_default=True,
    help="Bytes of one artifact (PutArtifact); an upload past it is refused with RESOURCE_EXHAUSTED "
    "(reason ARTIFACT_LIMIT).",
)
@click.option(
    "--max-artifact-store-bytes",
    type=click.IntRange(min=0),
    default=Limits.artifact_store_max_bytes,
    show_default=True,
    help="Bytes of artifacts the board stores in all, each content counted once; an upload past it is "
    "refused with RESOURCE_EXHAUSTED (reason ARTIFACT_QUOTA).",
)
@click.option(
    "--web",
    "web",
    default=None,
    metavar="HOST:PORT",
    help="Serve the web board here (host default 127.0.0.1); off unless given. "
    "A non-loopback host needs --tls-cert and --tls-key.",
)
@click.option(
    "--web-actions",
    is_flag=True,
    help="Let a lead session act from the web board (approve plans, cancel, revoke, budgets, shutdown).",
)
@click.option(
    "--store",
    envvar="CORRAL_STORE",
    default=None,
    metavar="DSN",
    help="postgresql://USER@HOST[:PORT]/DB: serve a board kept in PostgreSQL, which several daemons "
    "may serve at once (docs/postgres.md). Default: the SQLite file in the state directory.",
)
@click.option(
    "--pg-schema",
    default=PG_DEFAULT_SCHEMA,
    show_default=True,
    help="The PostgreSQL schema that holds the board (one board per schema).",
)
@click.option(
    "--pg-writers",
    type=click.IntRange(1, PG_MAX_WRITERS),
    default=None,
    help=f"Writer threads, each with its own PostgreSQL connection [default: {PG_DEFAULT_WRITERS}].",
)
@click.option(
    "--pg-connect-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=PG_DEFAULT_CONNECT_TIMEOUT_S,
    show_default=True,
    help="Seconds to keep trying an unreachable PostgreSQL server at start before giving up.",
)
@click.option(
    "--pg-stall-timeout",
    type=click.FloatRange(0.1, 3600),
    default=PG_DEFAULT_STALL_TIMEOUT_S,
    show_default=True,
    help="Seconds a write transaction (this daemon's or another's) may stop making progress before it "
    "loses the board's write lock; a round trip unanswered for twice this long has its connection cut.",
)
@click.option(
    "--pg-allow-insecure",
    is_flag=True,
    help="Allow a non-loopback PostgreSQL host without sslmode=require or verify-full in the DSN.",
)
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--log-level", default="info", show_default=True)
def serve_command(
    state_dir: pathlib.Path,
    listen: str | None,
    metrics: str | None,
    tls_cert: pathlib.Path | None,
    tls_key: pathlib.Path | None,
    synchronous: str,
    calls_per_identity: int,
    streams_per_identity: int,
    waiting_per_identity: int,
    pacing_slack: float,
    stream_send_timeout: float,
    max_output_bytes: int,
    max_artifact_bytes: int,
    max_artifact_store_bytes: int,
    web: str | None,
    web_actions: bool,
    store: str | None,
    pg_schema: str,
    pg_writers: int | None,
    pg_connect_timeout: float,
    pg_stall_timeout: float,
    pg_allow_insecure: bool,
    log_format: str,
    log_level: str,
) -> None:
    """Serve one board until SIGTERM."""
    _configure_logging(log_level, log_format)
    target = None
    if pg_writers is not None and not store:
        click.echo("corrald: --pg-writers needs --store postgresql://…", err=True)
        sys.exit(2)
    if store:
        try:
            target = PgTarget.parse(
                store,
                schema=pg_schema,
                connect_timeout_s=pg_connect_timeout,
                stall_timeout_s=pg_stall_timeout,
                allow_insecure=pg_allow_insecure,
            )
        except ImportError:
            click.echo("corrald: --store postgresql:// needs psycopg: pip install 'corral[postgres]'", err=True)
            sys.exit(2)
        except ConfigError as error:
            click.echo(f"corrald: {error}", err=True)
            sys.exit(2)
    web_config = None
    if web is not None:
        try:
            host, port, context = web_address(web, tls_cert, tls_key)
        except (ConfigError, OSError, ssl.SSLError) as error:
            click.echo(f"corrald: {error}", err=True)
            sys.exit(2)
        web_config = WebConfig(host=host, port=port, actions=web_actions, ssl_context=context)
    config = ServeConfig(
        state_dir=state_dir,
        listen=listen,
        metrics=metrics,
        tls_cert=tls_cert,
        tls_key=tls_key,
        limits=Limits(
            stream_send_timeout_ms=round(stream_send_timeout * 1000),
            output_max_bytes=max_output_bytes,
            artifact_max_bytes=max_artifact_bytes,
            artifact_store_max_bytes=max_artifact_store_bytes,
        ),
        writer=WriterConfig(
            synchronous=synchronous.upper(), writers=(pg_writers or PG_DEFAULT_WRITERS) if target is not None else 1
        ),
        lanes=LaneConfig(
            calls_per_identity=calls_per_identity,
            streams_per_identity=streams_per_identity,
            waiting_per_identity=waiting_per_identity,
            pacing=PacingConfig(slack=pacing_slack),
        ),
        web=web_config,
        store=target,
    )
    try:
        code = serve(config)
    except (StateDirError, ConfigError) as error:
        click.echo(f"corrald: {error}", err=True)
        sys.exit(2)
    sys.exit(code)
