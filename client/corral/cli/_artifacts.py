"""`corral artifacts list|get`: the files a task's holders attached to it."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import click

from corral._terminal.artifacts import artifact_json, artifacts_table
from corral._terminal.output import console, emit_json

from ._connect import connection_options, lead_session

_COPY_CHUNK = 1 << 20

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


@click.group("artifacts")
def artifacts_group() -> None:
    """List a task's artifacts and download them."""


@artifacts_group.command("list")
@click.argument("task_id")
@json_option
@connection_options
@click.pass_context
def list_command(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """List TASK_ID's artifacts: the latest of each name, ordered by name."""
    with lead_session(ctx) as lead:
        task = lead.get_task(task_id)
    if as_json:
        emit_json([artifact_json(artifact) for artifact in task.artifacts])
        return
    if not task.artifacts:
        click.echo(f"task {task_id} has no artifacts")
        return
    console().print(artifacts_table(task.artifacts))


@artifacts_group.command("get")
@click.argument("task_id")
@click.argument("name")
@click.option(
    "-o",
    "--output",
    "to",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write to this file (complete or not at all) instead of stdout.",
)
@connection_options
@click.pass_context
def get_command(ctx: click.Context, task_id: str, name: str, to: Path | None) -> None:
    """Print the bytes of TASK_ID's artifact NAME on stdout, or write them to a file
    with -o: streamed into a temporary file beside it, renamed onto it once whole, so a
    failed download leaves no partial file."""
    with lead_session(ctx) as lead:
        if to is not None:
            lead.get_artifact(task_id, name, to=to)
            return
        # Through a temporary file, so an artifact of any size is never held in memory,
        # and stdout gets no byte of a download that fails part way.
        with tempfile.TemporaryDirectory(prefix="corral-artifact-") as scratch:
            whole = lead.get_artifact(task_id, name, to=Path(scratch) / "artifact")
            with whole.open("rb") as source:
                shutil.copyfileobj(source, sys.stdout.buffer, _COPY_CHUNK)
    sys.stdout.buffer.flush()
