"""Bad input is refused with INVALID_ARGUMENT + a BadRequest field violation
naming the field, and nothing is written (design §4 CreateTasks, errors, §7).

One daemon serves this module: refused requests do not change it, which is
exactly what every case checks (board, stats and teammates before == after).
"""

from __future__ import annotations

import dataclasses

import grpc
import pytest
from google.protobuf import duration_pb2

from corral.v1 import corral_pb2 as pb

from .wire import assert_status, duration, module_daemon, rpc_error, spec

MIB = 1024 * 1024
KIB = 1024


@dataclasses.dataclass
class World:
    daemon: object
    mate: object  # a teammate Client


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with module_daemon(tmp_path_factory, "badinput") as running:
        running.create_tasks(spec("base"), spec("gone"), spec("done-later"))
        running.lead.lead.CancelTasks(pb.CancelTasksRequest(ids=["gone"]))
        mate = running.add_teammate("checker")
        yield World(running, mate)


def snapshot(daemon):
    stats = daemon.stats()
    mates = daemon.lead.board.ListTeammates(pb.ListTeammatesRequest()).teammates
    return (
        [t.SerializeToString() for t in daemon.all_tasks()],
        dict(stats.tasks_by_state),
        dict(stats.teammates_by_status),
        [m.SerializeToString() for m in mates],
    )


def _raw_duration(seconds: int, nanos: int = 0) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=seconds, nanos=nanos)


def _with_lease(task_id: str, value: duration_pb2.Duration) -> pb.TaskSpec:
    message = spec(task_id)
    message.lease_duration.CopyFrom(value)
    return message


def create(*specs):
    return lambda w: w.daemon.lead.lead.CreateTasks(pb.CreateTasksRequest(tasks=list(specs)))


def idle(**fields):
    def call(w):
        request = pb.IdleRequest(max_idle_polls=fields.get("max_idle_polls", 0), slots=fields.get("slots", 0))
        if "poll_interval" in fields:
            request.poll_interval.CopyFrom(fields["poll_interval"])
        return next(iter(w.mate.teammate.Idle(request, timeout=5)))

    return call


def list_tasks(**fields):
    return lambda w: w.daemon.lead.board.ListTasks(pb.ListTasksRequest(**fields))


def shutdown(grace: duration_pb2.Duration):
    return lambda w: w.daemon.lead.lead.RequestShutdown(pb.RequestShutdownRequest(name="checker", grace=grace))


def add_teammate(name: str):
    return lambda w: w.daemon.lead.lead.AddTeammate(pb.AddTeammateRequest(name=name))


def watch(after_seq: int):
    return lambda w: next(iter(w.daemon.lead.lead.Watch(pb.WatchRequest(after_seq=after_seq), timeout=5)))


# name -> (call, acceptable field paths)
CASES = {
    # CreateTasks
    "cycle_of_two": (
        create(spec("cy-a", "cy-b"), spec("cy-b", "cy-a")),
        {"tasks[0].depends_on", "tasks[1].depends_on"},
    ),
    "cycle_of_three_next_to_a_good_task": (
        create(spec("ok-x"), spec("cy3-a", "cy3-c"), spec("cy3-b", "cy3-a"), spec("cy3-c", "cy3-b")),
        {"tasks[1].depends_on", "tasks[2].depends_on", "tasks[3].depends_on"},
    ),
    "self_dependency": (create(spec("selfish", "selfish")), {"tasks[0].depends_on"}),
    "unknown_dependency": (create(spec("ok-1"), spec("orphan", "no-such-task")), {"tasks[1].depends_on"}),
    "canceled_dependency": (create(spec("after-gone", "gone")), {"tasks[0].depends_on"}),
    "duplicate_dependency": (create(spec("twice", "base", "base")), {"tasks[0].depends_on"}),
    "duplicate_id_in_batch": (create(spec("dup"), spec("dup")), {"tasks[1].id", "tasks[0].id"}),
    "duplicate_of_board_id_with_dependency_cycle": (create(spec("base", "base")), {"tasks[0].depends_on"}),
    "empty_batch": (create(), {"tasks"}),
    "empty_id": (create(spec("")), {"tasks[0].id"}),
    "id_with_whitespace": (create(spec("a b")), {"tasks[0].id"}),
    "title_201_chars": (create(spec("long-title", title="x" * 201)), {"tasks[0].title"}),
    "second_task_title_201_chars": (create(spec("fine"), spec("long-title", title="é" * 201)), {"tasks[1].title"}),
    "description_over_64_kib": (create(spec("long-desc", description="d" * (64 * KIB + 1))), {"tasks[0].description"}),
    "payload_over_1_mib": (create(spec("big", payload=b"\0" * (MIB + 1))), {"tasks[0].payload"}),
    "lease_500_ms": (create(_with_lease("short", _raw_duration(0, 500_000_000))), {"tasks[0].lease_duration"}),
    "lease_25_h": (create(_with_lease("long", _raw_duration(25 * 3600))), {"tasks[0].lease_duration"}),
    "lease_negative": (create(_with_lease("neg", _raw_duration(-5))), {"tasks[0].lease_duration"}),
    "lease_negative_nanos": (create(_with_lease("negn", _raw_duration(0, -1))), {"tasks[0].lease_duration"}),
    "lease_nanos_past_a_second": (
        create(spec("fine"), _with_lease("nanos", _raw_duration(1, 2_000_000_000))),
        {"tasks[1].lease_duration"},
    ),
    "lease_nanos_against_the_sign_of_seconds": (
        create(_with_lease("mixed", _raw_duration(5, -1))),
        {"tasks[0].lease_duration"},
    ),
    "id_with_del": (create(spec("del\x7f")), {"tasks[0].id"}),
    "id_with_c1_control": (create(spec("c1\x9b")), {"tasks[0].id"}),
    "id_with_right_to_left_override": (create(spec("evil\u202etxt")), {"tasks[0].id"}),
    "id_with_byte_order_mark": (create(spec("\ufeffbom")), {"tasks[0].id"}),
    "title_with_ansi_escape": (create(spec("ansi", title="\x1b[2Jcleared")), {"tasks[0].title"}),
    "id_with_zero_width_space": (create(spec("zw\u200bid")), {"tasks[0].id"}),
    "max_attempts_101": (create(spec("many", max_attempts=101)), {"tasks[0].max_attempts"}),
    "max_attempts_negative": (create(spec("negative", max_attempts=-1)), {"tasks[0].max_attempts"}),
    "batch_of_10001": (lambda w: create(*(spec(f"many-{i}") for i in range(10_001)))(w), {"tasks"}),
    "dependencies_1001": (
        lambda w: create(spec("needy", *(f"dep-{i}" for i in range(1001))))(w),
        {"tasks[0].depends_on"},
    ),
    # Idle
    "slots_65": (idle(slots=65), {"slots"}),
    "slots_negative": (idle(slots=-1), {"slots"}),
    "poll_interval_10_ms": (idle(poll_interval=duration(0.010)), {"poll_interval"}),
    "poll_interval_11_min": (idle(poll_interval=duration(660)), {"poll_interval"}),
    "poll_interval_negative": (idle(poll_interval=_raw_duration(-1)), {"poll_interval"}),
    "max_idle_polls_10001": (idle(max_idle_polls=10_001), {"max_idle_polls"}),
    "max_idle_polls_negative": (idle(max_idle_polls=-1), {"max_idle_polls"}),
    # ListTasks
    "page_size_negative": (list_tasks(page_size=-1), {"page_size"}),
    "page_size_1001": (list_tasks(page_size=1001), {"page_size"}),
    "page_token_forged": (list_tasks(page_token="not-a-token"), {"page_token"}),
    "unknown_task_state": (list_tasks(states=[99]), {"states[0]", "states"}),
    # LeadService
    "grace_500_ms": (shutdown(_raw_duration(0, 500_000_000)), {"grace"}),
    "grace_25_h": (shutdown(_raw_duration(25 * 3600)), {"grace"}),
    "teammate_name_empty": (add_teammate(""), {"name"}),
    "teammate_name_lead": (add_teammate("lead"), {"name"}),
    "teammate_name_lead_capitalised": (add_teammate("Lead"), {"name"}),
    "poll_interval_nanos_past_a_second": (idle(poll_interval=_raw_duration(0, 1_500_000_000)), {"poll_interval"}),
    "grace_nanos_past_a_second": (shutdown(_raw_duration(10, 1_000_000_000)), {"grace"}),
    "teammate_name_star": (add_teammate("*"), {"name"}),
    "teammate_name_whitespace": (add_teammate("two words"), {"name"}),
    "cancel_nothing": (lambda w: w.daemon.lead.lead.CancelTasks(pb.CancelTasksRequest()), {"ids"}),
    "watch_after_negative": (watch(-1), {"after_seq"}),
    # TeammateService / BoardService
    "ack_beyond_last": (lambda w: w.mate.ack(5), {"through_seq"}),
    "ack_negative": (lambda w: w.mate.ack(-1), {"through_seq"}),
    "result_over_1_mib": (
        lambda w: w.mate.teammate.CompleteTask(
            pb.CompleteTaskRequest(task_id="base", claim_token="x", result=b"\0" * (MIB + 1))
        ),
        {"result"},
    ),
    "plan_over_64_kib": (
        lambda w: w.mate.teammate.SubmitPlan(pb.SubmitPlanRequest(plan="p" * (64 * KIB + 1))),
        {"plan"},
    ),
    "message_to_nobody": (lambda w: w.daemon.lead.board.SendMessage(pb.SendMessageRequest(to="", body="hi")), {"to"}),
    "message_over_64_kib": (
        lambda w: w.daemon.lead.board.SendMessage(pb.SendMessageRequest(to="checker", body="m" * (64 * KIB + 1))),
        {"body"},
    ),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_refused_with_a_field_violation_and_nothing_written(world, case):
    call, fields = CASES[case]
    before = snapshot(world.daemon)
    error = rpc_error(call, world)
    found = assert_status(error, grpc.StatusCode.INVALID_ARGUMENT)
    bad = found.get("bad_request")
    assert bad is not None, f"INVALID_ARGUMENT without google.rpc.BadRequest: {error.details()}"
    named = [v.field for v in bad.field_violations]
    assert set(named) & fields, f"expected a violation on one of {sorted(fields)}, got {named}: {error.details()}"
    assert snapshot(world.daemon) == before, "a refused request changed the board"


def _with_duration(task_id: str, field: str, value: duration_pb2.Duration) -> pb.TaskSpec:
    message = spec(task_id)
    getattr(message, field).CopyFrom(value)
    return message


# name -> (call, the field, the value the error must report: the one sent, in whole ms,
# rounded away from zero so that a sliver below zero is not taken for 0, "the default")
NEGATIVE_DURATIONS = {
    "lease_duration": (create(_with_lease("neg-5s", _raw_duration(-5))), "tasks[0].lease_duration", "-5000ms"),
    "lease_duration_fraction": (
        create(_with_lease("neg-2.5s", _raw_duration(-2, -500_000_000))),
        "tasks[0].lease_duration",
        "-2500ms",
    ),
    "lease_duration_one_nano": (
        create(_with_lease("neg-1ns", _raw_duration(0, -1))),
        "tasks[0].lease_duration",
        "-1ms",
    ),
    "retry_backoff": (
        create(spec("fine"), _with_duration("neg-backoff", "retry_backoff", _raw_duration(-3))),
        "tasks[1].retry_backoff",
        "-3000ms",
    ),
    "attempt_timeout": (
        create(_with_duration("neg-timeout", "attempt_timeout", _raw_duration(-7, -1_000_000))),
        "tasks[0].attempt_timeout",
        "-7001ms",
    ),
    "poll_interval": (idle(poll_interval=_raw_duration(-1, -250_000_000)), "poll_interval", "-1250ms"),
    "grace": (shutdown(_raw_duration(-60)), "grace", "-60000ms"),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", list(NEGATIVE_DURATIONS))
def test_a_negative_duration_is_refused_reporting_its_value(world, case):
    call, field, value = NEGATIVE_DURATIONS[case]
    before = snapshot(world.daemon)
    error = rpc_error(call, world)
    assert_status(error, grpc.StatusCode.INVALID_ARGUMENT, field=field)
    assert error.details().startswith(f"{field}: {value} is outside ["), error.details()
    assert snapshot(world.daemon) == before, "a refused request changed the board"


@pytest.mark.timeout(30)
def test_same_id_with_a_different_spec_is_already_exists_and_nothing_written(world):
    world.daemon.create_tasks(spec("taken", title="original"))
    before = snapshot(world.daemon)
    error = rpc_error(world.daemon.create_tasks, spec("brand-new"), spec("taken", title="changed"))
    assert_status(error, grpc.StatusCode.ALREADY_EXISTS)
    assert snapshot(world.daemon) == before
    assert world.daemon.get_task("taken").title == "original"
    error = rpc_error(world.daemon.lead.lead.AddTeammate, pb.AddTeammateRequest(name="checker"))
    assert_status(error, grpc.StatusCode.ALREADY_EXISTS)
    assert snapshot(world.daemon) == before


@pytest.mark.timeout(30)
def test_a_retried_batch_with_the_same_request_id_returns_the_same_tasks(world):
    batch = [spec("rq-a"), spec("rq-b", "rq-a", payload=b"payload"), spec("rq-c", "base", priority=3)]
    first = world.daemon.create_tasks(*batch, request_id="req-42")
    assert [t.id for t in first] == ["rq-a", "rq-b", "rq-c"]
    before = snapshot(world.daemon)
    again = world.daemon.create_tasks(*batch, request_id="req-42")
    assert again == first
    assert snapshot(world.daemon) == before, "the retry wrote again"
    # The same request_id for a different batch is not silently accepted.
    error = rpc_error(world.daemon.create_tasks, spec("rq-other"), request_id="req-42")
    assert error.code() in (grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.INVALID_ARGUMENT), error.details()
    assert snapshot(world.daemon) == before


@pytest.mark.timeout(30)
def test_create_tasks_says_which_ids_were_already_there_unchanged(world):
    create = world.daemon.lead.lead.CreateTasks
    first = create(pb.CreateTasksRequest(tasks=[spec("uc-a"), spec("uc-b", "uc-a")]))
    assert list(first.unchanged_task_ids) == []
    grown = create(pb.CreateTasksRequest(tasks=[spec("uc-a"), spec("uc-b", "uc-a"), spec("uc-c", "uc-b")]))
    assert [t.id for t in grown.tasks] == ["uc-a", "uc-b", "uc-c"]
    assert list(grown.unchanged_task_ids) == ["uc-a", "uc-b"]
    retried = create(pb.CreateTasksRequest(tasks=[spec("uc-d")], request_id="uc-req"))
    again = create(pb.CreateTasksRequest(tasks=[spec("uc-d")], request_id="uc-req"))
    assert list(retried.unchanged_task_ids) == [] and list(again.unchanged_task_ids) == ["uc-d"]


NOT_FOUND = {
    "get_task": lambda w: w.daemon.lead.board.GetTask(pb.GetTaskRequest(id="no-such-task")),
    "get_task_as_teammate": lambda w: w.mate.board.GetTask(pb.GetTaskRequest(id="no-such-task")),
    "remove_teammate": lambda w: w.daemon.lead.lead.RemoveTeammate(pb.RemoveTeammateRequest(name="nobody")),
    "decide_plan_numeric": lambda w: w.daemon.lead.lead.DecidePlan(pb.DecidePlanRequest(plan_id="999999")),
    "decide_plan_text": lambda w: w.daemon.lead.lead.DecidePlan(pb.DecidePlanRequest(plan_id="plan-x")),
    "request_shutdown": lambda w: w.daemon.lead.lead.RequestShutdown(pb.RequestShutdownRequest(name="nobody")),
    "cancel_unknown_with_known": lambda w: w.daemon.lead.lead.CancelTasks(
        pb.CancelTasksRequest(ids=["base", "no-such-task"])
    ),
    "message_to_unknown": lambda w: w.daemon.lead.board.SendMessage(pb.SendMessageRequest(to="nobody", body="x")),
    "respond_unknown_shutdown": lambda w: w.mate.teammate.RespondShutdown(
        pb.RespondShutdownRequest(request_id="424242", approve=True)
    ),
    "complete_unknown_task": lambda w: w.mate.teammate.CompleteTask(
        pb.CompleteTaskRequest(task_id="no-such-task", claim_token="x")
    ),
}


LONG = "a" * 6000  # with the error echoing it, over gRPC's cap on trailing metadata

# What a call naming a 6,000-character id must answer (not RESOURCE_EXHAUSTED for a huge trailer).
LONG_ID_CALLS = {
    "get_task": (lambda w: w.daemon.lead.board.GetTask(pb.GetTaskRequest(task_id=LONG)), "NOT_FOUND"),
    "cancel_tasks": (lambda w: w.daemon.lead.lead.CancelTasks(pb.CancelTasksRequest(ids=[LONG])), "NOT_FOUND"),
    "remove_teammate": (lambda w: w.daemon.lead.lead.RemoveTeammate(pb.RemoveTeammateRequest(name=LONG)), "NOT_FOUND"),
    "request_shutdown": (
        lambda w: w.daemon.lead.lead.RequestShutdown(pb.RequestShutdownRequest(name=LONG)),
        "NOT_FOUND",
    ),
    "decide_plan": (lambda w: w.daemon.lead.lead.DecidePlan(pb.DecidePlanRequest(plan_id=LONG)), "NOT_FOUND"),
    "send_message": (lambda w: w.daemon.lead.board.SendMessage(pb.SendMessageRequest(to=LONG, body="x")), "NOT_FOUND"),
    "complete_task": (
        lambda w: w.mate.teammate.CompleteTask(pb.CompleteTaskRequest(task_id=LONG, claim_token="x")),
        "NOT_FOUND",
    ),
    "respond_shutdown": (
        lambda w: w.mate.teammate.RespondShutdown(pb.RespondShutdownRequest(request_id=LONG, approve=True)),
        "NOT_FOUND",
    ),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", list(LONG_ID_CALLS))
def test_an_error_never_echoes_unbounded_input(world, case):
    call, expected = LONG_ID_CALLS[case]
    before = snapshot(world.daemon)
    error = rpc_error(call, world)
    assert error.code() == getattr(grpc.StatusCode, expected), (error.code(), error.details()[:200])
    assert len(error.details()) <= 1000, "the message was not bounded"
    assert snapshot(world.daemon) == before


@pytest.mark.timeout(30)
def test_get_task_takes_task_id_or_its_first_name_id(world):
    board = world.daemon.lead.board
    assert board.GetTask(pb.GetTaskRequest(task_id="base")).task.id == "base"
    assert board.GetTask(pb.GetTaskRequest(id="base")).task.id == "base"
    assert board.GetTask(pb.GetTaskRequest(id="base", task_id="base")).task.id == "base"
    found = assert_status(
        rpc_error(lambda w: board.GetTask(pb.GetTaskRequest(id="base", task_id="gone")), world),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert [v.field for v in found["bad_request"].field_violations] == ["id"]
    assert_status(rpc_error(lambda w: board.GetTask(pb.GetTaskRequest()), world), grpc.StatusCode.NOT_FOUND)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", list(NOT_FOUND))
def test_unknown_names_are_not_found_and_nothing_written(world, case):
    before = snapshot(world.daemon)
    assert_status(rpc_error(NOT_FOUND[case], world), grpc.StatusCode.NOT_FOUND)
    assert snapshot(world.daemon) == before


@pytest.mark.timeout(30)
def test_limits_are_inclusive_and_zero_means_default(daemon):
    mate = daemon.add_teammate()
    created = daemon.create_tasks(
        spec(
            "edge-max",
            title="t" * 200,
            payload=b"\1" * MIB,
            description="d" * (64 * KIB),
            lease=24 * 3600,
            max_attempts=100,
        ),
        spec("edge-min", lease=1.0, max_attempts=1),
        spec("defaults"),
    )
    edge_max, edge_min, defaults = created
    # The reply says where each task stands, not what the caller sent.
    assert (edge_max.id, edge_max.title, edge_max.payload, edge_max.description) == ("edge-max", "", b"", "")
    assert edge_max.lease_duration.seconds == 24 * 3600 and edge_max.max_attempts == 100
    assert edge_min.lease_duration.seconds == 1 and edge_min.max_attempts == 1
    assert defaults.lease_duration.seconds == 60 and defaults.max_attempts == 3  # design §7 defaults
    stored = daemon.get_task("edge-max")
    assert len(stored.payload) == MIB and len(stored.description) == 64 * KIB and len(stored.title) == 200
    assert (stored.seq, stored.state, stored.create_time) == (edge_max.seq, edge_max.state, edge_max.create_time)
    assert (stored.lease_duration, stored.max_attempts) == (edge_max.lease_duration, edge_max.max_attempts)
    assert len(daemon.lead.board.ListTasks(pb.ListTasksRequest(page_size=1000)).tasks) == 3
    # Idle at the edges of its ranges opens fine.
    stream = mate.idle(slots=64, max_idle_polls=10_000, poll_interval=0.05)
    claims = [stream.next_event("claim") for _ in range(3)]
    assert {c.task.id for c in claims} == {"edge-max", "edge-min", "defaults"}
    for claim in claims:
        mate.complete(claim)
    stream.cancel()
    stream = mate.idle(poll_interval=600)
    awake = pb.SendMessageRequest(to=mate.name, body="awake")
    assert (
        stream.expect_quiet(0.2, then=lambda: daemon.lead.board.SendMessage(awake), arrives="message").body == "awake"
    )
    stream.cancel()
    daemon.lead.lead.RequestShutdown(pb.RequestShutdownRequest(name=mate.name, grace=duration(1)))


@pytest.mark.timeout(30)
def test_list_tasks_pages_through_the_board_in_order(daemon):
    daemon.create_tasks(*(spec(f"p{i:03d}") for i in range(25)))
    seen, token, pages = [], "", 0
    while True:
        page = daemon.lead.board.ListTasks(pb.ListTasksRequest(page_size=7, page_token=token))
        assert len(page.tasks) <= 7
        seen.extend(t.id for t in page.tasks)
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert seen == [f"p{i:03d}" for i in range(25)] and pages == 4
    pending = daemon.lead.board.ListTasks(pb.ListTasksRequest(states=[pb.TASK_STATE_COMPLETED]))
    assert list(pending.tasks) == []


@pytest.mark.timeout(30)
@pytest.mark.parametrize("field", ["lease_duration", "poll_interval", "grace"])
def test_in_range_durations_with_sub_millisecond_precision_are_not_refused(daemon, field):
    """Design §4/§7: only values *outside* their range are refused (e.g. a Go time.Duration of 1.5s + 1ns)."""
    precise = duration_pb2.Duration(seconds=1, nanos=500_000_001)
    if field == "lease_duration":
        task = daemon.create_tasks(_with_lease("precise", precise))[0]
        assert abs(task.lease_duration.seconds + task.lease_duration.nanos / 1e9 - 1.5) < 0.001
    elif field == "poll_interval":
        mate = daemon.add_teammate()
        stream = mate.teammate.Idle(pb.IdleRequest(poll_interval=precise, max_idle_polls=1), timeout=10)
        assert next(iter(stream)).WhichOneof("event") == "idle_timeout"
    else:
        mate = daemon.add_teammate()
        daemon.lead.lead.RequestShutdown(pb.RequestShutdownRequest(name=mate.name, grace=precise))


@pytest.mark.timeout(30)
def test_a_plan_is_named_only_by_the_id_the_daemon_gave_it(daemon):
    mate = daemon.add_teammate(require_plan_approval=True)
    plan_id = mate.teammate.SubmitPlan(pb.SubmitPlanRequest(plan="do it")).plan_id
    # "0001" would decide plan 1 but deliver plan_id "0001", which its author does not recognise.
    error = rpc_error(daemon.lead.lead.DecidePlan, pb.DecidePlanRequest(plan_id=f"000{plan_id}", approve=True))
    assert error.code() == grpc.StatusCode.NOT_FOUND, error.details()
    daemon.lead.lead.DecidePlan(pb.DecidePlanRequest(plan_id=plan_id, approve=True))
    decision = mate.idle().next_event("plan_decision")
    assert decision.plan_id == plan_id and decision.approve
