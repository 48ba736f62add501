"""Tasks as tool arguments, with the fields of a DAG file (docs/dag-format.md): the
Lead's create_tasks and a teammate's propose_tasks take the same shape, parsed and
checked in one place, and a daemon refusal is pointed at the task it names."""

from __future__ import annotations

import json
from typing import Annotated

import pydantic

import corral
from corral._dagfile import DagError, DagFile, explain_create_error, parse_dag

from .errors import ToolFailure
from .registry import Arguments

__all__ = ["ReviewArgument", "TaskArgument", "explain_refusal", "specs_of"]

Name = Annotated[str, pydantic.Field(min_length=1, max_length=200)]


class ReviewArgument(Arguments):
    """A task's review before done: a teammate holding reviewer_role reviews ("": the Lead)."""

    reviewer_role: Annotated[str, pydantic.Field(max_length=200)] = ""
    max_rounds: Annotated[int, pydantic.Field(ge=1, le=20)] | None = None


class TaskArgument(Arguments):
    """One task, with the fields of a DAG file (docs/dag-format.md)."""

    id: Name
    title: str = ""
    description: str = ""
    payload: str = ""
    depends_on: list[str] = []
    priority: int = 0
    max_attempts: int | None = None
    lease_seconds: float | None = None
    required_role: str = ""
    not_before: str | None = None
    retry_backoff_seconds: float | None = None
    retry_backoff_max_seconds: float | None = None
    concurrency_key: str = ""
    attempt_timeout_seconds: float | None = None
    review: ReviewArgument | None = None
    # Path leases (docs/coding-agents.md): held exclusively, or shared, while the task runs.
    resources: list[str] = []
    shared_resources: list[str] = []


def specs_of(tasks: list[TaskArgument]) -> tuple[corral.TaskSpec, ...]:
    """The specs, checked as a DAG file's are; ToolFailure INVALID_ARGUMENT naming the task."""
    document = {"tasks": [task.model_dump(exclude_defaults=True) | {"id": task.id} for task in tasks]}
    try:
        return parse_dag(json.dumps(document), "json", name="tasks").specs
    except DagError as exc:
        raise ToolFailure("INVALID_ARGUMENT", f"{exc}; fix that task and call again") from None


def explain_refusal(exc: corral.CorralError, specs: tuple[corral.TaskSpec, ...]) -> ToolFailure | None:
    """A daemon refusal naming `tasks[i]`, said about that task by id; None for any other."""
    explained = explain_create_error(exc, DagFile("tasks", specs))
    if explained is None:
        return None
    return ToolFailure(exc.reason or (exc.code.name if exc.code else "ERROR"), explained)
