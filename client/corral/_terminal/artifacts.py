"""How the CLI shows artifacts: as JSON, in a table, and on one line."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich import box
from rich.markup import escape
from rich.table import Column, Table

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


_FIXED_COLUMNS = (("size", 7), ("sha256", 12), ("attempt", 7), ("time (UTC)", 16))


def artifacts_table(artifacts: Iterable[corral.Artifact], title: str | None = None) -> Table:
    """Name, media type, size, the SHA-256's first 12 digits, attempt and time."""
    # The short columns keep their width on a narrow terminal; the name and media type fold.
    fixed = [Column(header, no_wrap=True, min_width=width) for header, width in _FIXED_COLUMNS]
    table = Table(
        Column("name", overflow="fold", min_width=12),
        Column("media type", overflow="fold"),
        *fixed,
        box=box.SIMPLE_HEAD,
        title=title,
        title_justify="left",
        pad_edge=False,
    )
    for artifact in artifacts:
        table.add_row(
            escape(artifact.name),
            escape(artifact.media_type),
            size_label(artifact.size),
            artifact.sha256[:12],
            str(artifact.attempt),
            artifact.create_time.strftime("%Y-%m-%d %H:%M"),
        )
    return table


def artifact_line(event: corral.ArtifactAdded) -> str:
    """`ann attached report.md (text/markdown, 1.2 KiB) to task t, attempt 1`."""
    artifact = event.artifact
    return (
        f"{event.teammate} attached {artifact.name} ({artifact.media_type}, {size_label(artifact.size)})"
        f" to task {event.task_id}, attempt {artifact.attempt}"
    )
