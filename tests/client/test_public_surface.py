"""Pins the SDK's public surface: changing it must be a deliberate edit here."""

import inspect

import corral
import corral.aio

EXPECTED_CORRAL = [
    "AlreadyExists",
    "Claim",
    "ClaimInfo",
    "ClaimTokenMismatch",
    "CorralError",
    "DoneSummary",
    "ExitReason",
    "FailedPrecondition",
    "FieldViolation",
    "IdleEvent",
    "IdleTimeout",
    "InvalidArgument",
    "Lead",
    "LeadMessage",
    "LeaseExpired",
    "LeaseLost",
    "Message",
    "NewTeammate",
    "NotFound",
    "Overloaded",
    "PermanentFailure",
    "PermissionDenied",
    "PlanDecision",
    "PlanSubmitted",
    "RunSummary",
    "ShutdownAnswered",
    "ShutdownRequest",
    "Stats",
    "Task",
    "TaskCanceled",
    "TaskChanged",
    "TaskSpec",
    "TaskState",
    "TasksFailed",
    "Teammate",
    "TeammateChangeReason",
    "TeammateChanged",
    "TeammateInfo",
    "TeammateStatus",
    "Unauthenticated",
    "Unavailable",
    "WatchEvent",
    "WriterStats",
    "current_claim",
    "run_teammate",
]

EXPECTED_AIO = ["Claim", "IdleEvent", "Lead", "Teammate", "current_claim", "run_teammate"]


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
