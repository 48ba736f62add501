"""corral: the Python SDK for the corral coordination daemon.

A Lead starts the daemon and gives it a task DAG; teammates open an Idle
stream and receive each ready task exactly once, with a claim token and a
lease. Control messages (shutdown requests, plan decisions) arrive before work.

    with corral.Lead.launch() as lead:
        lead.create_tasks([corral.TaskSpec("build"), corral.TaskSpec("test", depends_on=("build",))])
        env = lead.teammate_env(lead.add_teammate("ann"))
        ...  # start teammate processes with `env`; each calls corral.run_teammate(handler)
        lead.wait_until_done(timeout=600)

`corral.aio` offers the same shapes on asyncio.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from corral._claim import Claim
    from corral._errors import (
        AlreadyExists,
        AttemptTimedOut,
        ClaimEndedError,
        ClaimRevoked,
        ClaimTokenMismatch,
        CorralError,
        FailedPrecondition,
        FieldViolation,
        GitError,
        InvalidArgument,
        LeaseExpired,
        LeaseLost,
        NeedsInput,
        NotFound,
        Overloaded,
        PermanentFailure,
        PermissionDenied,
        TaskCanceled,
        TasksFailed,
        Unauthenticated,
        Unavailable,
    )
    from corral._lead import Lead
    from corral._runner import current_claim, run_teammate
    from corral._teammate import IdleEvent, Teammate
    from corral._types import (
        Approve,
        Attempt,
        AttemptOutcome,
        Budget,
        BudgetExhausted,
        BudgetExhaustedEvent,
        ClaimEnded,
        ClaimEndReason,
        ClaimInfo,
        ConcurrencyLimit,
        DoneSummary,
        ExitReason,
        Identity,
        IdleTimeout,
        LeadMessage,
        Message,
        NewTeammate,
        PlanDecided,
        PlanDecision,
        PlanSubmitted,
        PostgresStats,
        ProposalsDecided,
        ProposalsDecidedEvent,
        QuestionAnswer,
        QuestionAnswered,
        QuestionAsked,
        Reject,
        ReviewDecided,
        ReviewItem,
        ReviewPolicy,
        RunSummary,
        ShutdownAnswered,
        ShutdownRequest,
        Stats,
        Task,
        TaskChanged,
        TaskCreationPolicy,
        TaskSpec,
        TasksProposed,
        TaskState,
        TeammateAvailability,
        TeammateChanged,
        TeammateChangeReason,
        TeammateInfo,
        TeammateStatus,
        Usage,
        Verdict,
        ViewerInfo,
        WaitingFor,
        WatchEvent,
        WriterStats,
    )
    from corral._worktree import GitWorktree

# Where each public name lives. Importing `corral` loads none of them: the
# daemon, which needs only the generated `corral.v1`, starts without the SDK
# (about 85 ms less per start), and the first use of a name imports its home.
# tests/client/test_public_surface.py checks this table against the imports above.
_HOMES = {
    "corral._claim": ("Claim",),
    "corral._errors": (
        "AlreadyExists",
        "AttemptTimedOut",
        "ClaimEndedError",
        "ClaimRevoked",
        "ClaimTokenMismatch",
        "CorralError",
        "FailedPrecondition",
        "FieldViolation",
        "GitError",
        "InvalidArgument",
        "LeaseExpired",
        "LeaseLost",
        "NeedsInput",
        "NotFound",
        "Overloaded",
        "PermanentFailure",
        "PermissionDenied",
        "TaskCanceled",
        "TasksFailed",
        "Unauthenticated",
        "Unavailable",
    ),
    "corral._lead": ("Lead",),
    "corral._runner": ("current_claim", "run_teammate"),
    "corral._teammate": ("IdleEvent", "Teammate"),
    "corral._worktree": ("GitWorktree",),
    "corral._types": (
        "Approve",
        "Attempt",
        "AttemptOutcome",
        "Budget",
        "BudgetExhausted",
        "BudgetExhaustedEvent",
        "ClaimEnded",
        "ClaimEndReason",
        "ClaimInfo",
        "ConcurrencyLimit",
        "DoneSummary",
        "ExitReason",
        "Identity",
        "IdleTimeout",
        "LeadMessage",
        "Message",
        "NewTeammate",
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
        "ReviewDecided",
        "ReviewItem",
        "ReviewPolicy",
        "RunSummary",
        "ShutdownAnswered",
        "ShutdownRequest",
        "Stats",
        "Task",
        "TaskChanged",
        "TaskCreationPolicy",
        "TaskSpec",
        "TasksProposed",
        "TaskState",
        "TeammateAvailability",
        "TeammateChanged",
        "TeammateChangeReason",
        "TeammateInfo",
        "TeammateStatus",
        "Usage",
        "Verdict",
        "ViewerInfo",
        "WaitingFor",
        "WatchEvent",
        "WriterStats",
    ),
}

__all__ = [
    # clients
    "Claim",
    "Lead",
    "Teammate",
    "current_claim",
    "run_teammate",
    # values
    "Approve",
    "Attempt",
    "AttemptOutcome",
    "Budget",
    "BudgetExhausted",
    "BudgetExhaustedEvent",
    "ClaimEndReason",
    "ClaimEnded",
    "ClaimInfo",
    "ConcurrencyLimit",
    "DoneSummary",
    "ExitReason",
    "GitWorktree",
    "Identity",
    "IdleEvent",
    "IdleTimeout",
    "LeadMessage",
    "Message",
    "NewTeammate",
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
    "ReviewDecided",
    "ReviewItem",
    "ReviewPolicy",
    "RunSummary",
    "ShutdownAnswered",
    "ShutdownRequest",
    "Stats",
    "Task",
    "TaskChanged",
    "TaskCreationPolicy",
    "TaskSpec",
    "TaskState",
    "TasksProposed",
    "TeammateAvailability",
    "TeammateChangeReason",
    "TeammateChanged",
    "TeammateInfo",
    "TeammateStatus",
    "WaitingFor",
    "Usage",
    "Verdict",
    "ViewerInfo",
    "WatchEvent",
    "WriterStats",
    # errors
    "AlreadyExists",
    "AttemptTimedOut",
    "ClaimEndedError",
    "ClaimRevoked",
    "ClaimTokenMismatch",
    "CorralError",
    "FailedPrecondition",
    "FieldViolation",
    "GitError",
    "InvalidArgument",
    "LeaseExpired",
    "LeaseLost",
    "NeedsInput",
    "NotFound",
    "Overloaded",
    "PermanentFailure",
    "PermissionDenied",
    "TaskCanceled",
    "TasksFailed",
    "Unauthenticated",
    "Unavailable",
]

if not TYPE_CHECKING:  # hidden from type checkers, which see the imports above instead
    import importlib

    _HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

    def __getattr__(name: str) -> object:
        module = _HOME_OF.get(name)
        if module is None:
            raise AttributeError(f"module 'corral' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # later uses do not come here again
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
