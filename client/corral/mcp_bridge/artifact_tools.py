"""Artifacts through the bridge: a teammate attaches a file to a task it holds
(put_artifact), given as text or base64; the Lead reads one (get_artifact), as text
when it is textual, else base64, labelled with the teammate that attached it. Both
carry at most 4 MiB: larger files go through the SDK or `corral artifacts get`."""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Annotated, Any

import pydantic

from corral import aio
from corral._artifacts import DEFAULT_MEDIA_TYPE, media_type_for

from .errors import ToolFailure
from .output_tools import author_of
from .registry import INTEGER, STRING, Arguments, Outcome, Progress, ToolSpec, obj
from .views import artifact_view

if TYPE_CHECKING:
    from .teammate_link import TeammateLink

__all__ = ["MCP_ARTIFACT_MAX_BYTES", "get_artifact_tool", "is_textual", "put_artifact_tool"]

# The most one artifact may carry through MCP, either way: a tool call's arguments and
# a result travel whole in one JSON message.
MCP_ARTIFACT_MAX_BYTES = 4 * 1024 * 1024
_LIMIT = "4 MiB"

TaskId = Annotated[str, pydantic.Field(min_length=1, max_length=200)]
ArtifactName = Annotated[str, pydantic.Field(min_length=1, max_length=200)]
# Media types that are text whatever their main type says.
_TEXTUAL_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/x-sh",
        "application/sql",
        "application/csv",
    }
)


class PutArtifactArgs(Arguments):
    task_id: TaskId
    name: ArtifactName
    text: str | None = None
    base64: str | None = None
    media_type: Annotated[str, pydantic.Field(min_length=1, max_length=255)] | None = None


class GetArtifactArgs(Arguments):
    task_id: TaskId
    name: ArtifactName


def is_textual(media_type: str) -> bool:
    """Whether bytes of this media type are meant to be read as text."""
    kind = media_type.lower()
    return kind.startswith("text/") or kind in _TEXTUAL_TYPES or kind.endswith(("+json", "+xml", "+yaml"))


def _content(args: PutArtifactArgs) -> tuple[bytes, str]:
    """The bytes to attach and their media type; ToolFailure for anything the limit or
    the encoding refuses, before any call."""
    if (args.text is None) == (args.base64 is None):
        raise ToolFailure("INVALID_ARGUMENT", "give exactly one of text (UTF-8 text) or base64 (any bytes)")
    if args.text is not None:
        data, field = args.text.encode("utf-8"), "text"
    else:
        assert args.base64 is not None
        field = "base64"
        try:
            data = base64.b64decode(args.base64, validate=True)
        except (binascii.Error, ValueError):
            raise ToolFailure("INVALID_ARGUMENT", "base64: not valid base64 (standard alphabet, padded)") from None
    if len(data) > MCP_ARTIFACT_MAX_BYTES:
        raise ToolFailure(
            "INVALID_ARGUMENT",
            f"{field}: {len(data)} bytes is over the {_LIMIT} limit of an artifact through MCP; "
            "attach larger files with the corral SDK (Claim.put_artifact)",
        )
    media_type = args.media_type or media_type_for(args.name, None)
    if args.media_type is None and args.text is not None and media_type == DEFAULT_MEDIA_TYPE:
        media_type = "text/plain"  # given as text, and the name says nothing else
    return data, media_type


def put_artifact_tool(link: TeammateLink) -> ToolSpec:
    """put_artifact, for a teammate bridge."""

    async def put_artifact(args: PutArtifactArgs, progress: Progress) -> Outcome:
        data, media_type = _content(args)
        stored = await link.put_artifact(args.task_id, args.name, data, media_type)
        return Outcome(
            f"attached {args.name} ({stored.media_type}, {stored.size} bytes) to task {args.task_id}, "
            f"attempt {stored.attempt}",
            {"task_id": args.task_id, **artifact_view(stored)},
        )

    return ToolSpec(
        "put_artifact",
        "Attach a file you made (a report, a diff, a log) to a task you hold, for the Lead, reviewers and "
        "dependent tasks: name is a relative path (at most 200 characters, no '..', no leading '/'); give the "
        "content as text (UTF-8) or as base64 (any bytes), exactly one, at most 4 MiB; media_type "
        "('type/subtype') is guessed from the name when left out. A name the task already has is replaced. "
        "Answers with the size, SHA-256 and attempt stored.",
        PutArtifactArgs,
        obj(
            ["task_id", "name", "media_type", "size", "sha256", "attempt"],
            task_id=STRING,
            name=STRING,
            media_type=STRING,
            size=INTEGER,
            sha256=STRING,
            attempt=INTEGER,
            create_time=STRING,
        ),
        put_artifact,
    )


def get_artifact_tool(lead: aio.Lead) -> ToolSpec:
    """get_artifact, for a Lead bridge."""

    async def get_artifact(args: GetArtifactArgs, progress: Progress) -> Outcome:
        task = await lead.get_task(args.task_id)
        found = next((artifact for artifact in task.artifacts if artifact.name == args.name), None)
        if found is None:
            names = ", ".join(artifact.name for artifact in task.artifacts[:20]) or "none"
            raise ToolFailure(
                "NOT_FOUND", f"task {args.task_id!r} has no artifact {args.name!r} (its artifacts: {names})"
            )
        if found.size > MCP_ARTIFACT_MAX_BYTES:
            raise ToolFailure(
                "RESOURCE_EXHAUSTED",
                f"artifact {args.name!r} is {found.size} bytes, over the {_LIMIT} an MCP result carries; "
                f"download it with `corral artifacts get {args.task_id} {args.name} -o FILE`",
            )
        data = await lead.get_artifact(args.task_id, args.name, sha256=found.sha256)
        author = author_of(task, found.attempt)
        content: dict[str, Any] = {"from": author, "role": "teammate"}
        text = _as_text(data) if is_textual(found.media_type) else None
        if text is not None:
            content.update(encoding="utf-8", text=text)
        else:
            content.update(encoding="base64", data=base64.b64encode(data).decode("ascii"))
        return Outcome(
            f"artifact {found.name} of task {args.task_id} ({found.media_type}, {found.size} bytes, "
            f"as {content['encoding']})",
            {"task_id": args.task_id, **artifact_view(found), "content": content},
        )

    return ToolSpec(
        "get_artifact",
        "Read a file a teammate attached to a task (the task's artifacts list them): text when its media type "
        "is textual (text/*, JSON, XML, YAML ...) and it is UTF-8, else base64 (content.encoding says which), "
        "labelled with the teammate that attached it. At most 4 MiB; for a larger one use "
        "`corral artifacts get TASK NAME -o FILE`.",
        GetArtifactArgs,
        obj(
            ["task_id", "name", "media_type", "size", "sha256", "attempt", "content"],
            task_id=STRING,
            name=STRING,
            media_type=STRING,
            size=INTEGER,
            sha256=STRING,
            attempt=INTEGER,
            create_time=STRING,
            content={"type": "object"},
        ),
        get_artifact,
        read_only=True,
    )


def _as_text(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
