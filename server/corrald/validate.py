"""Pure checks on incoming values (no SQL, no clock): refuse, never clamp."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import unicodedata
from collections.abc import Sequence

from .config import Limits
from .errors import InvalidArgument
from .leasepaths import check_resources
from .model import Budget, Progress, ReviewPolicy, TaskSpec, Usage, Verdict

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


# A claim token a teammate names (FreeSlot, IdleRequest.busy_claim_tokens): the daemon
# mints 32 characters; a longer one can name no claim.
CLAIM_TOKEN_MAX_CHARS = 128


def check_claim_token(field: str, value: str) -> None:
    if not value:
        raise InvalidArgument(field, "must not be empty")
    if len(value) > CLAIM_TOKEN_MAX_CHARS:
        raise InvalidArgument(field, f"longer than {CLAIM_TOKEN_MAX_CHARS} characters")


def busy_claim_tokens(tokens: Sequence[str], *, hold: bool, slots: int) -> frozenset[str]:
    """An opening's `busy_claim_tokens`: only with hold_slots_until_freed, at most `slots`."""
    if tokens and not hold:
        raise InvalidArgument("busy_claim_tokens", "only with hold_slots_until_freed")
    if len(tokens) > slots:
        raise InvalidArgument("busy_claim_tokens", f"more than slots ({slots}) tokens")
    for token in tokens:
        check_claim_token("busy_claim_tokens", token)
    return frozenset(tokens)


def check_concurrency_key(field: str, value: str, limits: Limits) -> None:
    """A concurrency key as a spec carries it ('' for none) or SetConcurrencyLimit names it."""
    if len(value) > limits.concurrency_key_max_chars:
        raise InvalidArgument(field, f"longer than {limits.concurrency_key_max_chars} characters")
    if any(ch.isspace() for ch in value) or _unprintable(value):
        raise InvalidArgument(field, "must not contain whitespace, control, format or unassigned characters")


def concurrency_limit(key: str, limit: int, limits: Limits) -> None:
    """SetConcurrencyLimit's request: a key, and a limit (0 removes the key's)."""
    if not key:
        raise InvalidArgument("key", "must not be empty")
    check_concurrency_key("key", key, limits)
    if limit != 0:
        check_range("limit", limit, 1, limits.concurrency_limit_max)


def check_title(field: str, value: str, limits: Limits) -> None:
    if len(value) > limits.title_max_chars:
        raise InvalidArgument(field, f"longer than {limits.title_max_chars} characters")
    if _unprintable(value):
        raise InvalidArgument(field, "must not contain control, format or unassigned characters (one printable line)")


def check_text(field: str, value: str, max_bytes: int) -> None:
    if len(value.encode("utf-8", "surrogatepass")) > max_bytes:
        raise InvalidArgument(field, f"longer than {max_bytes} bytes")


def question(value: str, limits: Limits) -> None:
    """A question to the Lead: some text, within the text limit."""
    if not value.strip():
        raise InvalidArgument("question", "must not be empty")
    check_text("question", value, limits.text_max_bytes)


ARTIFACT_NAME_MAX_CHARS = 200
DEFAULT_MEDIA_TYPE = "application/octet-stream"
# RFC 6838's restricted-name, for the type and for the subtype; no parameters.
_MEDIA_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}")


def artifact_name(value: str) -> None:
    """A relative path any file system can hold: 1 to 200 characters, `/`-separated
    segments none of which is empty, `.` or `..`, no backslash, no control character."""
    field = "header.name"
    if not value:
        raise InvalidArgument(field, "must not be empty")
    if len(value) > ARTIFACT_NAME_MAX_CHARS:
        raise InvalidArgument(field, f"longer than {ARTIFACT_NAME_MAX_CHARS} characters")
    if value.startswith("/"):
        raise InvalidArgument(field, "must be a relative path (no leading '/')")
    if "\\" in value:
        raise InvalidArgument(field, "must not hold a backslash (segments are separated by '/')")
    if any(unicodedata.category(char) == "Cc" for char in value):
        raise InvalidArgument(field, "must not hold a control character")
    for segment in value.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidArgument(field, f"has a segment {segment!r} (empty, '.' and '..' are refused)")


def media_type(value: str) -> str:
    """An artifact's media type as stored: `type/subtype` (no parameters), or the
    default for an empty one."""
    if not value:
        return DEFAULT_MEDIA_TYPE
    if _MEDIA_TYPE.fullmatch(value) is None:
        raise InvalidArgument(
            "header.media_type", "must be type/subtype (RFC 6838 name characters, no parameters such as charset)"
        )
    return value


def output_data(data: bytes, limits: Limits) -> None:
    """One append to a claim's output: some bytes, within the append limit."""
    if not data:
        raise InvalidArgument("data", "must not be empty")
    if len(data) > limits.output_append_max_bytes:
        raise InvalidArgument("data", f"larger than {limits.output_append_max_bytes} bytes; append it in parts")


def result(value: bytes, limits: Limits) -> None:
    if len(value) > limits.blob_max_bytes:
        raise InvalidArgument("result", f"larger than {limits.blob_max_bytes} bytes")


def task_ids(ids: Sequence[str], limits: Limits) -> None:
    """The ids a lead call names (CancelTasks, RetryTasks): some, and no more than a batch."""
    if not ids:
        raise InvalidArgument("ids", "must not be empty")
    if len(ids) > limits.batch_max:
        raise InvalidArgument("ids", f"more than {limits.batch_max} ids in one call")


# A teammate's proposal: discovered work comes in handfuls, and each waits for the Lead.
PROPOSAL_TASKS_MAX = 100
# The ids one DecideProposals or AddDependencies call names.
GRAPH_EDIT_IDS_MAX = 1_000


def proposal(
    raw_specs: Sequence[TaskSpec], task_id: str, token: str, block: bool, limits: Limits, now_ms: int
) -> PreparedBatch:
    """A teammate's ProposeTasks: 1 to 100 tasks checked as CreateTasks checks a batch, and
    the claim it names (a task and its token, both or neither; a split needs them)."""
    if not raw_specs:
        raise InvalidArgument("tasks", "must not be empty")
    if len(raw_specs) > PROPOSAL_TASKS_MAX:
        raise InvalidArgument("tasks", f"{len(raw_specs)} tasks, more than the {PROPOSAL_TASKS_MAX} one proposal holds")
    if bool(task_id) != bool(token):
        raise InvalidArgument("claim_token" if task_id else "task_id", "task_id and claim_token go together")
    if block and not task_id:
        raise InvalidArgument("block_claimed_task", "splits the task of a live claim: give task_id and claim_token")
    if token:
        check_claim_token("claim_token", token)
    return prepare_batch(raw_specs, limits, now_ms)


def graph_ids(field: str, ids: Sequence[str]) -> None:
    """The ids of a DecideProposals or AddDependencies call: 1 to 1,000, none empty."""
    if not ids:
        raise InvalidArgument(field, "must not be empty")
    if len(ids) > GRAPH_EDIT_IDS_MAX:
        raise InvalidArgument(field, f"{len(ids)} ids, more than {GRAPH_EDIT_IDS_MAX} in one call")
    if any(not task_id for task_id in ids):
        raise InvalidArgument(field, "an id is empty")


def teammate(name: str, roles: Sequence[str], limits: Limits) -> None:
    """A new teammate's name and roles (AddTeammate)."""
    check_id("name", name, limits)
    if name.casefold() in RESERVED_NAMES:  # "Lead" would read as the lead
        raise InvalidArgument("name", f"{name!r} is reserved")
    if len(roles) > limits.roles_max:
        raise InvalidArgument("roles", f"more than {limits.roles_max} roles")
    for role in roles:
        check_id("roles", role, limits)


def progress(text: str, fraction: float | None, limits: Limits) -> Progress | None:
    """A renewal's progress, or None when it carries none (a plain keepalive)."""
    check_text("progress", text, limits.progress_max_bytes)
    if fraction is not None and not 0.0 <= fraction <= 1.0:  # NaN fails both comparisons
        raise InvalidArgument("progress_fraction", f"{fraction} is outside [0, 1]")
    if not text and fraction is None:
        return None
    return Progress(text, fraction)


def usage(reported: Usage | None, limits: Limits) -> Usage | None:
    """A call's usage report, checked; None when it carries nothing to add (so a call
    without usage costs no statement for it)."""
    if reported is None:
        return None
    for field in ("input_tokens", "output_tokens", "cost_micros"):
        if getattr(reported, field) < 0:
            raise InvalidArgument(f"usage.{field}", "must not be negative")
    if len(reported.model) > limits.model_max_chars:
        raise InvalidArgument("usage.model", f"longer than {limits.model_max_chars} characters")
    if not (reported.input_tokens or reported.output_tokens or reported.cost_micros or reported.model):
        return None
    return reported


def budget(max_cost_micros: int, max_tokens: int) -> Budget:
    for field, value in (("max_cost_micros", max_cost_micros), ("max_tokens", max_tokens)):
        if value < 0:
            raise InvalidArgument(field, "must not be negative (0 is no limit)")
    return Budget(max_cost_micros, max_tokens)


def check_range(field: str, value: int, low: int, high: int, unit: str = "") -> None:
    if not low <= value <= high:
        raise InvalidArgument(field, f"{value}{unit} is outside [{low}{unit}, {high}{unit}]")


def defaulted(field: str, value: int, default: int, low: int, high: int, unit: str = "") -> int:
    """Zero means "use the default"; anything else must be in range."""
    if value == 0:
        return default
    check_range(field, value, low, high, unit)
    return value


def normalize_spec(index: int, raw: TaskSpec, limits: Limits, now_ms: int) -> TaskSpec:
    """The spec checked, with its defaults applied; `now_ms` bounds how far ahead
    `not_before_time` may lie."""
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
    if raw.not_before_ms is not None and raw.not_before_ms > now_ms + limits.not_before_ahead_max_ms:
        raise InvalidArgument(f"{at}.not_before_time", "more than a year ahead")
    check_concurrency_key(f"{at}.concurrency_key", raw.concurrency_key, limits)
    backoff, backoff_max = _retry_backoffs(at, raw, limits)
    if raw.trace_parent:
        check_trace_parent(f"{at}.trace_parent", raw.trace_parent)
    check_resources(at, raw.resources, raw.shared_resources)
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
        not_before_ms=raw.not_before_ms,
        retry_backoff_ms=backoff,
        retry_backoff_max_ms=backoff_max,
        trace_parent=raw.trace_parent,
        concurrency_key=raw.concurrency_key,
        attempt_timeout_ms=_attempt_timeout(at, raw, limits),
        review=_review(at, raw.review, limits),
        resources=tuple(raw.resources),
        shared_resources=tuple(raw.shared_resources),
    )


REVIEW_ROUNDS_DEFAULT = 3
REVIEW_ROUNDS_MAX = 20


def _review(at: str, raw: ReviewPolicy | None, limits: Limits) -> ReviewPolicy | None:
    """A review policy with its rounds defaulted: a reviewer role (checked as a role), or
    '' for the Lead."""
    if raw is None:
        return None
    if raw.reviewer_role:
        check_id(f"{at}.review.reviewer_role", raw.reviewer_role, limits)
    rounds = defaulted(f"{at}.review.max_rounds", raw.max_rounds, REVIEW_ROUNDS_DEFAULT, 1, REVIEW_ROUNDS_MAX)
    return ReviewPolicy(raw.reviewer_role, rounds)


def verdict(value: Verdict | None, limits: Limits) -> None:
    """A review's verdict: a rejection says why."""
    if value is None:
        return
    check_text("verdict.feedback", value.feedback, limits.text_max_bytes)
    if not value.approve and not value.feedback.strip():
        raise InvalidArgument("verdict.feedback", "a rejection says why: feedback must not be empty")


# W3C Trace Context, "traceparent": version-traceid-parentid-flags, lowercase hex.
# A later version may append fields after a dash; version ff is invalid, and
# all-zero ids are invalid (https://www.w3.org/TR/trace-context/#traceparent-header).
_TRACE_PARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^\s]*)?")
TRACE_PARENT_MAX_CHARS = 512


def check_trace_parent(field: str, value: str) -> None:
    match = _TRACE_PARENT.fullmatch(value) if len(value) <= TRACE_PARENT_MAX_CHARS else None
    if (
        match is None
        or match.group(1) == "ff"
        or (match.group(1) == "00" and match.group(5))
        or set(match.group(2)) == {"0"}
        or set(match.group(3)) == {"0"}
    ):
        raise InvalidArgument(field, "not a W3C traceparent (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>)")


def _attempt_timeout(at: str, raw: TaskSpec, limits: Limits) -> int | None:
    if raw.attempt_timeout_ms is None:
        return None
    check_range(
        f"{at}.attempt_timeout",
        raw.attempt_timeout_ms,
        limits.attempt_timeout_min_ms,
        limits.attempt_timeout_max_ms,
        "ms",
    )
    return raw.attempt_timeout_ms


def _retry_backoffs(at: str, raw: TaskSpec, limits: Limits) -> tuple[int, int]:
    """(first wait, longest wait) before a retry, in ms: unset takes the default, zero is no wait."""
    backoff = limits.retry_backoff_default_ms if raw.retry_backoff_ms is None else raw.retry_backoff_ms
    check_range(f"{at}.retry_backoff", backoff, 0, limits.retry_backoff_max_ms, "ms")
    if raw.retry_backoff_max_ms is None:
        return backoff, backoff * limits.retry_backoff_growth_max
    check_range(f"{at}.retry_backoff_max", raw.retry_backoff_max_ms, backoff, limits.retry_backoff_cap_max_ms, "ms")
    return backoff, raw.retry_backoff_max_ms


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
    limits: Limits  # those the digests were made with (spec_digest_with_trace)


def prepare_batch(raw_specs: Sequence[TaskSpec], limits: Limits, now_ms: int) -> PreparedBatch:
    """Checks and digests a batch; CPU work that stays off the writer thread."""
    specs = normalize_batch(raw_specs, limits, now_ms)
    digests = [spec_digest(spec, limits) for spec in specs]
    return PreparedBatch(specs, digests, batch_digest(digests), limits)


def batch_digest(spec_digests: Sequence[bytes]) -> bytes:
    """What makes two batches sent with one request id the same: their specs, in order."""
    whole = hashlib.sha256()
    for digest in spec_digests:
        whole.update(digest)
    return whole.digest()


def normalize_batch(raw_specs: Sequence[TaskSpec], limits: Limits, now_ms: int) -> list[TaskSpec]:
    """Checks every spec, duplicate ids and cycles inside the batch."""
    check_batch_size(
        len(raw_specs),
        sum(len(raw.depends_on) for raw in raw_specs),
        sum(id_bytes(raw.id) for raw in raw_specs),
        limits,
    )
    specs = [normalize_spec(i, raw, limits, now_ms) for i, raw in enumerate(raw_specs)]
    positions: dict[str, int] = {}
    for i, spec in enumerate(specs):
        if spec.id in positions:
            raise InvalidArgument(f"tasks[{i}].id", f"duplicate id {spec.id!r} (also tasks[{positions[spec.id]}])")
        positions[spec.id] = i
    _refuse_cycles(specs, positions)
    return specs


def _refuse_cycles(specs: list[TaskSpec], positions: dict[str, int]) -> None:
    # No task on the board depends on one of this batch (AddDependencies only names
    # tasks on the board already), so a cycle through the batch's edges runs within
    # it: Kahn's algorithm over the batch edges.
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


def spec_digest(spec: TaskSpec, limits: Limits = Limits()) -> bytes:
    """What makes two specs of one id the same. The time gates count only when they
    differ from the defaults, and the concurrency key only when set, so a spec created
    before they existed keeps its digest. The trace context does not count: it says
    where the request came from, not what the task is, so a spec sent again from
    another span is the same spec (the task keeps the trace context it was created with)."""
    return _digest(_spec_fields(spec, limits, ""))


def spec_digest_with_trace(spec: TaskSpec, trace_parent: str, limits: Limits = Limits()) -> bytes:
    """The digest earlier versions of the daemon stored for a spec created with
    `trace_parent`, when the trace context counted (in its place after the time gates).
    The spec's own trace context is ignored; `trace_parent` is the one stored with the task."""
    return _digest(_spec_fields(spec, limits, trace_parent))


def _spec_fields(spec: TaskSpec, limits: Limits, trace_parent: str) -> list:
    fields: list = [
        spec.id,
        spec.title,
        spec.description,
        spec.payload.hex(),
        list(spec.depends_on),
        spec.priority,
        spec.max_attempts,
        spec.lease_ms,
        spec.required_role,
    ]
    backoff = limits.retry_backoff_default_ms
    gates = [spec.not_before_ms, spec.retry_backoff_ms, spec.retry_backoff_max_ms]
    if gates != [None, backoff, backoff * limits.retry_backoff_growth_max]:
        fields.append(gates)
    if trace_parent:
        fields.append({"trace_parent": trace_parent})
    if spec.concurrency_key:  # likewise: a spec from before keys keeps its digest
        fields.append({"concurrency_key": spec.concurrency_key})
    if spec.attempt_timeout_ms is not None:  # appended only when set: older specs keep their digest
        fields.append({"attempt_timeout_ms": spec.attempt_timeout_ms})
    if spec.review is not None:  # likewise
        fields.append({"review": [spec.review.reviewer_role, spec.review.max_rounds]})
    if spec.resources or spec.shared_resources:  # likewise
        fields.append({"resources": list(spec.resources), "shared_resources": list(spec.shared_resources)})
    return fields


def _digest(fields: list) -> bytes:
    canonical = json.dumps(fields, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).digest()
