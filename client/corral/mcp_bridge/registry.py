"""Tools as data: a strict argument model, a declared output schema, annotations and a
handler each; one place turns arguments into a model and an outcome into a result.

Arguments are strict: an argument the tool does not declare is refused, naming
it, so a forged `owner` or `claim_token` is an error rather than a no-op.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from typing import Annotated, Any

import mcp_types as types
import pydantic

from .errors import ToolFailure
from .rendering import render_text

__all__ = [
    "ANY_OBJECT",
    "BOOLEAN",
    "INTEGER",
    "NUMBER",
    "STRING",
    "Arguments",
    "Count",
    "Outcome",
    "Progress",
    "ToolSpec",
    "array",
    "error_result",
    "obj",
    "parse_arguments",
    "success_result",
]


# A count the wire carries in an int64 field: bounded here, so a larger one is refused
# naming its field rather than failing as protobuf's ValueError when the request is built.
Count = Annotated[int, pydantic.Field(ge=0, le=2**63 - 1)]


class Arguments(pydantic.BaseModel):
    """Base of every tool's arguments: unknown fields refused, no silent coercion."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """A tool's answer: a one-line summary for the text rendering and the structured content."""

    summary: str
    content: dict[str, Any]


Progress = Callable[[str], Awaitable[None]]
"""Sends a progress notification with this message (a no-op when the call asked for none)."""

Handler = Callable[[Any, Progress], Awaitable[Outcome]]


@dataclasses.dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    arguments: type[Arguments]
    output: dict[str, Any]  # JSON schema of the structured content
    handler: Handler
    read_only: bool = False
    idempotent: bool = False

    def listing(self) -> types.Tool:
        schema = self.arguments.model_json_schema()
        schema.pop("title", None)
        return types.Tool(
            name=self.name,
            description=self.description,
            input_schema=schema,
            output_schema=self.output,
            annotations=types.ToolAnnotations(
                read_only_hint=self.read_only,
                idempotent_hint=self.idempotent or None,
                destructive_hint=False if self.read_only else None,
                open_world_hint=False,
            ),
        )


def parse_arguments(spec: ToolSpec, arguments: dict[str, Any] | None) -> Any:
    """The validated arguments, or ToolFailure INVALID_ARGUMENT naming each bad field."""
    try:
        return spec.arguments.model_validate(arguments or {})
    except pydantic.ValidationError as exc:
        declared = ", ".join(spec.arguments.model_fields) or "no arguments"
        problems = "; ".join(_problem(error) for error in exc.errors(include_url=False, include_input=False))
        raise ToolFailure("INVALID_ARGUMENT", f"{problems} ({spec.name} takes: {declared})") from None


def _problem(error: Any) -> str:
    field = ".".join(str(part) for part in error["loc"]) or "(arguments)"
    if error["type"] == "extra_forbidden":
        return f"{field}: not an argument of this tool"
    if error["type"] == "missing":
        return f"{field}: missing"
    return f"{field}: {error['msg']}"


def success_result(outcome: Outcome) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=render_text(outcome.summary, outcome.content))],
        structured_content=outcome.content,
    )


def error_result(failure: ToolFailure, notes: Iterable[str] = ()) -> types.CallToolResult:
    text = "\n".join([f"{failure.reason}: {failure.message}", *notes])
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


# ---------------------------------------------------------------- schema helpers


def obj(required: Iterable[str] = (), **properties: Any) -> dict[str, Any]:
    """An object schema; every result also may carry `attention` and `notice`."""
    props = {**properties, "attention": _ATTENTION, "notice": {"type": "string"}}
    return {"type": "object", "properties": props, "required": list(required)}


def array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


STRING: dict[str, Any] = {"type": "string"}
INTEGER: dict[str, Any] = {"type": "integer"}
NUMBER: dict[str, Any] = {"type": "number"}
BOOLEAN: dict[str, Any] = {"type": "boolean"}
ANY_OBJECT: dict[str, Any] = {"type": "object"}
_ATTENTION = array(STRING)
