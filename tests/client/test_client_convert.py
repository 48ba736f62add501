"""Round trips between SDK types and wire messages (no daemon needed)."""

import datetime

from hypothesis import given
from hypothesis import strategies as st

import corral
from corral import _convert
from corral._types import (
    ClaimInfo,
    IdleTimeout,
    LeadMessage,
    Message,
    PlanDecided,
    PlanDecision,
    PlanSubmitted,
    QuestionAnswer,
    QuestionAnswered,
    QuestionAsked,
    ReviewDecided,
    ReviewItem,
    ReviewPolicy,
    ShutdownAnswered,
    ShutdownRequest,
    Task,
    TaskChanged,
    TaskSpec,
    TaskState,
    TeammateChanged,
    TeammateChangeReason,
    TeammateStatus,
)
from corral.v1 import corral_pb2 as pb

UTC = datetime.UTC

ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=20)
int32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
# Timestamps and durations carry nanoseconds; datetimes stop at microseconds.
instants = st.datetimes(
    min_value=datetime.datetime(1970, 1, 2), max_value=datetime.datetime(2200, 1, 1), timezones=st.just(UTC)
)
policies = st.none() | st.builds(
    ReviewPolicy, reviewer_role=st.text(max_size=10), max_rounds=st.integers(min_value=0, max_value=20)
)
spans = st.timedeltas(min_value=datetime.timedelta(microseconds=1), max_value=datetime.timedelta(days=1))

task_specs = st.builds(
    TaskSpec,
    id=ids,
    title=st.text(max_size=50),
    description=st.text(max_size=200),
    payload=st.binary(max_size=100),
    depends_on=st.lists(ids, max_size=5).map(tuple),
    priority=int32,
    max_attempts=st.none() | st.integers(min_value=1, max_value=100),
    lease_duration=st.none() | spans,
    required_role=st.text(max_size=10),
    review=policies,
)

tasks = st.builds(
    Task,
    id=ids,
    state=st.sampled_from(TaskState),
    title=st.text(max_size=50),
    description=st.text(max_size=200),
    payload=st.binary(max_size=100),
    depends_on=st.lists(ids, max_size=5).map(tuple),
    priority=int32,
    required_role=st.text(max_size=10),
    max_attempts=st.integers(min_value=0, max_value=100),
    lease_duration=spans,
    owner=st.text(max_size=10),
    attempt=st.integers(min_value=0, max_value=100),
    result=st.binary(max_size=100),
    error=st.text(max_size=100),
    seq=st.integers(min_value=0, max_value=2**62),
    create_time=st.none() | instants,
    lease_expire_time=st.none() | instants,
    finish_time=st.none() | instants,
    question=st.text(max_size=50),
    review=policies,
    review_rounds=st.integers(min_value=0, max_value=20),
)


@given(task_specs)
def test_task_spec_round_trips(spec: TaskSpec) -> None:
    wire = _convert.task_spec_to_pb(spec)
    assert _convert.task_spec_from_pb(pb.TaskSpec.FromString(wire.SerializeToString())) == spec


@given(tasks)
def test_task_round_trips(task: Task) -> None:
    wire = pb.Task.FromString(_convert.task_to_pb(task).SerializeToString())
    assert _convert.task_from_pb(wire) == task


def test_unset_spec_options_mean_default_on_the_wire() -> None:
    wire = _convert.task_spec_to_pb(TaskSpec("a"))
    assert wire.max_attempts == 0
    assert not wire.HasField("lease_duration")


def test_unset_times_become_none_and_set_times_are_utc_aware() -> None:
    wire = pb.Task(id="a", state=pb.TASK_STATE_PENDING)
    wire.create_time.FromSeconds(1_700_000_000)
    task = _convert.task_from_pb(wire)
    assert task.create_time == datetime.datetime.fromtimestamp(1_700_000_000, UTC)
    assert task.create_time.tzinfo is not None
    assert task.finish_time is None and task.lease_expire_time is None
    assert task.lease_duration == datetime.timedelta(0)


def test_naive_datetimes_are_taken_as_utc() -> None:
    naive = datetime.datetime(2030, 1, 1, 12, 0)
    assert _convert.time_to_pb(naive).ToDatetime(tzinfo=UTC) == naive.replace(tzinfo=UTC)


def _stamp(seconds: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, UTC)


def test_idle_items_convert_by_kind() -> None:
    message = pb.IdleResponse(message=pb.Message(seq=3, sender="lead", body="hi"))
    message.message.send_time.FromSeconds(10)
    assert _convert.idle_item_from_pb(message) == Message(seq=3, send_time=_stamp(10), sender="lead", body="hi")

    shutdown = pb.IdleResponse(shutdown_request=pb.ShutdownRequest(seq=4, request_id="r1", reason="done"))
    shutdown.shutdown_request.deadline_time.FromSeconds(20)
    assert _convert.idle_item_from_pb(shutdown) == ShutdownRequest(
        seq=4, send_time=None, request_id="r1", reason="done", deadline_time=_stamp(20)
    )

    decision = pb.IdleResponse(plan_decision=pb.PlanDecision(seq=5, plan_id="p", approve=True, feedback="ok"))
    assert _convert.idle_item_from_pb(decision) == PlanDecision(
        seq=5, send_time=None, plan_id="p", approve=True, feedback="ok"
    )

    claim = pb.IdleResponse(
        claim=pb.Claim(task=pb.Task(id="t", state=pb.TASK_STATE_IN_PROGRESS), claim_token="s3cr3t", attempt=2, fence=9)
    )
    claim.claim.lease_expire_time.FromSeconds(30)
    item = _convert.idle_item_from_pb(claim)
    assert isinstance(item, ClaimInfo)
    assert (item.task.id, item.token, item.attempt, item.fence) == ("t", "s3cr3t", 2, 9)
    assert item.lease_expire_time == _stamp(30)
    assert "s3cr3t" not in repr(item), "claim tokens are secrets and stay out of reprs"

    timeout = pb.IdleResponse(idle_timeout=pb.IdleTimeout(idle_polls=12))
    assert _convert.idle_item_from_pb(timeout) == IdleTimeout(idle_polls=12)
    assert _convert.idle_item_from_pb(pb.IdleResponse()) is None

    spent = pb.Usage(input_tokens=1, output_tokens=2, cost_micros=3, model="m")
    exhausted = pb.BudgetExhausted(teammate="ann", spent=spent, budget=pb.Budget(max_cost_micros=3))
    assert _convert.idle_item_from_pb(pb.SessionResponse(budget_exhausted=exhausted)) == corral.BudgetExhausted(
        "ann", corral.Usage(1, 2, 3, "m"), corral.Budget(max_cost_micros=3)
    )


def test_watch_events_convert_by_kind() -> None:
    def event(**kwargs: object) -> pb.WatchResponse:
        response = pb.WatchResponse(seq=7, **kwargs)
        response.time.FromSeconds(40)
        return response

    changed = _convert.watch_event_from_pb(event(task_changed=pb.Task(id="a", state=pb.TASK_STATE_COMPLETED)))
    assert isinstance(changed, TaskChanged) and changed.seq == 7 and changed.time == _stamp(40)
    assert changed.task.state is TaskState.COMPLETED

    teammate = _convert.watch_event_from_pb(
        event(
            teammate_changed=pb.TeammateChanged(
                teammate=pb.Teammate(name="ann", roles=["dev"], status=pb.TEAMMATE_STATUS_IDLE),
                status=pb.TEAMMATE_STATUS_IDLE,
                reason=pb.TEAMMATE_CHANGE_REASON_JOINED,
            )
        )
    )
    assert isinstance(teammate, TeammateChanged)
    assert (teammate.teammate.name, teammate.teammate.roles) == ("ann", ("dev",))
    assert (teammate.status, teammate.reason) == (TeammateStatus.IDLE, TeammateChangeReason.JOINED)

    message = _convert.watch_event_from_pb(event(message=pb.Message(seq=1, sender="ann", body="hey")))
    assert isinstance(message, LeadMessage) and message.message.body == "hey"

    plan = _convert.watch_event_from_pb(event(plan_submitted=pb.PlanSubmitted(plan_id="p", author="ann", plan="x")))
    assert plan == PlanSubmitted(seq=7, time=_stamp(40), plan_id="p", author="ann", plan="x")

    decided = _convert.watch_event_from_pb(
        event(plan_decided=pb.PlanDecided(plan_id="p", author="ann", approve=False, feedback="smaller steps"))
    )
    assert decided == PlanDecided(
        seq=7, time=_stamp(40), plan_id="p", author="ann", approve=False, feedback="smaller steps"
    )

    answer = _convert.watch_event_from_pb(
        event(shutdown_answered=pb.ShutdownAnswered(request_id="r", teammate="ann", approve=True, reason="bye"))
    )
    assert answer == ShutdownAnswered(
        seq=7, time=_stamp(40), request_id="r", teammate="ann", approve=True, reason="bye"
    )
    assert _convert.watch_event_from_pb(pb.WatchResponse(seq=8)) is None

    asked = _convert.watch_event_from_pb(
        event(question_asked=pb.QuestionAsked(task_id="t", question="which branch?", asked_by="ann"))
    )
    assert asked == QuestionAsked(seq=7, time=_stamp(40), task_id="t", question="which branch?", asked_by="ann")
    answered = _convert.watch_event_from_pb(
        event(question_answered=pb.QuestionAnswered(task_id="t", question="which branch?", answer="main"))
    )
    assert answered == QuestionAnswered(seq=7, time=_stamp(40), task_id="t", question="which branch?", answer="main")


def test_a_waiting_question_and_a_claims_answers_convert() -> None:
    waiting = _convert.task_from_pb(pb.Task(id="t", state=pb.TASK_STATE_NEEDS_INPUT, question="which branch?"))
    assert (waiting.state, waiting.question) == (TaskState.NEEDS_INPUT, "which branch?")
    assert not waiting.state.is_final

    claim = pb.Claim(task=pb.Task(id="t", state=pb.TASK_STATE_IN_PROGRESS), claim_token="tok", attempt=1, fence=3)
    first = claim.answers.add(question="which branch?", answer="main", asked_by="ann")
    first.ask_time.FromSeconds(10)
    first.answer_time.FromSeconds(20)
    claim.answers.add(question="and the tag?", answer="", asked_by="bob")
    info = _convert.claim_from_pb(claim)
    assert info.answers == (
        QuestionAnswer("which branch?", "main", "ann", _stamp(10), _stamp(20)),
        QuestionAnswer("and the tag?", "", "bob", None, None),
    )
    assert _convert.claim_from_pb(pb.Claim(task=pb.Task(id="u", state=pb.TASK_STATE_IN_PROGRESS))).answers == ()

    asked = _convert.attempt_from_pb(pb.TaskAttempt(attempt=1, owner="ann", outcome=pb.ATTEMPT_OUTCOME_ASKED))
    assert asked.outcome is corral.AttemptOutcome.ASKED

    stats = _convert.stats_from_pb(
        pb.GetStatsResponse(tasks_by_state={"TASK_STATE_NEEDS_INPUT": 2, "TASK_STATE_COMPLETED": 1})
    )
    assert stats.count(TaskState.NEEDS_INPUT) == 2 and stats.active_tasks == 2, "a waiting question is unfinished"


def test_reviews_convert() -> None:
    wire = _convert.task_spec_to_pb(TaskSpec("t", review=ReviewPolicy()))
    assert wire.HasField("review") and wire.review.max_rounds == 0, "a policy with the defaults is still one"
    assert not _convert.task_spec_to_pb(TaskSpec("t")).HasField("review")

    task = _convert.task_from_pb(
        pb.Task(
            id="t",
            state=pb.TASK_STATE_IN_REVIEW,
            result=b"draft",
            review=pb.ReviewPolicy(reviewer_role="qa", max_rounds=3),
            review_rounds=1,
        )
    )
    assert (task.state, task.review, task.review_rounds) == (TaskState.IN_REVIEW, ReviewPolicy("qa", 3), 1)
    assert not task.state.is_final

    claim = pb.Claim(task=pb.Task(id="t", state=pb.TASK_STATE_IN_REVIEW), claim_token="tok", attempt=1, fence=3)
    claim.review.CopyFrom(pb.ReviewItem(result=b"draft", author="ann", round=2))
    assert _convert.claim_from_pb(claim).review == ReviewItem(b"draft", "ann", 2)
    work = pb.Claim(task=pb.Task(id="t", state=pb.TASK_STATE_IN_PROGRESS), rejected_result=b"draft")
    work.previous_attempt.CopyFrom(
        pb.TaskAttempt(
            attempt=1,
            owner="rev",
            outcome=pb.ATTEMPT_OUTCOME_REJECTED,
            verdict=pb.ReviewVerdict(approve=False, feedback="add tests"),
            feedback="add tests",
        )
    )
    info = _convert.claim_from_pb(work)
    assert (info.review, info.rejected_result) == (None, b"draft")
    assert info.previous_attempt is not None
    previous = info.previous_attempt
    assert (previous.outcome, previous.verdict, previous.feedback) == (
        corral.AttemptOutcome.REJECTED,
        corral.Reject("add tests"),
        "add tests",
    )
    approved = _convert.attempt_from_pb(
        pb.TaskAttempt(outcome=pb.ATTEMPT_OUTCOME_COMPLETED, verdict=pb.ReviewVerdict(approve=True))
    )
    assert approved.verdict == corral.Approve()
    assert _convert.attempt_from_pb(pb.TaskAttempt(outcome=pb.ATTEMPT_OUTCOME_COMPLETED)).verdict is None
    for verdict in (corral.Approve(), corral.Approve("nice"), corral.Reject("why")):
        assert _convert.verdict_from_pb(_convert.verdict_to_pb(verdict)) == verdict

    response = pb.WatchResponse(
        seq=9, review_decided=pb.ReviewDecided(task_id="t", approve=False, feedback="why", reviewer="rev", round=1)
    )
    response.time.FromSeconds(40)
    event = _convert.watch_event_from_pb(response)
    assert event == ReviewDecided(9, _stamp(40), "t", False, "why", "rev", 1)

    stats = _convert.stats_from_pb(pb.GetStatsResponse(tasks_by_state={"TASK_STATE_IN_REVIEW": 2}))
    assert stats.count(TaskState.IN_REVIEW) == 2 and stats.active_tasks == 2, "a task in review is unfinished"


def test_unknown_change_reason_is_reported_as_unspecified() -> None:
    response = pb.WatchResponse(teammate_changed=pb.TeammateChanged(reason=99))
    event = _convert.watch_event_from_pb(response)
    assert isinstance(event, TeammateChanged) and event.reason is TeammateChangeReason.UNSPECIFIED


def test_stats_map_state_names_and_skip_unknown_ones() -> None:
    response = pb.GetStatsResponse(
        tasks_by_state={"TASK_STATE_PENDING": 2, "TASK_STATE_COMPLETED": 5, "TASK_STATE_FROZEN": 1},
        teammates_by_status={"TEAMMATE_STATUS_BUSY": 3},
        writer=pb.WriterStats(queue_depth=4, commits=9, mean_batch_size=1.5),
        open_streams=6,
    )
    stats = _convert.stats_from_pb(response)
    assert stats.tasks_by_state == {TaskState.PENDING: 2, TaskState.COMPLETED: 5}
    assert stats.teammates_by_status == {TeammateStatus.BUSY: 3}
    assert (stats.writer.queue_depth, stats.writer.commits, stats.writer.mean_batch_size) == (4, 9, 1.5)
    assert stats.open_streams == 6
    assert stats.active_tasks == 2
    assert stats.count(TaskState.FAILED) == 0


def test_request_builders_use_zero_for_defaults() -> None:
    idle = _convert.idle_request(max_idle_polls=None, poll_interval=None, slots=None)
    assert (idle.max_idle_polls, idle.slots, idle.HasField("poll_interval")) == (0, 0, False)
    idle = _convert.idle_request(max_idle_polls=3, poll_interval=0.25, slots=2)
    assert idle.poll_interval.ToTimedelta() == datetime.timedelta(milliseconds=250)

    listing = _convert.list_tasks_request([TaskState.PENDING, TaskState.FAILED], "ann", None, "tok")
    assert list(listing.states) == [pb.TASK_STATE_PENDING, pb.TASK_STATE_FAILED]
    assert (listing.owner, listing.page_size, listing.page_token) == ("ann", 0, "tok")

    shutdown = _convert.request_shutdown_request("ann", "bye", datetime.timedelta(seconds=3))
    assert shutdown.grace.seconds == 3
    assert not _convert.request_shutdown_request("ann", "", None).HasField("grace")

    batch = _convert.create_tasks_request([TaskSpec("a"), TaskSpec("b", depends_on=("a",))], None)
    assert [t.id for t in batch.tasks] == ["a", "b"] and batch.request_id == ""


def test_enum_values_match_the_wire() -> None:
    for state in TaskState:
        assert pb.TaskState.Name(state.value) == f"TASK_STATE_{state.name}"
    assert {state.value for state in TaskState} == set(pb.TaskState.values()) - {pb.TASK_STATE_UNSPECIFIED}
    for outcome in corral.AttemptOutcome:
        assert pb.AttemptOutcome.Name(outcome.value) == f"ATTEMPT_OUTCOME_{outcome.name}"
    assert {o.value for o in corral.AttemptOutcome} == set(pb.AttemptOutcome.values()) - {
        pb.ATTEMPT_OUTCOME_UNSPECIFIED
    }
    for status in TeammateStatus:
        assert pb.TeammateStatus.Name(status.value) == f"TEAMMATE_STATUS_{status.name}"
    for reason in TeammateChangeReason:
        assert pb.TeammateChangeReason.Name(reason.value) == f"TEAMMATE_CHANGE_REASON_{reason.name}"
    for policy in corral.TaskCreationPolicy:
        assert pb.TaskCreationPolicy.Value(_convert.task_creation_to_pb(policy)) == policy.value
    assert {p.value for p in corral.TaskCreationPolicy} == set(pb.TaskCreationPolicy.values()) - {
        pb.TASK_CREATION_POLICY_UNSPECIFIED
    }


def test_discovered_work_converts() -> None:
    task = _convert.task_from_pb(pb.Task(id="p", state=pb.TASK_STATE_PROPOSED, proposed_by="ann", discovered_from="t"))
    assert (task.state, task.proposed_by, task.discovered_from) == (TaskState.PROPOSED, "ann", "t")
    assert _convert.task_from_pb(_convert.task_to_pb(task)) == task
    mate = _convert.teammate_from_pb(pb.Teammate(name="ann", task_creation=pb.TASK_CREATION_POLICY_DENY))
    assert mate.task_creation is corral.TaskCreationPolicy.DENY
    unset = _convert.teammate_from_pb(pb.Teammate(name="old"))
    assert unset.task_creation is corral.TaskCreationPolicy.PROPOSE, "an older daemon's teammate: the default"

    notice = pb.ProposalDecision(seq=4, task_ids=["p", "q"], approve=False, feedback="no")
    notice.send_time.FromSeconds(20)
    item = _convert.idle_item_from_pb(pb.IdleResponse(proposals_decided=notice))
    assert item == corral.ProposalsDecided(4, _stamp(20), ("p", "q"), False, "no")
    assert _convert.idle_item_from_pb(pb.SessionResponse(proposals_decided=notice)) == item

    proposed = pb.WatchResponse(
        seq=7,
        tasks_proposed=pb.TasksProposed(
            teammate="ann", task_ids=["p"], discovered_from="t", needs_decision=True, split=True
        ),
    )
    assert _convert.watch_event_from_pb(proposed) == corral.TasksProposed(7, None, "ann", ("p",), "t", True, True)
    decided = pb.WatchResponse(seq=8, proposals_decided=pb.ProposalsDecided(task_ids=["p"], approve=True))
    assert _convert.watch_event_from_pb(decided) == corral.ProposalsDecidedEvent(8, None, ("p",), True, "")

    request = _convert.propose_tasks_request([TaskSpec("p")], "t", "tok", block=True)
    assert (request.task_id, request.claim_token, request.block_claimed_task) == ("t", "tok", True)
    assert [spec.id for spec in request.tasks] == ["p"]
    stats = _convert.stats_from_pb(pb.GetStatsResponse(tasks_by_state={"TASK_STATE_PROPOSED": 3}))
    assert stats.active_tasks == 3, "a proposed task is unfinished"
