"""How the CLI shows artifacts: as JSON, in a table, and on one line."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich import box
from rich.markup import escape
from rich.table import Table

import corral

__all__ = ["artifact_json", "artifact_line", "artifacts_table", "size_label"]


def artifact_json(artifact: corral.Artifact) -> dict[str, Any]:
    return {
        "name": artifact.name,
        "media_type": artifact.media_type,
        "size": artifact.size,
        "sha256": artifact.sha256,
        "attempt": artifact.attempt,
        "create_time": artifact.create_time.isoformat().replace("+00:00", "Z"),
    }


def size_label(size: int) -> str:
    """`532 B`, `12.5 KiB`, `3.0 MiB`."""
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


def artifacts_table(artifacts: Iterable[corral.Artifact], title: str | None = None) -> Table:
    """Name, media type, size, the SHA-256's first 12 digits, attempt and time."""
    table = Table(
        "name", "media type", "size", "sha256", "attempt", "time", box=box.SIMPLE_HEAD, title=title, pad_edge=False
    )
    table.title_justify = "left"
    for artifact in artifacts:
        table.add_row(
            escape(artifact.name),
            escape(artifact.media_type),
            size_label(artifact.size),
            artifact.sha256[:12],
            str(artifact.attempt),
            artifact.create_time.strftime("%Y-%m-%d %H:%M:%SZ"),
        )
    return table


def artifact_line(event: corral.ArtifactAdded) -> str:
    """`ann attached report.md (text/markdown, 1.2 KiB) to task t, attempt 1`."""
    artifact = event.artifact
    return (
        f"{event.teammate} attached {artifact.name} ({artifact.media_type}, {size_label(artifact.size)})"
        f" to task {event.task_id}, attempt {artifact.attempt}"
    )
