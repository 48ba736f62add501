"""Pure checks on incoming values (no SQL, no clock): refuse, never clamp."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import unicodedata
from collections.abc import Sequence

from .config import Limits
from .errors import InvalidArgument
from .model import TaskSpec

RESERVED_NAMES = frozenset({"lead", "*"})


# Unicode categories no id or title may hold: controls (C0, DEL, C1), format
# characters (U+202E turns text around, U+FEFF and zero widths hide in it),
# surrogates, private use and unassigned code points. A terminal board or a
# log would otherwise show something other than what is stored.
# The two joiners are format characters too, but scripts (ZWNJ) and emoji
# sequences such as the rainbow flag (ZWJ) need them.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})
_JOINERS = frozenset({"\u200c", "\u200d"})


def _unprintable(text: str) -> bool:
    return any(unicodedata.category(ch) in _UNPRINTABLE and ch not in _JOINERS for ch in text)


def check_id(field: str, value: str, limits: Limits) -> None:
    if not value:
        raise InvalidArgument(field, "must not be empty")
    if len(value) > limits.name_max_chars:
        raise InvalidArgument(field, f"longer than {limits.name_max_chars} characters")
    if any(ch.isspace() for ch in value) or _unprintable(value):
        raise InvalidArgument(field, "must not contain whitespace, control, format or unassigned characters")


def check_title(field: str, value: str, limits: Limits) -> None:
    if len(value) > limits.title_max_chars:
        raise InvalidArgument(field, f"longer than {limits.title_max_chars} characters")
    if _unprintable(value):
        raise InvalidArgument(field, "must not contain control, format or unassigned characters (one printable line)")


def check_text(field: str, value: str, max_bytes: int) -> None:
    if len(value.encode("utf-8", "surrogatepass")) > max_bytes:
        raise InvalidArgument(field, f"longer than {max_bytes} bytes")


def check_range(field: str, value: int, low: int, high: int, unit: str = "") -> None:
    if not low <= value <= high:
        raise InvalidArgument(field, f"{value}{unit} is outside [{low}{unit}, {high}{unit}]")


def defaulted(field: str, value: int, default: int, low: int, high: int, unit: str = "") -> int:
    """Zero means "use the default"; anything else must be in range."""
    if value == 0:
        return default
    check_range(field, value, low, high, unit)
    return value


def normalize_spec(index: int, raw: TaskSpec, limits: Limits) -> TaskSpec:
    at = f"tasks[{index}]"
    check_id(f"{at}.id", raw.id, limits)
    check_title(f"{at}.title", raw.title, limits)
    check_text(f"{at}.description", raw.description, limits.text_max_bytes)
    if len(raw.payload) > limits.blob_max_bytes:
        raise InvalidArgument(f"{at}.payload", f"larger than {limits.blob_max_bytes} bytes")
    if len(raw.depends_on) > limits.deps_per_task_max:
        raise InvalidArgument(f"{at}.depends_on", f"more than {limits.deps_per_task_max} dependencies")
    if len(set(raw.depends_on)) != len(raw.depends_on):
        raise InvalidArgument(f"{at}.depends_on", "names a dependency twice")
    if raw.id in raw.depends_on:
        raise InvalidArgument(f"{at}.depends_on", f"task {raw.id!r} depends on itself")
    for dep in raw.depends_on:
        check_id(f"{at}.depends_on", dep, limits)
    check_range(f"{at}.priority", raw.priority, limits.priority_min, limits.priority_max)
    if raw.required_role:
        check_id(f"{at}.required_role", raw.required_role, limits)
    return TaskSpec(
        id=raw.id,
        title=raw.title,
        description=raw.description,
        payload=raw.payload,
        depends_on=tuple(raw.depends_on),
        priority=raw.priority,
        max_attempts=defaulted(
            f"{at}.max_attempts", raw.max_attempts, limits.max_attempts_default, 1, limits.max_attempts_max
        ),
        lease_ms=defaulted(
            f"{at}.lease_duration",
            raw.lease_ms,
            limits.lease_default_ms,
            limits.lease_min_ms,
            limits.lease_max_ms,
            "ms",
        ),
        required_role=raw.required_role,
    )


def check_batch_size(tasks: int, dependencies: int, id_bytes: int, limits: Limits) -> None:
    """Refuses a batch bigger than one writer job may be: its work grows with its
    tasks and their dependencies, and its reply with its ids."""
    if not tasks:
        raise InvalidArgument("tasks", "must not be empty")
    if tasks > limits.batch_max:
        raise InvalidArgument("tasks", f"more than {limits.batch_max} tasks in one batch")
    if dependencies > limits.batch_deps_max:
        raise InvalidArgument(
            "tasks",
            f"{dependencies} dependencies in one batch, more than {limits.batch_deps_max}: send the batch in parts,"
            " later parts may depend on tasks of earlier ones",
        )
    if id_bytes > limits.batch_id_bytes_max:
        raise InvalidArgument(
            "tasks", f"the batch's ids take {id_bytes} bytes, more than {limits.batch_id_bytes_max}: send it in parts"
        )


def id_bytes(task_id: str) -> int:
    return len(task_id.encode("utf-8", "surrogatepass"))


@dataclasses.dataclass(frozen=True, slots=True)
class PreparedBatch:
    """A checked CreateTasks batch with its digests, made before it reaches the writer."""

    specs: list[TaskSpec]
    spec_digests: list[bytes]
    digest: bytes  # of the whole batch, for request_id replays


def prepare_batch(raw_specs: Sequence[TaskSpec], limits: Limits) -> PreparedBatch:
    """Checks and digests a batch; CPU work that stays off the writer thread."""
    specs = normalize_batch(raw_specs, limits)
    digests = [spec_digest(spec) for spec in specs]
    whole = hashlib.sha256()
    for digest in digests:
        whole.update(digest)
    return PreparedBatch(specs, digests, whole.digest())


def normalize_batch(raw_specs: Sequence[TaskSpec], limits: Limits) -> list[TaskSpec]:
    """Checks every spec, duplicate ids and cycles inside the batch."""
    check_batch_size(
        len(raw_specs),
        sum(len(raw.depends_on) for raw in raw_specs),
        sum(id_bytes(raw.id) for raw in raw_specs),
        limits,
    )
    specs = [normalize_spec(i, raw, limits) for i, raw in enumerate(raw_specs)]
    positions: dict[str, int] = {}
    for i, spec in enumerate(specs):
        if spec.id in positions:
            raise InvalidArgument(f"tasks[{i}].id", f"duplicate id {spec.id!r} (also tasks[{positions[spec.id]}])")
        positions[spec.id] = i
    _refuse_cycles(specs, positions)
    return specs


def _refuse_cycles(specs: list[TaskSpec], positions: dict[str, int]) -> None:
    # Tasks already on the board cannot depend on new ones, so a cycle can
    # only run through this batch: Kahn's algorithm over the batch edges.
    waiting_on = [sum(1 for dep in spec.depends_on if dep in positions) for spec in specs]
    dependents: dict[int, list[int]] = {}
    for i, spec in enumerate(specs):
        for dep in spec.depends_on:
            if dep in positions:
                dependents.setdefault(positions[dep], []).append(i)
    ready = [i for i, count in enumerate(waiting_on) if count == 0]
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        for j in dependents.get(i, ()):
            waiting_on[j] -= 1
            if waiting_on[j] == 0:
                ready.append(j)
    if done != len(specs):
        cycle = _one_cycle(specs, positions, waiting_on)
        path = " → ".join(specs[i].id for i in cycle)
        raise InvalidArgument(f"tasks[{cycle[0]}].depends_on", f"dependency cycle: {path}")


def _one_cycle(specs: list[TaskSpec], positions: dict[str, int], waiting_on: list[int]) -> list[int]:
    """One cycle among the tasks Kahn's algorithm left stuck, as positions, closed.

    Every stuck task depends on another stuck task (that is why it is stuck),
    so following such dependencies from any stuck task must come back round;
    the walk from the first repeat is the cycle: `[a, c, b, a]` for a → c → b → a.
    """
    stuck = {i for i, count in enumerate(waiting_on) if count > 0}
    walk, seen = [min(stuck)], {min(stuck): 0}
    while True:
        here = walk[-1]
        step = next(positions[dep] for dep in specs[here].depends_on if positions.get(dep) in stuck)
        if step in seen:
            return walk[seen[step] :] + [step]
        seen[step] = len(walk)
        walk.append(step)


def spec_digest(spec: TaskSpec) -> bytes:
    canonical = json.dumps(
        [
            spec.id,
            spec.title,
            spec.description,
            spec.payload.hex(),
            list(spec.depends_on),
            spec.priority,
            spec.max_attempts,
            spec.lease_ms,
            spec.required_role,
        ],
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).digest()
