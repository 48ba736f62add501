"""Pins the SDK's public surface: changing it must be a deliberate edit here."""

import dataclasses
import inspect
import typing

import corral
import corral.aio

EXPECTED_CORRAL = [
    "AlreadyExists",
    "Approve",
    "Artifact",
    "ArtifactAdded",
    "Attempt",
    "AttemptOutcome",
    "AttemptTimedOut",
    "Budget",
    "BudgetExhausted",
    "BudgetExhaustedEvent",
    "Claim",
    "ClaimEndReason",
    "ClaimEnded",
    "ClaimEndedError",
    "ClaimInfo",
    "ClaimRevoked",
    "ClaimTokenMismatch",
    "ConcurrencyLimit",
    "CorralError",
    "DependencyArtifact",
    "DoneSummary",
    "ExitReason",
    "FailedPrecondition",
    "FieldViolation",
    "GitError",
    "GitWorktree",
    "HeldResource",
    "Identity",
    "IdleEvent",
    "IdleTimeout",
    "InvalidArgument",
    "Lead",
    "LeadMessage",
    "LeaseExpired",
    "LeaseLost",
    "LimitExceeded",
    "Message",
    "NeedsInput",
    "NewTeammate",
    "NotFound",
    "OutputChunk",
    "Overloaded",
    "PermanentFailure",
    "PermissionDenied",
    "PlanDecided",
    "PlanDecision",
    "PlanSubmitted",
    "PostgresStats",
    "ProposalsDecided",
    "ProposalsDecidedEvent",
    "QuestionAnswer",
    "QuestionAnswered",
    "QuestionAsked",
    "Reject",
    "ResourceWait",
    "ReviewDecided",
    "ReviewItem",
    "ReviewPolicy",
    "RunSummary",
    "ShutdownAnswered",
    "ShutdownRequest",
    "Stats",
    "Task",
    "TaskCanceled",
    "TaskChanged",
    "TaskCreationPolicy",
    "TaskSpec",
    "TaskState",
    "TasksFailed",
    "TasksProposed",
    "Teammate",
    "TeammateAvailability",
    "TeammateChangeReason",
    "TeammateChanged",
    "TeammateInfo",
    "TeammateStatus",
    "Unauthenticated",
    "Unavailable",
    "Usage",
    "Verdict",
    "ViewerInfo",
    "WaitingFor",
    "WatchEvent",
    "WriterStats",
    "current_claim",
    "output",
    "run_teammate",
]

EXPECTED_AIO = ["Claim", "IdleEvent", "Lead", "Teammate", "current_claim", "output", "run_teammate"]


def test_corral_all_is_pinned() -> None:
    assert sorted(corral.__all__) == EXPECTED_CORRAL
    assert len(set(corral.__all__)) == len(corral.__all__)


def test_corral_aio_all_is_pinned() -> None:
    assert sorted(corral.aio.__all__) == EXPECTED_AIO


def test_every_exported_name_resolves() -> None:
    for module in (corral, corral.aio):
        for name in module.__all__:
            assert getattr(module, name) is not None, f"{module.__name__}.{name}"


def test_public_symbols_have_docstrings() -> None:
    for module in (corral, corral.aio):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                assert inspect.getdoc(obj), f"{module.__name__}.{name} has no docstring"
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if not attr.startswith("_") and (inspect.isfunction(member) or isinstance(member, property)):
                        assert inspect.getdoc(member), f"{module.__name__}.{name}.{attr} has no docstring"


def test_no_wire_types_in_public_signatures() -> None:
    for module in (corral, corral.aio):
        for name in module.__all__:
            obj = getattr(module, name)
            members = [obj] + ([m for m in vars(obj).values() if inspect.isfunction(m)] if inspect.isclass(obj) else [])
            for member in members:
                if not callable(member):
                    continue
                try:
                    annotations = inspect.get_annotations(member)
                except TypeError:
                    continue
                for annotation in annotations.values():
                    assert "pb2" not in str(annotation) and "pb." not in str(annotation), (name, member, annotation)


def test_claims_report_progress_and_tasks_carry_it() -> None:
    for claim in (corral.Claim, corral.aio.Claim):
        parameters = inspect.signature(claim.report_progress).parameters
        assert list(parameters) == ["self", "text", "fraction", "usage"] and parameters["fraction"].default is None
        assert parameters["usage"].kind is inspect.Parameter.KEYWORD_ONLY and parameters["usage"].default is None
    fields = {f.name: f.default for f in dataclasses.fields(corral.Task)}
    assert (fields["progress"], fields["progress_fraction"], fields["progress_time"]) == ("", None, None)


def test_claims_report_usage_and_the_lead_sets_budgets() -> None:
    for claim in (corral.Claim, corral.aio.Claim):
        for method in (claim.complete, claim.fail, claim.renew):
            usage = inspect.signature(method).parameters["usage"]
            assert usage.kind is inspect.Parameter.KEYWORD_ONLY and usage.default is None
    for lead in (corral.Lead, corral.aio.Lead):
        parameters = inspect.signature(lead.set_budget).parameters
        assert list(parameters) == ["self", "teammate", "max_cost_micros", "max_tokens"]
    assert corral.Usage().tokens == 0 and corral.Usage(3, 4).tokens == 7
    assert "usage" in {f.name for f in dataclasses.fields(corral.Task)}
    assert {f.name for f in dataclasses.fields(corral.TeammateInfo)} >= {"usage", "budget"}
    assert "usage" in {f.name for f in dataclasses.fields(corral.Stats)}


def test_claims_ask_the_lead_and_the_lead_answers() -> None:
    for claim in (corral.Claim, corral.aio.Claim):
        assert list(inspect.signature(claim.ask).parameters) == ["self", "question"]
        assert isinstance(inspect.getattr_static(claim, "answers"), property)
    for lead in (corral.Lead, corral.aio.Lead):
        assert list(inspect.signature(lead.answer_question).parameters) == ["self", "task_id", "answer"]
    assert not corral.TaskState.NEEDS_INPUT.is_final
    assert corral.NeedsInput("which branch?").question == "which branch?"
    assert not issubclass(corral.NeedsInput, corral.CorralError), "raised by handlers, like PermanentFailure"
    assert {f.name: f.default for f in dataclasses.fields(corral.Task)}["question"] == ""
    assert [f.name for f in dataclasses.fields(corral.QuestionAnswer)] == [
        "question",
        "answer",
        "asked_by",
        "ask_time",
        "answer_time",
    ]
    assert "answers" in {f.name for f in dataclasses.fields(corral.ClaimInfo)}
    assert corral.RunSummary(corral.ExitReason.SHUTDOWN).asked == 0


def test_reviews_have_a_small_typed_surface() -> None:
    for claim in (corral.Claim, corral.aio.Claim):
        parameters = inspect.signature(claim.decide).parameters
        assert list(parameters) == ["self", "verdict", "usage"] and parameters["usage"].default is None
        for name in ("review", "rejected_result"):
            assert isinstance(inspect.getattr_static(claim, name), property)
    for lead in (corral.Lead, corral.aio.Lead):
        assert list(inspect.signature(lead.review_task).parameters) == ["self", "task_id", "verdict"]
    for run in (corral.run_teammate, corral.aio.run_teammate):
        reviewer = inspect.signature(run).parameters["reviewer"]
        assert reviewer.kind is inspect.Parameter.KEYWORD_ONLY and reviewer.default is None
    assert not corral.TaskState.IN_REVIEW.is_final
    assert corral.AttemptOutcome.REJECTED.value == 9
    assert corral.ReviewPolicy() == corral.ReviewPolicy(reviewer_role="", max_rounds=0)
    assert {f.name: f.default for f in dataclasses.fields(corral.TaskSpec)}["review"] is None
    task_fields = {f.name: f.default for f in dataclasses.fields(corral.Task)}
    assert (task_fields["review"], task_fields["review_rounds"]) == (None, 0)
    attempt_fields = {f.name: f.default for f in dataclasses.fields(corral.Attempt)}
    assert (attempt_fields["verdict"], attempt_fields["feedback"]) == (None, "")
    assert [f.name for f in dataclasses.fields(corral.ReviewItem)] == ["result", "author", "round"]
    claim_fields = [f.name for f in dataclasses.fields(corral.ClaimInfo)]
    assert claim_fields[claim_fields.index("review") :][:2] == ["review", "rejected_result"]
    assert [f.name for f in dataclasses.fields(corral.ReviewDecided)] == [
        "seq",
        "time",
        "task_id",
        "approve",
        "feedback",
        "reviewer",
        "round",
    ]
    for value in (corral.ReviewPolicy(), corral.Approve(), corral.Reject("why"), corral.ReviewItem(b"", "a", 1)):
        assert dataclasses.is_dataclass(value) and type(value).__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert corral.RunSummary(corral.ExitReason.SHUTDOWN).reviewed == 0


def test_discovered_work_has_a_small_typed_surface() -> None:
    for claim in (corral.Claim, corral.aio.Claim):
        parameters = inspect.signature(claim.propose_tasks).parameters
        assert list(parameters) == ["self", "specs", "block"]
        assert parameters["block"].kind is inspect.Parameter.KEYWORD_ONLY and parameters["block"].default is False
        assert isinstance(inspect.getattr_static(claim, "split"), property)
    for teammate in (corral.Teammate, corral.aio.Teammate):
        assert list(inspect.signature(teammate.propose_tasks).parameters) == ["self", "specs"]
    for lead in (corral.Lead, corral.aio.Lead):
        parameters = inspect.signature(lead.decide_proposals).parameters
        assert list(parameters) == ["self", "task_ids", "approve", "feedback"] and parameters["feedback"].default == ""
        assert list(inspect.signature(lead.add_dependencies).parameters) == ["self", "task_id", "depends_on"]
        assert list(inspect.signature(lead.set_task_creation).parameters) == ["self", "teammate", "policy"]
    assert [p.name for p in corral.TaskCreationPolicy] == ["PROPOSE", "ALLOW", "DENY"]
    assert not corral.TaskState.PROPOSED.is_final and corral.TaskState.PROPOSED.value == 8
    assert corral.AttemptOutcome.SPLIT.value == 10
    task_fields = {f.name: f.default for f in dataclasses.fields(corral.Task)}
    assert (task_fields["proposed_by"], task_fields["discovered_from"]) == ("", "")
    mate_fields = {f.name: f.default for f in dataclasses.fields(corral.TeammateInfo)}
    assert mate_fields["task_creation"] is corral.TaskCreationPolicy.PROPOSE
    fields = ["seq", "send_time", "task_ids", "approve", "feedback"]
    assert [f.name for f in dataclasses.fields(corral.ProposalsDecided)] == fields
    assert [f.name for f in dataclasses.fields(corral.ProposalsDecidedEvent)] == ["seq", "time", *fields[2:]]
    assert [f.name for f in dataclasses.fields(corral.TasksProposed)] == [
        "seq",
        "time",
        "teammate",
        "task_ids",
        "discovered_from",
        "needs_decision",
        "split",
    ]
    assert corral.RunSummary(corral.ExitReason.SHUTDOWN).split == 0


def test_the_lazy_table_matches_the_imports_type_checkers_see() -> None:
    """`corral` imports its names on first use (`_HOMES`); type checkers read the
    `if TYPE_CHECKING:` imports instead. Both must say the same, and name every export."""
    import ast
    import pathlib

    tree = ast.parse(pathlib.Path(corral.__file__).read_text())
    (guarded,) = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
    seen = {node.module: tuple(alias.name for alias in node.names) for node in guarded.body}
    assert seen == corral._HOMES
    assert sorted(name for names in seen.values() for name in names) == sorted(corral.__all__)


def test_the_readme_lists_every_field_of_task_and_done_summary() -> None:
    import pathlib
    import re

    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### What a `corral.Task` carries", 1)[1].split("\n## ", 1)[0]
    listed = {
        name
        for row in section.splitlines()
        if row.startswith("| `")
        for name in re.findall(r"`(\w+)`", row.split(" | ")[0])
    }
    assert listed == {f.name for f in dataclasses.fields(corral.Task)}
    done = readme.split("`wait_until_done` returns a `corral.DoneSummary`", 1)[1].split("\n\n", 1)[0]
    for name in [f.name for f in dataclasses.fields(corral.DoneSummary)] + ["completed", "failed", "canceled"]:
        assert f"`{name}`" in done, name


def test_live_output_has_a_small_typed_surface() -> None:
    for claim in (corral.Claim, corral.aio.Claim):
        assert list(inspect.signature(claim.output).parameters) == ["self", "text"]
        assert list(inspect.signature(claim.append_output).parameters) == ["self", "text"]
    for lead in (corral.Lead, corral.aio.Lead):
        parameters = inspect.signature(lead.tail_output).parameters
        assert list(parameters) == ["self", "task_id", "attempt", "offset", "follow", "reconnect_timeout"]
        assert all(parameters[name].kind is inspect.Parameter.KEYWORD_ONLY for name in list(parameters)[2:])
        defaults = [parameters[name].default for name in ("attempt", "offset", "follow")]
        assert defaults == [0, 0, True]
    for run in (corral.run_teammate, corral.aio.run_teammate):
        capture = inspect.signature(run).parameters["capture_logs"]
        assert capture.kind is inspect.Parameter.KEYWORD_ONLY and capture.default is False
    assert corral.aio.output is corral.output
    assert [f.name for f in dataclasses.fields(corral.OutputChunk)] == ["attempt", "offset", "data", "end"]
    assert corral.OutputChunk.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert issubclass(corral.LimitExceeded, corral.CorralError)
    assert not issubclass(corral.LimitExceeded, corral.Overloaded), "waiting does not lift a limit"


def test_the_worktree_per_claim_has_a_small_typed_surface() -> None:
    for run in (corral.run_teammate, corral.aio.run_teammate):
        workspace = inspect.signature(run).parameters["workspace"]
        assert workspace.kind is inspect.Parameter.KEYWORD_ONLY and workspace.default is None
    for claim in (corral.Claim, corral.aio.Claim):
        assert isinstance(inspect.getattr_static(claim, "workspace"), property)
    parameters = inspect.signature(corral.GitWorktree).parameters
    assert list(parameters) == ["repo", "base", "keep"]
    assert (parameters["base"].default, parameters["keep"].default) == ("HEAD", "on_failure")
    assert all(parameters[name].kind is inspect.Parameter.KEYWORD_ONLY for name in ("base", "keep"))
    spec = corral.GitWorktree("/src/web")
    assert dataclasses.is_dataclass(spec) and type(spec).__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert issubclass(corral.GitError, corral.CorralError)


def test_artifacts_have_a_small_typed_surface() -> None:
    for claim in (corral.Claim, corral.aio.Claim):
        parameters = inspect.signature(claim.put_artifact).parameters
        assert list(parameters) == ["self", "name", "data_or_path", "media_type"]
        assert parameters["media_type"].default is None
        dependency_artifacts = inspect.getattr_static(claim, "dependency_artifacts")
        assert isinstance(dependency_artifacts, property)
    for client in (corral.Lead, corral.aio.Lead, corral.Teammate, corral.aio.Teammate):
        parameters = inspect.signature(client.get_artifact).parameters
        assert list(parameters) == ["self", "task_id", "name", "to", "sha256"]
        assert all(parameters[name].kind is inspect.Parameter.KEYWORD_ONLY for name in ("to", "sha256"))
    assert [f.name for f in dataclasses.fields(corral.Artifact)] == [
        "name",
        "media_type",
        "size",
        "sha256",
        "attempt",
        "create_time",
    ]
    assert [f.name for f in dataclasses.fields(corral.DependencyArtifact)] == ["task_id", "artifact"]
    assert [f.name for f in dataclasses.fields(corral.ArtifactAdded)] == [
        "seq",
        "time",
        "task_id",
        "teammate",
        "artifact",
    ]
    for value in (corral.Artifact, corral.DependencyArtifact, corral.ArtifactAdded):
        assert value.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert corral.ArtifactAdded in typing.get_args(corral.WatchEvent)
    assert "artifacts" in [f.name for f in dataclasses.fields(corral.Task)]
