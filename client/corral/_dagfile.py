"""Task DAG files (TOML, YAML or JSON) for `corral tasks add` and the demo.

The schema is documented in docs/dag-format.md. This module checks shapes and
types only; what needs the board (unknown dependencies, cycles, ranges,
duplicates) is checked by the daemon, and `explain_create_error` maps its
field paths (`tasks[3].depends_on`) back to the task id in the file.
"""

from __future__ import annotations

import datetime
import difflib
import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

import corral

__all__ = ["DagError", "DagFile", "explain_create_error", "load_dag", "parse_dag"]

FORMATS = ("toml", "yaml", "json")
_SUFFIXES = {".toml": "toml", ".yaml": "yaml", ".yml": "yaml", ".json": "json"}
_TOP_KEYS = ("tasks", "defaults")
_DEFAULTABLE = (
    "priority",
    "max_attempts",
    "lease_seconds",
    "retry_backoff_seconds",
    "retry_backoff_max_seconds",
    "concurrency_key",
    "attempt_timeout_seconds",
)
# Field name in the file -> the kind of value it takes.
_FIELDS: dict[str, str] = {
    "id": "string",
    "title": "string",
    "description": "string",
    "payload": "string",
    "depends_on": "list of strings",
    "priority": "integer",
    "max_attempts": "integer",
    "lease_seconds": "number",
    "required_role": "string",
    "not_before": "string",
    "retry_backoff_seconds": "number",
    "retry_backoff_max_seconds": "number",
    "concurrency_key": "string",
    "attempt_timeout_seconds": "number",
    "review": "table",
    "resources": "list of strings",
    "shared_resources": "list of strings",
}
# The keys of a task's `review` table (corral.ReviewPolicy) and the kind of each.
_REVIEW_KEYS: dict[str, str] = {"reviewer_role": "string", "max_rounds": "integer"}
# The daemon's TaskSpec field names that differ from the file's.
_WIRE_TO_FILE = {
    "lease_duration": "lease_seconds",
    "not_before_time": "not_before",
    "retry_backoff": "retry_backoff_seconds",
    "retry_backoff_max": "retry_backoff_max_seconds",
    "attempt_timeout": "attempt_timeout_seconds",
}
# Durations the daemon words in milliseconds and the file gives in seconds.
_SECONDS_IN_FILE = frozenset({"lease_duration", "retry_backoff", "retry_backoff_max", "attempt_timeout"})
_FIELD_PATH = re.compile(r"^tasks\[(\d+)\](?:\.([\w.]+)(?:\[(\d+)\])?)?")
_MILLISECONDS = re.compile(r"(\d+)ms\b")


class DagError(Exception):
    """A DAG file that cannot be read, parsed, or turned into task specs."""


@dataclass(frozen=True)
class DagFile:
    """A parsed DAG: the specs in file order (the daemon's `tasks[i]` is `specs[i]`)."""

    name: str
    specs: tuple[corral.TaskSpec, ...]

    def task_id(self, index: int) -> str | None:
        return self.specs[index].id if 0 <= index < len(self.specs) else None


def load_dag(path: Path, fmt: str | None = None) -> DagFile:
    """Read and parse a DAG file; the format comes from `fmt` or the file's suffix."""
    fmt = fmt or _SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise DagError(f"{path}: cannot tell the format from the name; pass --format {'|'.join(FORMATS)}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DagError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise DagError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse_dag(text, fmt, name=str(path))


def parse_dag(text: str, fmt: str, *, name: str) -> DagFile:
    """Parse DAG text in `fmt` ("toml", "yaml" or "json")."""
    document = _decode(text, fmt, name)
    raw_tasks, defaults = _top_level(document, name)
    specs = tuple(_spec(name, index, raw, defaults) for index, raw in enumerate(raw_tasks))
    if not specs:
        raise DagError(f"{name}: no tasks (expected a `tasks` list with at least one task)")
    return DagFile(name=name, specs=specs)


def _decode(text: str, fmt: str, name: str) -> Any:
    try:
        if fmt == "toml":
            return tomllib.loads(text)
        if fmt == "json":
            return json.loads(text)
        if fmt == "yaml":
            return yaml.safe_load(text)
    except tomllib.TOMLDecodeError as exc:
        raise DagError(f"{name}: not valid TOML: {exc}") from None
    except json.JSONDecodeError as exc:
        raise DagError(f"{name}: not valid JSON: {exc.msg} (at line {exc.lineno}, column {exc.colno})") from None
    except yaml.YAMLError as exc:
        raise DagError(f"{name}: not valid YAML: {_yaml_problem(exc)}") from None
    raise DagError(f"{name}: unknown format {fmt!r}; use one of {', '.join(FORMATS)}")


def _yaml_problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} (at line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())


def _top_level(document: Any, name: str) -> tuple[list[Any], dict[str, Any]]:
    if isinstance(document, list):
        return document, {}
    if not isinstance(document, dict):
        raise DagError(f"{name}: expected a table with a `tasks` list (or a list of tasks), got {_kind(document)}")
    unknown = [key for key in document if key not in _TOP_KEYS]
    if unknown:
        raise DagError(f"{name}: unknown top-level key {unknown[0]!r}{_suggest(unknown[0], _TOP_KEYS)}")
    tasks = document.get("tasks")
    if not isinstance(tasks, list):
        got = "nothing" if tasks is None else _kind(tasks)
        raise DagError(f"{name}: `tasks` must be a list of tasks, got {got}")
    defaults = document.get("defaults", {})
    if not isinstance(defaults, dict):
        raise DagError(f"{name}: `defaults` must be a table, got {_kind(defaults)}")
    for key, value in defaults.items():
        if key not in _DEFAULTABLE:
            raise DagError(f"{name}: defaults: unknown key {key!r} (allowed: {', '.join(_DEFAULTABLE)})")
        _check_type(f"{name}: defaults.{key}", _FIELDS[key], value)
    return tasks, defaults


def _spec(name: str, index: int, raw: Any, defaults: Mapping[str, Any]) -> corral.TaskSpec:
    where = f"{name}: tasks[{index}]"
    if not isinstance(raw, dict):
        raise DagError(f"{where}: expected a table with an `id`, got {_kind(raw)}")
    task_id = raw.get("id")
    if isinstance(task_id, str) and task_id:
        where = f"{name}: task {task_id!r} (tasks[{index}])"
    for key, value in raw.items():
        if key not in _FIELDS:
            raise DagError(f"{where}: unknown field {key!r}{_suggest(key, _FIELDS)}")
        _check_type(f"{where}: {key}", _FIELDS[key], value)
    if not task_id:
        raise DagError(f"{where}: id: missing (every task needs a non-empty string id)")
    fields = {**defaults, **raw}
    lease = fields.get("lease_seconds")
    if lease is not None and lease <= 0:
        raise DagError(f"{where}: lease_seconds: must be greater than 0, got {lease}")
    backoff, backoff_max = fields.get("retry_backoff_seconds"), fields.get("retry_backoff_max_seconds")
    attempt_timeout = fields.get("attempt_timeout_seconds")
    return corral.TaskSpec(
        id=task_id,
        title=fields.get("title", ""),
        description=fields.get("description", ""),
        payload=fields.get("payload", "").encode("utf-8"),
        depends_on=tuple(fields.get("depends_on", ())),
        priority=fields.get("priority", 0),
        max_attempts=fields.get("max_attempts"),
        lease_duration=datetime.timedelta(seconds=lease) if lease is not None else None,
        required_role=fields.get("required_role", ""),
        not_before=_instant(where, fields.get("not_before")),
        retry_backoff=datetime.timedelta(seconds=backoff) if backoff is not None else None,
        retry_backoff_max=datetime.timedelta(seconds=backoff_max) if backoff_max is not None else None,
        concurrency_key=fields.get("concurrency_key", ""),
        attempt_timeout=datetime.timedelta(seconds=attempt_timeout) if attempt_timeout is not None else None,
        review=_review(where, fields.get("review")),
        resources=_resources(where, "resources", fields.get("resources", ())),
        shared_resources=_resources(where, "shared_resources", fields.get("shared_resources", ())),
    )


def _resources(where: str, key: str, paths: Sequence[str]) -> tuple[str, ...]:
    """A task's path leases as listed; the daemon checks their form and overlaps, and
    `explain_create_error` points its refusals back here. Caught here: what is plainly
    not a path, so the message can say so before anything is sent."""
    for index, path in enumerate(paths):
        if not path.strip():
            raise DagError(f"{where}: {key}[{index}]: must be a non-empty path such as 'repo:web/src/api'")
    return tuple(paths)


def _review(where: str, table: dict[str, Any] | None) -> corral.ReviewPolicy | None:
    """A task's `review` table as its ReviewPolicy: `{}` has the Lead review, with the
    daemon's max_rounds; None (no table) means no review."""
    if table is None:
        return None
    for key, value in table.items():
        if key not in _REVIEW_KEYS:
            raise DagError(f"{where}: review: unknown key {key!r}{_suggest(key, _REVIEW_KEYS)}")
        _check_type(f"{where}: review.{key}", _REVIEW_KEYS[key], value)
    return corral.ReviewPolicy(reviewer_role=table.get("reviewer_role", ""), max_rounds=table.get("max_rounds", 0))


def _instant(where: str, text: str | None) -> datetime.datetime | None:
    """An ISO 8601 instant with its offset ("2026-12-24T09:00:00+01:00", or "...Z")."""
    if text is None:
        return None
    try:
        instant = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise DagError(f"{where}: not_before: not an ISO 8601 date and time: {_show(text)}") from None
    if instant.tzinfo is None:
        raise DagError(f"{where}: not_before: needs a UTC offset (such as Z or +01:00): {_show(text)}")
    return instant


def _check_type(where: str, kind: str, value: Any) -> None:
    ok = {
        "string": isinstance(value, str),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, (int, float)) and not isinstance(value, bool),
        "list of strings": isinstance(value, list) and all(isinstance(item, str) for item in value),
        "table": isinstance(value, dict),
    }[kind]
    if not ok:
        article = "an" if kind[0] in "aeiou" else "a"
        raise DagError(f"{where}: expected {article} {kind}, got {_kind(value)} {_show(value)}".rstrip())


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, list):
        bad = next((item for item in value if not isinstance(item, str)), None)
        return f"a list containing {_kind(bad)} {_show(bad)}" if bad is not None else "a list"
    names = {str: "string", int: "integer", float: "number", dict: "table", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _show(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return ""
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _suggest(key: str, choices: Sequence[str] | Mapping[str, Any]) -> str:
    close = difflib.get_close_matches(key, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(choices)})"


def _listed_value(dag: DagFile, index: int, field: str, position: int) -> str:
    """` ('a//b')`: the file's value at `field[position]` of `tasks[index]`, when it is a list."""
    if not 0 <= index < len(dag.specs):
        return ""
    values = getattr(dag.specs[index], field, None)
    if not isinstance(values, tuple) or not 0 <= position < len(values):
        return ""
    return f" ({_show(values[position])})"


def explain_create_error(exc: corral.CorralError, dag: DagFile, positions: Sequence[int] | None = None) -> str | None:
    """A daemon refusal of CreateTasks, pointed at the task and field in the file.

    `positions` maps the batch's `tasks[i]` to the file's, when the batch sent was not
    the whole file. None when the error names no `tasks[i]` field (the caller reports
    it as is).
    """
    candidates: list[tuple[str, str]] = []
    if isinstance(exc, corral.InvalidArgument):
        candidates += [(v.field, v.description) for v in exc.field_violations]
    field = exc.metadata.get("field", "")
    if field:
        candidates.append((field, exc.details.removeprefix(f"{field}: ")))
    for path, description in candidates:
        match = _FIELD_PATH.match(path)
        if match is None:
            continue
        index = int(match.group(1))
        if positions is not None:
            index = positions[index] if 0 <= index < len(positions) else -1
        task_id = dag.task_id(index)
        where = f"task {task_id!r} (tasks[{index}])" if task_id else f"tasks[{index}]"
        wire_field = match.group(2)
        if wire_field in _SECONDS_IN_FILE:  # the daemon speaks milliseconds; the file, seconds
            description = _MILLISECONDS.sub(lambda m: f"{int(m.group(1)) / 1000:g}s", description)
        what = f"{_WIRE_TO_FILE.get(wire_field, wire_field)}" if wire_field else ""
        if what and match.group(3) is not None:
            what += f"[{match.group(3)}]{_listed_value(dag, index, wire_field, int(match.group(3)))}"
        return f"{dag.name}: {where}: {what + ': ' if what else ''}{description}"
    return None
