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

from corral._claim import Claim
from corral._errors import (
    AlreadyExists,
    ClaimTokenMismatch,
    CorralError,
    FailedPrecondition,
    FieldViolation,
    InvalidArgument,
    LeaseExpired,
    LeaseLost,
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
    ClaimInfo,
    DoneSummary,
    ExitReason,
    IdleTimeout,
    LeadMessage,
    Message,
    NewTeammate,
    PlanDecision,
    PlanSubmitted,
    RunSummary,
    ShutdownAnswered,
    ShutdownRequest,
    Stats,
    Task,
    TaskChanged,
    TaskSpec,
    TaskState,
    TeammateChanged,
    TeammateChangeReason,
    TeammateInfo,
    TeammateStatus,
    WatchEvent,
    WriterStats,
)

__all__ = [
    # clients
    "Claim",
    "Lead",
    "Teammate",
    "current_claim",
    "run_teammate",
    # values
    "ClaimInfo",
    "DoneSummary",
    "ExitReason",
    "IdleEvent",
    "IdleTimeout",
    "LeadMessage",
    "Message",
    "NewTeammate",
    "PlanDecision",
    "PlanSubmitted",
    "RunSummary",
    "ShutdownAnswered",
    "ShutdownRequest",
    "Stats",
    "Task",
    "TaskChanged",
    "TaskSpec",
    "TaskState",
    "TeammateChangeReason",
    "TeammateChanged",
    "TeammateInfo",
    "TeammateStatus",
    "WatchEvent",
    "WriterStats",
    # errors
    "AlreadyExists",
    "ClaimTokenMismatch",
    "CorralError",
    "FailedPrecondition",
    "FieldViolation",
    "InvalidArgument",
    "LeaseExpired",
    "LeaseLost",
    "NotFound",
    "Overloaded",
    "PermanentFailure",
    "PermissionDenied",
    "TaskCanceled",
    "TasksFailed",
    "Unauthenticated",
    "Unavailable",
]
