"""Hostile input: generated requests for every RPC, random bytes as messages, random (and cyclic)
graphs, hostile strings in every string field (design §4 strict requests and error table, §7 limits).
"""

from __future__ import annotations

import base64
import collections
import itertools
import random
import unicodedata

import grpc
import pytest
from google.protobuf import duration_pb2, message_factory, timestamp_pb2
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc
from corrald import errors as corrald_errors
from corrald.config import Limits
from corrald.model import TaskSpec
from corrald.validate import normalize_batch

from .rel_harness import SOAK, Daemon, Lead, dur, md, on_postgres, pick, schema_of, status_details

SERVICES = [pb.DESCRIPTOR.services_by_name[n] for n in ("LeadService", "TeammateService", "BoardService")]
METHODS = [(f"/{s.full_name}/{m.name}", m) for s in SERVICES for m in s.methods]
FORBIDDEN = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}
INT64 = (-(2**63), 2**63 - 1)

# ---------------------------------------------------------------- a daemon with a populated board


@pytest.fixture(scope="module")
def fuzz_board(tmp_path_factory):
    """One daemon for the fuzzing tests, with tasks, teammates, a plan and a shutdown request."""
    tmp = tmp_path_factory.mktemp("fuzz")
    daemon = Daemon(tmp / "state").start()
    lead = Lead(daemon)
    tokens = {"fz-a": lead.add_teammate("fz-a", roles=["r1"]), "fz-b": lead.add_teammate("fz-b", require_plan=True)}
    lead.create(
        [pb.TaskSpec(id=f"t{i}", title="t", depends_on=[f"t{i - 1}"] if i % 3 else []) for i in range(10)], "fz"
    )
    mate = pb_grpc.TeammateServiceStub(lead.channel)
    call = mate.Idle(pb.IdleRequest(), metadata=md(tokens["fz-a"]), timeout=10)
    claim = next(r for r in call if r.HasField("claim")).claim
    call.cancel()
    mate.SubmitPlan(pb.SubmitPlanRequest(plan="p"), metadata=md(tokens["fz-b"]))
    lead.lead.RequestShutdown(pb.RequestShutdownRequest(name="fz-b", reason="r"), metadata=lead.md)
    lead.add_teammate("fz-victim")  # the only teammate name in the pool: it may be removed, fz-a/fz-b stay
    pool = [
        "",
        "t0",
        "t1",
        "t5",
        "fz-victim",
        "lead",
        "*",
        "r1",
        "1",
        "2",
        "0",
        "-1",
        claim.claim_token,
        "99999999999999999999",
        "²",
        "\x00",
        " ",
        "x" * 129,
        "😀",
        "a b",
    ]
    yield {"daemon": daemon, "lead": lead, "tokens": {"lead": lead.token, **tokens}, "pool": pool, "claim": claim}
    lead.close()
    daemon.stop()


# ---------------------------------------------------------------- strategies from the descriptors


def _ints(low: int, high: int):
    edges = [v for v in (0, 1, -1, low, high, low + 1, high - 1, 1000, 60_000) if low <= v <= high]
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


def _scalar(field, pool):
    t = field.type
    if t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32):
        return _ints(-(2**31), 2**31 - 1)
    if t in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64):
        return _ints(*INT64)
    if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return _ints(0, 2**32 - 1)
    if t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return _ints(0, 2**64 - 1)
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t == FieldDescriptor.TYPE_STRING:
        return st.one_of(st.sampled_from(pool), st.text(max_size=40))
    if t == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=64)
    if t == FieldDescriptor.TYPE_ENUM:
        return st.one_of(st.sampled_from([v.number for v in field.enum_type.values]), st.integers(-3, 40))
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=True)
    raise AssertionError(f"unhandled field type {t}")


def _message(descriptor, pool, depth: int = 0):
    if descriptor.full_name == "google.protobuf.Duration":
        return st.builds(
            lambda s, n: duration_pb2.Duration(seconds=s, nanos=n),
            _ints(-315_576_000_000, 315_576_000_000),
            _ints(-999_999_999, 999_999_999),
        )
    if descriptor.full_name == "google.protobuf.Timestamp":
        return st.builds(lambda s, n: timestamp_pb2.Timestamp(seconds=s, nanos=n), _ints(*INT64), _ints(0, 10**9))
    cls = message_factory.GetMessageClass(descriptor)
    fields = {}
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            value = _message(field.message_type, pool, depth + 1) if depth < 3 else st.nothing()
        else:
            value = _scalar(field, pool)
        if field.is_repeated:
            value = st.lists(value, max_size=4 if depth == 0 else 2)
        fields[field.name] = st.one_of(st.none(), value)

    def build(values: dict):
        message = cls()
        for name, value in values.items():
            if value is None:
                continue
            target = getattr(message, name)
            field = descriptor.fields_by_name[name]
            if field.is_repeated and field.type == FieldDescriptor.TYPE_MESSAGE:
                for item in value:
                    target.add().CopyFrom(item)
            elif field.is_repeated:
                target.extend(value)
            elif field.type == FieldDescriptor.TYPE_MESSAGE:
                target.CopyFrom(value)
            else:
                setattr(message, name, value)
        return message

    return st.fixed_dictionaries(fields).map(build)


def _call(channel, path: str, method, payload: bytes, metadata, *, raw: bool = False):
    """Calls one method with serialized bytes; returns (status code, reason)."""
    if method.server_streaming:
        call = channel.unary_stream(path, request_serializer=lambda b: b, response_deserializer=lambda b: b)(
            payload, metadata=metadata, timeout=0.3
        )
        try:
            for index, _ in enumerate(call):
                if index >= 2:
                    break
            call.cancel()
            return grpc.StatusCode.OK, ""
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return grpc.StatusCode.OK, "stream open"
            return error.code(), status_details(error)[0]
    try:
        channel.unary_unary(path, request_serializer=lambda b: b, response_deserializer=lambda b: b)(
            payload, metadata=metadata, timeout=10
        )
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as error:
        return error.code(), status_details(error)[0]


def _identity(tokens: dict, who: str):
    if who == "none":
        return ()
    if who == "garbage":
        return md("corral-tm-not-a-real-token")
    return md(tokens[who])


# ---------------------------------------------------------------- generated requests


@pytest.mark.timeout(pick(240, 1800))
def test_generated_requests_never_crash_or_answer_internal(fuzz_board, figures):
    """Hypothesis-generated requests for every RPC, from every kind of caller: the daemon never
    crashes and never answers INTERNAL or UNKNOWN. (600 examples, 400 on a PostgreSQL board,
    shared out among the RPCs: each gets its own run, so every RPC is reached however many
    the service has.)"""
    board = fuzz_board
    channel = board["daemon"].channel()
    examples = pick(600, 5000, postgres=400)
    codes = collections.Counter()
    per_method = collections.Counter()
    bad: list[str] = []

    def who(path: str):
        right = (
            ["lead"]
            if "LeadService" in path
            else ["fz-a", "fz-b"]
            if "TeammateService" in path
            else ["lead", "fz-a", "fz-b"]
        )
        return st.one_of(st.sampled_from(right), st.sampled_from(["lead", "fz-a", "fz-b", "none", "garbage"]))

    def run_for(path: str, method) -> None:
        @settings(
            max_examples=max(examples // len(METHODS), 1),
            deadline=None,
            database=None,
            derandomize=not SOAK,
            suppress_health_check=list(HealthCheck),
        )
        @given(_message(method.input_type, board["pool"]), who(path))
        def run(request, caller):
            code, reason = _call(channel, path, method, request.SerializeToString(), _identity(board["tokens"], caller))
            codes[code.name] += 1
            per_method[method.name] += 1
            if code in FORBIDDEN:
                bad.append(f"{path} as {caller}: {code.name} {reason} for {request!r}"[:500])

        run()

    for path, method in METHODS:
        run_for(path, method)
    alive = board["daemon"].alive()
    channel.close()
    figures(
        examples=sum(per_method.values()),
        methods_covered=len(per_method),
        codes=dict(codes),
        internal_or_unknown=len(bad),
        daemon_alive=alive,
    )
    assert alive, "the daemon died"
    assert len(per_method) == len(METHODS)
    assert not bad, "\n".join(bad[:10])


@pytest.mark.timeout(pick(120, 600))
def test_random_bytes_as_messages(fuzz_board, figures):
    """Random bytes (and valid messages with random bytes appended) sent to every RPC path with a
    valid credential of the right role: INVALID_ARGUMENT or a domain answer, never INTERNAL/UNKNOWN."""
    board = fuzz_board
    channel = board["daemon"].channel()
    examples = pick(300, 1500)
    codes = collections.Counter()
    bad: list[str] = []

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=not SOAK,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.sampled_from(METHODS), st.binary(max_size=256), st.booleans())
    def run(path_method, payload, who_lead):
        path, method = path_method
        who = "lead" if "LeadService" in path or ("BoardService" in path and who_lead) else "fz-a"
        code, reason = _call(channel, path, method, payload, _identity(board["tokens"], who), raw=True)
        codes[code.name] += 1
        if code in FORBIDDEN:
            bad.append(f"{path}: {code.name} {reason} for {payload!r}"[:300])

    run()
    alive = board["daemon"].alive()
    channel.close()
    figures(examples=sum(codes.values()), codes=dict(codes), internal_or_unknown=len(bad), daemon_alive=alive)
    assert alive
    assert not bad, "\n".join(bad[:10])


# ---------------------------------------------------------------- ids the daemon never issued


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "case",
    [
        ("DecidePlan", "²"),
        ("DecidePlan", "99999999999999999999"),
        ("RespondShutdown", "²"),
        ("RespondShutdown", "99999999999999999999"),
        ("ListTasks", base64.urlsafe_b64encode(b"after:99999999999999999999").decode()),
    ],
)
def test_malformed_ids_answer_not_found_or_invalid_argument(fuzz_board, case, figures):
    """An id that is not a number the daemon issued is NOT_FOUND / INVALID_ARGUMENT, never INTERNAL."""
    method, value = case
    board = fuzz_board
    channel = board["daemon"].channel()
    try:
        if method == "DecidePlan":
            pb_grpc.LeadServiceStub(channel).DecidePlan(
                pb.DecidePlanRequest(plan_id=value, approve=True), metadata=md(board["tokens"]["lead"]), timeout=10
            )
        elif method == "RespondShutdown":
            pb_grpc.TeammateServiceStub(channel).RespondShutdown(
                pb.RespondShutdownRequest(request_id=value), metadata=md(board["tokens"]["fz-a"]), timeout=10
            )
        else:
            pb_grpc.BoardServiceStub(channel).ListTasks(
                pb.ListTasksRequest(page_token=value), metadata=md(board["tokens"]["lead"]), timeout=10
            )
        code = grpc.StatusCode.OK
    except grpc.RpcError as error:
        code = error.code()
    finally:
        channel.close()
    figures(method=method, value=value, answer=code.name)
    assert code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)


# ---------------------------------------------------------------- random graphs


def _random_graph(rng: random.Random, prefix: str, board_ids: list[str]) -> tuple[list[tuple[str, list[str]]], bool]:
    """A random graph over a shuffled order; sometimes a back edge makes a cycle.
    Returns (tasks with their dependencies, whether it has a cycle by construction)."""
    size = rng.randint(1, 40)
    ids = [f"{prefix}-{i}" for i in range(size)]
    order = ids[:]
    rng.shuffle(order)
    position = {t: i for i, t in enumerate(order)}
    deps = {t: set() for t in ids}
    for t in ids:
        earlier = order[: position[t]]
        for d in rng.sample(earlier, min(len(earlier), rng.randint(0, 4))):
            deps[t].add(d)
        if board_ids and rng.random() < 0.2:
            deps[t].add(rng.choice(board_ids))
    cyclic = rng.random() < 0.4
    if cyclic:
        kind = rng.random()
        if kind < 0.15 or size == 1:
            t = rng.choice(ids)
            deps[t].add(t)  # self loop
        else:
            a, b = sorted(rng.sample(range(size), 2))
            # a path b -> ... -> a already exists or is added; then a depends on b closes the cycle
            chain = order[a : b + 1]
            for x, y in itertools.pairwise(chain):
                deps[y].add(x)
            deps[order[a]].add(order[b])
    graph = [(t, sorted(deps[t])) for t in ids]
    rng.shuffle(graph)
    return graph, cyclic


def _has_cycle(graph: list[tuple[str, list[str]]]) -> bool:
    ids = {t for t, _ in graph}
    edges = {t: [d for d in ds if d in ids] for t, ds in graph}
    state: dict[str, int] = {}

    def visit(node: str) -> bool:
        stack = [(node, iter(edges[node]))]
        state[node] = 1
        while stack:
            current, children = stack[-1]
            for child in children:
                if state.get(child) == 1:
                    return True
                if child not in state:
                    state[child] = 1
                    stack.append((child, iter(edges[child])))
                    break
            else:
                state[current] = 2
                stack.pop()
        return False

    return any(visit(t) for t in ids if t not in state)


@pytest.mark.timeout(pick(60, 300))
def test_random_graphs_cyclic_refused_acyclic_accepted(daemon, figures):
    """Random graphs, some cyclic: normalize_batch (all) and CreateTasks (a sample) never accept a
    cycle and always accept a valid graph; a refused batch writes nothing."""
    n_graphs, api_every = pick(200, 1000), pick(10, 10)
    rng = random.Random(2024)
    lead = Lead(daemon)
    board_ids: list[str] = []
    tally = collections.Counter()
    wrong: list[str] = []
    for g in range(n_graphs):
        graph, built_cyclic = _random_graph(rng, f"g{g}", board_ids)
        cyclic = _has_cycle(graph)
        assert cyclic == built_cyclic or not built_cyclic
        tally["cyclic" if cyclic else "acyclic"] += 1
        specs = [
            TaskSpec(
                id=t,
                title=t,
                description="",
                payload=b"",
                depends_on=tuple(ds),
                priority=0,
                max_attempts=0,
                lease_ms=0,
                required_role="",
            )
            for t, ds in graph
        ]
        try:
            normalize_batch(specs, Limits(), now_ms=0)
            accepted = True
        except corrald_errors.InvalidArgument:
            accepted = False
        if accepted == cyclic:
            wrong.append(f"normalize_batch: graph {g} cyclic={cyclic} accepted={accepted}")
        if g % api_every == 0:
            tally["api_calls"] += 1
            try:
                created = lead.create(specs_pb(graph), f"graph-{g}")
                api_accepted = True
                stored = [lead.board.GetTask(pb.GetTaskRequest(task_id=t.id), metadata=lead.md).task for t in created]
                got = {t.id: sorted(t.depends_on) for t in stored}
                if got != {t: ds for t, ds in graph}:
                    wrong.append(f"CreateTasks: graph {g} stored different dependencies")
                board_ids.extend(t for t, _ in graph)
            except grpc.RpcError as error:
                api_accepted = False
                if error.code() != grpc.StatusCode.INVALID_ARGUMENT:
                    wrong.append(f"CreateTasks: graph {g}: {error.code().name}")
                present = [t for t, _ in graph if lead.exists(t)]
                if present:
                    wrong.append(f"CreateTasks: refused graph {g} left {len(present)} tasks behind")
            if api_accepted == cyclic:
                wrong.append(f"CreateTasks: graph {g} cyclic={cyclic} accepted={api_accepted}")
    lead.close()
    figures(graphs=n_graphs, **tally, wrong_answers=len(wrong))
    assert not wrong, "\n".join(wrong[:10])


def specs_pb(graph):
    return [pb.TaskSpec(id=t, title=t, depends_on=ds) for t, ds in graph]


# ---------------------------------------------------------------- hostile strings in every string field

_TEXTS = [
    "'",
    '"',
    "''",
    "\\",
    "%_",
    "'; DROP TABLE tasks; --",
    "Robert'); DROP TABLE teammates;--",
    "\x00",
    "a\x00b\x00",
    "\x00" * 5,
    "\x01\x1f\x7f",
    "\r\n\t ",
    "😀🎉",
    "𝕳𝖊𝖑𝖑𝖔",
    "\U0010fffd\U00020000",
    "\u202eevil\u202c",
    "\ufeffBOM",
    "e\u0301",
    "ｆｕｌｌ",
    "NULL",
    "null",
    "${jndi:ldap://x/a}",
    "<script>alert(1)</script>",
    "%s%n%x",
    "../../etc/passwd",
    "İı",
    "\u2028\u2029",
    "🏳️‍🌈",
    "x' OR '1'='1",
    "SELECT * FROM claims",
    "/*",
    "*/",
    ";",
    "--",
    "🀄" * 50,
]
_IDS = [
    "'",
    '"',
    "';DROP/**/TABLE/**/tasks;--",
    "x'OR'1'='1",
    "😀",
    'a"b',
    "Robert');DROP/**/TABLE/**/teammates;--",
    "%",
    "_",
    "\\",
    "İı",
    "𝕏" * 128,
    "ｔａｓｋ",
    "e\u0301",
    "${jndi:x}",
    "<b>",
    "null",
    "NULL",
    "0",
    "-1",
    "1e309",
    "🏳️‍🌈",
    "/",
    "..",
    "*x",
    "lead2",
]
# Refused as ids (and names, roles): what a terminal or a log would show
# otherwise than stored (controls, bidi overrides, invisible or unassigned).
_REFUSED_IDS = ["\u202e", "\x7f", "\x9b", "\ufeffbom", "a\u200bb", "\U0010fffd", "\x00"]


def _printable(text: str) -> str:
    """`text` as a title may hold it: no control, format or unassigned characters."""
    unprintable = ("Cc", "Cf", "Cs", "Co", "Cn")
    return "".join(ch for ch in text if unicodedata.category(ch) not in unprintable or ch in "\u200c\u200d")


# A PostgreSQL board refuses U+0000 in text (its text type cannot hold it): there the texts
# without it make the round trip, and `test_nul_in_text` checks the refusal.
_STORED_TEXTS = [text for text in _TEXTS if not (on_postgres() and "\x00" in text)]


def _text(i: int) -> str:
    return _STORED_TEXTS[i % len(_STORED_TEXTS)]


@pytest.mark.timeout(pick(90, 300))
def test_hostile_strings_round_trip_byte_exact(daemon, figures):
    """Quotes, NULs, control and bidi characters, astral characters, SQL fragments and values at the
    size limits in every string (and bytes) field: stored and returned byte-exact; values past the
    limits refused; the database schema unchanged."""
    lead = Lead(daemon)
    schema_before = schema_of(daemon)
    mate = pb_grpc.TeammateServiceStub(lead.channel)
    mismatches: list[str] = []
    checked = collections.Counter()

    def same(what: str, got, want) -> None:
        checked[what] += 1
        if got != want:
            mismatches.append(f"{what}: {got!r:.80} != {want!r:.80}")

    planner_token = lead.add_teammate("planner", require_plan=True)
    expected_tasks: dict[str, pb.TaskSpec] = {}
    expected_messages_to_lead: list[tuple[str, str]] = []
    expected_answers: list[tuple[str, str]] = []
    for i, hostile_id in enumerate(_IDS):
        text = _text(i)
        title = _printable(text)[:200]
        payload = bytes(range(256)) * (i + 1) + text.encode()
        token = lead.add_teammate(hostile_id, roles=[hostile_id])
        mates = {t.name: t for t in lead.board.ListTeammates(pb.ListTeammatesRequest(), metadata=lead.md).teammates}
        same("teammate name/roles", list(mates[hostile_id].roles), [hostile_id])
        spec = pb.TaskSpec(
            id=hostile_id,
            title=title,
            description=text * 3,
            payload=payload,
            required_role=hostile_id,
            depends_on=[_IDS[i - 1]] if i else [],
            # Retried at once after the FailTask below: the retry's claim is checked, not the
            # wait before it (1 s by default, a second per id of the run).
            retry_backoff=dur(0),
        )
        expected_tasks[hostile_id] = spec
        created = lead.create([spec], request_id=hostile_id)[0]
        same("CreateTasks.id", created.id, spec.id)  # the reply says where the task stands; GetTask has the rest
        stored = lead.board.GetTask(pb.GetTaskRequest(task_id=hostile_id), metadata=lead.md).task
        for field in ("id", "title", "description", "required_role", "payload"):
            same(f"GetTask.{field}", getattr(stored, field), getattr(spec, field))
        same("GetTask.depends_on", list(stored.depends_on), list(spec.depends_on))
        lead.board.SendMessage(pb.SendMessageRequest(to=hostile_id, body=text), metadata=lead.md)
        shutdown = lead.lead.RequestShutdown(pb.RequestShutdownRequest(name=hostile_id, reason=text), metadata=lead.md)
        call = mate.Idle(pb.IdleRequest(poll_interval=dur(200)), metadata=md(token), timeout=20)
        message = next(call)
        same("Idle.message.body", message.message.body, text)
        same("Idle.message.sender", message.message.sender, "lead")
        request = next(call)
        same("Idle.shutdown_request.reason", request.shutdown_request.reason, text)
        mate.AckMessages(pb.AckMessagesRequest(through_seq=request.shutdown_request.seq), metadata=md(token))
        mate.RespondShutdown(
            pb.RespondShutdownRequest(request_id=shutdown.request_id, approve=False, reason=text), metadata=md(token)
        )
        expected_answers.append((hostile_id, text))
        claim = next(call).claim
        for field in ("id", "title", "description", "payload", "required_role"):
            same(f"Idle.claim.task.{field}", getattr(claim.task, field), getattr(spec, field))
        failed = mate.FailTask(
            pb.FailTaskRequest(task_id=hostile_id, claim_token=claim.claim_token, error=text, retryable=True),
            metadata=md(token),
        ).task
        same("FailTask.error", failed.error, text)
        claim = next(call).claim
        result = payload[::-1] + b"\x00"
        done = mate.CompleteTask(
            pb.CompleteTaskRequest(task_id=hostile_id, claim_token=claim.claim_token, result=result), metadata=md(token)
        ).task
        same("CompleteTask.result", done.result, result)
        call.cancel()
        got = lead.get_task(hostile_id)
        for field in ("id", "title", "description", "payload", "required_role", "error", "result"):
            want = {"error": text, "result": result}.get(field, getattr(spec, field, None))
            same(f"GetTask.{field}", getattr(got, field), want)
        owned = lead.board.ListTasks(pb.ListTasksRequest(owner=hostile_id), metadata=lead.md).tasks
        same("ListTasks(owner)", [t.id for t in owned], [hostile_id])
        board = pb_grpc.BoardServiceStub(lead.channel)
        board.SendMessage(pb.SendMessageRequest(to="lead", body=text), metadata=md(token))
        expected_messages_to_lead.append((hostile_id, text))
        plan_id = mate.SubmitPlan(pb.SubmitPlanRequest(plan=text), metadata=md(planner_token)).plan_id
        seq = lead.lead.DecidePlan(
            pb.DecidePlanRequest(plan_id=plan_id, approve=False, feedback=text), metadata=lead.md
        ).seq
        pcall = mate.Idle(pb.IdleRequest(poll_interval=dur(200)), metadata=md(planner_token), timeout=20)
        decision = next(r for r in pcall if r.HasField("plan_decision") and r.plan_decision.seq == seq)
        pcall.cancel()
        same("Idle.plan_decision.feedback", decision.plan_decision.feedback, text)
        mate.AckMessages(pb.AckMessagesRequest(through_seq=seq), metadata=md(planner_token))

    # The Watch feed replays everything byte-exact.
    plans, answers, to_lead = [], [], []
    events = lead.lead.Watch(pb.WatchRequest(after_seq=0), metadata=lead.md, timeout=30)
    for event in events:
        kind = event.WhichOneof("event")
        if kind == "task_changed" and event.task_changed.id in expected_tasks:
            spec = expected_tasks[event.task_changed.id]
            same("Watch.task_changed.title", event.task_changed.title, spec.title)
            same("Watch.task_changed.description", event.task_changed.description, spec.description)
            same("Watch.task_changed.payload", event.task_changed.payload, spec.payload)
        elif kind == "message":
            to_lead.append((event.message.sender, event.message.body))
        elif kind == "plan_submitted":
            plans.append(event.plan_submitted.plan)
        elif kind == "shutdown_answered":
            answers.append((event.shutdown_answered.teammate, event.shutdown_answered.reason))
        if (len(answers), len(to_lead), len(plans)) == (
            len(expected_answers),
            len(expected_messages_to_lead),
            len(_IDS),
        ):
            break
    events.cancel()
    same("Watch.message", to_lead, expected_messages_to_lead)
    same("Watch.shutdown_answered", answers, expected_answers)
    same("Watch.plan_submitted", plans, [_text(i) for i in range(len(_IDS))])

    # At the limits: accepted; one past: refused.
    limits = Limits()
    at_limit = {
        "title": pb.TaskSpec(id="L-title", title="😀" * limits.title_max_chars),
        "description": pb.TaskSpec(id="L-desc", title="d", description="😀" * (limits.text_max_bytes // 4)),
        "payload": pb.TaskSpec(id="L-payload", title="p", payload=random.randbytes(limits.blob_max_bytes)),
        "id": pb.TaskSpec(id="😀" * limits.name_max_chars, title="i"),
    }
    past_limit = {
        "title": pb.TaskSpec(id="P-title", title="😀" * (limits.title_max_chars + 1)),
        "description": pb.TaskSpec(id="P-desc", title="d", description="😀" * (limits.text_max_bytes // 4) + "a"),
        "payload": pb.TaskSpec(id="P-payload", title="p", payload=b"\x00" * (limits.blob_max_bytes + 1)),
        "id": pb.TaskSpec(id="😀" * (limits.name_max_chars + 1), title="i"),
    }
    for field, spec in at_limit.items():
        lead.create([spec])
        same(f"at limit {field} (GetTask)", getattr(lead.get_task(spec.id), field), getattr(spec, field))
    refused = collections.Counter()
    for field, spec in past_limit.items():
        try:
            lead.create([spec])
            mismatches.append(f"past limit {field}: accepted")
        except grpc.RpcError as error:
            refused[error.code().name] += 1
    # Unprintable ids, names and roles are refused, each with INVALID_ARGUMENT.
    for bad in _REFUSED_IDS:
        for what, call in (
            ("task id", lambda bad=bad: lead.create([pb.TaskSpec(id=bad, title="t")])),
            ("teammate name", lambda bad=bad: lead.add_teammate(bad)),
            ("role", lambda bad=bad: lead.add_teammate("fine-name", roles=[bad])),
        ):
            try:
                call()
                mismatches.append(f"{what} {bad!r}: accepted")
            except grpc.RpcError as error:
                same(f"refused {what}", error.code(), grpc.StatusCode.INVALID_ARGUMENT)
    body = "😀" * (limits.text_max_bytes // 4)
    lead.board.SendMessage(pb.SendMessageRequest(to="planner", body=body), metadata=lead.md)
    for what, call in (
        (
            "message",
            lambda: lead.board.SendMessage(pb.SendMessageRequest(to="planner", body=body + "a"), metadata=lead.md),
        ),
        ("plan", lambda: mate.SubmitPlan(pb.SubmitPlanRequest(plan=body + "a"), metadata=md(planner_token))),
    ):
        try:
            call()
            mismatches.append(f"past limit {what}: accepted")
        except grpc.RpcError as error:
            refused[error.code().name] += 1
    lead.close()
    schema_after = schema_of(daemon)
    figures(
        hostile_ids=len(_IDS),
        hostile_texts=len(_STORED_TEXTS),
        fields_checked=sum(checked.values()),
        mismatches=len(mismatches),
        past_limit_refusals=dict(refused),
        schema_unchanged=schema_before == schema_after,
    )
    assert not mismatches, "\n".join(mismatches[:20])
    assert refused == {"INVALID_ARGUMENT": len(past_limit) + 2}
    assert schema_before == schema_after


@pytest.mark.timeout(60)
def test_nul_in_text(daemon, figures):
    """U+0000 in a free text (a description, a message, a failure's error, a plan): a SQLite board
    stores it byte-exact; a PostgreSQL board, whose text cannot hold it, refuses the call with
    INVALID_ARGUMENT and writes nothing of it (never INTERNAL), and goes on writing."""
    nul = "a\x00b"
    lead = Lead(daemon)
    token = lead.add_teammate("nul-mate")
    mate = pb_grpc.TeammateServiceStub(lead.channel)
    lead.create([pb.TaskSpec(id="held", title="held")], "nul-0")
    call = mate.Idle(pb.IdleRequest(poll_interval=dur(200)), metadata=md(token), timeout=20)
    claim = next(r for r in call if r.HasField("claim")).claim
    call.cancel()
    attempts = {
        "CreateTasks.description": lambda: lead.create([pb.TaskSpec(id="nul-task", title="t", description=nul)]),
        "SendMessage.body": lambda: lead.board.SendMessage(
            pb.SendMessageRequest(to="nul-mate", body=nul), metadata=lead.md, timeout=10
        ),
        "FailTask.error": lambda: mate.FailTask(
            pb.FailTaskRequest(task_id="held", claim_token=claim.claim_token, error=nul, retryable=True),
            metadata=md(token),
            timeout=10,
        ),
        "SubmitPlan.plan": lambda: mate.SubmitPlan(pb.SubmitPlanRequest(plan=nul), metadata=md(token), timeout=10),
    }
    answers = {}
    for name, attempt in attempts.items():
        try:
            attempt()
            answers[name] = "OK"
        except grpc.RpcError as error:
            answers[name] = f"{error.code().name} {status_details(error)[0]}"
    held = lead.get_task("held")
    stored = {
        "task": lead.exists("nul-task") and lead.get_task("nul-task").description,
        "error": held.error,
        "state": pb.TaskState.Name(held.state),
    }
    with daemon.board() as conn:
        stored["messages"] = conn.execute("SELECT count(*) FROM inbox WHERE kind = 'message'").fetchone()[0]
        stored["plans"] = conn.execute("SELECT count(*) FROM plans").fetchone()[0]
    lead.create([pb.TaskSpec(id="after", title="after")], "nul-1")  # the writer goes on
    lead.close()
    figures(answers=answers, stored=stored)
    if on_postgres():
        assert answers == dict.fromkeys(attempts, "INVALID_ARGUMENT INVALID_ARGUMENT")
        assert stored == {"task": False, "error": "", "state": "TASK_STATE_IN_PROGRESS", "messages": 0, "plans": 0}
    else:
        assert answers == dict.fromkeys(attempts, "OK")
        assert stored == {"task": nul, "error": nul, "state": "TASK_STATE_PENDING", "messages": 1, "plans": 1}
