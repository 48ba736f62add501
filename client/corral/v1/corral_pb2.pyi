import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.rpc import status_pb2 as _status_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATE_UNSPECIFIED: _ClassVar[TaskState]
    TASK_STATE_PENDING: _ClassVar[TaskState]
    TASK_STATE_IN_PROGRESS: _ClassVar[TaskState]
    TASK_STATE_COMPLETED: _ClassVar[TaskState]
    TASK_STATE_FAILED: _ClassVar[TaskState]
    TASK_STATE_CANCELED: _ClassVar[TaskState]
    TASK_STATE_NEEDS_INPUT: _ClassVar[TaskState]
    TASK_STATE_IN_REVIEW: _ClassVar[TaskState]
    TASK_STATE_PROPOSED: _ClassVar[TaskState]

class TeammateAvailability(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TEAMMATE_AVAILABILITY_UNSPECIFIED: _ClassVar[TeammateAvailability]
    TEAMMATE_AVAILABILITY_NONE_REGISTERED: _ClassVar[TeammateAvailability]
    TEAMMATE_AVAILABILITY_NONE_ONLINE: _ClassVar[TeammateAvailability]

class AttemptOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ATTEMPT_OUTCOME_UNSPECIFIED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_IN_PROGRESS: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_COMPLETED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_FAILED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_EXPIRED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_RELEASED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_CANCELED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_REVOKED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_ASKED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_REJECTED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_SPLIT: _ClassVar[AttemptOutcome]

class TeammateStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TEAMMATE_STATUS_UNSPECIFIED: _ClassVar[TeammateStatus]
    TEAMMATE_STATUS_OFFLINE: _ClassVar[TeammateStatus]
    TEAMMATE_STATUS_IDLE: _ClassVar[TeammateStatus]
    TEAMMATE_STATUS_BUSY: _ClassVar[TeammateStatus]
    TEAMMATE_STATUS_AWAITING_PLAN: _ClassVar[TeammateStatus]
    TEAMMATE_STATUS_SHUTTING_DOWN: _ClassVar[TeammateStatus]
    TEAMMATE_STATUS_REMOVED: _ClassVar[TeammateStatus]
    TEAMMATE_STATUS_WAITING: _ClassVar[TeammateStatus]

class TaskCreationPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_CREATION_POLICY_UNSPECIFIED: _ClassVar[TaskCreationPolicy]
    TASK_CREATION_POLICY_PROPOSE: _ClassVar[TaskCreationPolicy]
    TASK_CREATION_POLICY_ALLOW: _ClassVar[TaskCreationPolicy]
    TASK_CREATION_POLICY_DENY: _ClassVar[TaskCreationPolicy]

class TeammateChangeReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TEAMMATE_CHANGE_REASON_UNSPECIFIED: _ClassVar[TeammateChangeReason]
    TEAMMATE_CHANGE_REASON_JOINED: _ClassVar[TeammateChangeReason]
    TEAMMATE_CHANGE_REASON_IDLE: _ClassVar[TeammateChangeReason]
    TEAMMATE_CHANGE_REASON_IDLE_TIMEOUT: _ClassVar[TeammateChangeReason]
    TEAMMATE_CHANGE_REASON_SHUTTING_DOWN: _ClassVar[TeammateChangeReason]
    TEAMMATE_CHANGE_REASON_LEFT: _ClassVar[TeammateChangeReason]
    TEAMMATE_CHANGE_REASON_REMOVED: _ClassVar[TeammateChangeReason]
    TEAMMATE_CHANGE_REASON_BUSY: _ClassVar[TeammateChangeReason]
    TEAMMATE_CHANGE_REASON_AWAITING_PLAN: _ClassVar[TeammateChangeReason]
    TEAMMATE_CHANGE_REASON_ADDED: _ClassVar[TeammateChangeReason]
    TEAMMATE_CHANGE_REASON_WAITING: _ClassVar[TeammateChangeReason]

class ClaimEndReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLAIM_END_REASON_UNSPECIFIED: _ClassVar[ClaimEndReason]
    CLAIM_END_REASON_LEASE_EXPIRED: _ClassVar[ClaimEndReason]
    CLAIM_END_REASON_TASK_CANCELED: _ClassVar[ClaimEndReason]
    CLAIM_END_REASON_TEAMMATE_REMOVED: _ClassVar[ClaimEndReason]
    CLAIM_END_REASON_REVOKED: _ClassVar[ClaimEndReason]
    CLAIM_END_REASON_ATTEMPT_TIMEOUT: _ClassVar[ClaimEndReason]
TASK_STATE_UNSPECIFIED: TaskState
TASK_STATE_PENDING: TaskState
TASK_STATE_IN_PROGRESS: TaskState
TASK_STATE_COMPLETED: TaskState
TASK_STATE_FAILED: TaskState
TASK_STATE_CANCELED: TaskState
TASK_STATE_NEEDS_INPUT: TaskState
TASK_STATE_IN_REVIEW: TaskState
TASK_STATE_PROPOSED: TaskState
TEAMMATE_AVAILABILITY_UNSPECIFIED: TeammateAvailability
TEAMMATE_AVAILABILITY_NONE_REGISTERED: TeammateAvailability
TEAMMATE_AVAILABILITY_NONE_ONLINE: TeammateAvailability
ATTEMPT_OUTCOME_UNSPECIFIED: AttemptOutcome
ATTEMPT_OUTCOME_IN_PROGRESS: AttemptOutcome
ATTEMPT_OUTCOME_COMPLETED: AttemptOutcome
ATTEMPT_OUTCOME_FAILED: AttemptOutcome
ATTEMPT_OUTCOME_EXPIRED: AttemptOutcome
ATTEMPT_OUTCOME_RELEASED: AttemptOutcome
ATTEMPT_OUTCOME_CANCELED: AttemptOutcome
ATTEMPT_OUTCOME_REVOKED: AttemptOutcome
ATTEMPT_OUTCOME_ASKED: AttemptOutcome
ATTEMPT_OUTCOME_REJECTED: AttemptOutcome
ATTEMPT_OUTCOME_SPLIT: AttemptOutcome
TEAMMATE_STATUS_UNSPECIFIED: TeammateStatus
TEAMMATE_STATUS_OFFLINE: TeammateStatus
TEAMMATE_STATUS_IDLE: TeammateStatus
TEAMMATE_STATUS_BUSY: TeammateStatus
TEAMMATE_STATUS_AWAITING_PLAN: TeammateStatus
TEAMMATE_STATUS_SHUTTING_DOWN: TeammateStatus
TEAMMATE_STATUS_REMOVED: TeammateStatus
TEAMMATE_STATUS_WAITING: TeammateStatus
TASK_CREATION_POLICY_UNSPECIFIED: TaskCreationPolicy
TASK_CREATION_POLICY_PROPOSE: TaskCreationPolicy
TASK_CREATION_POLICY_ALLOW: TaskCreationPolicy
TASK_CREATION_POLICY_DENY: TaskCreationPolicy
TEAMMATE_CHANGE_REASON_UNSPECIFIED: TeammateChangeReason
TEAMMATE_CHANGE_REASON_JOINED: TeammateChangeReason
TEAMMATE_CHANGE_REASON_IDLE: TeammateChangeReason
TEAMMATE_CHANGE_REASON_IDLE_TIMEOUT: TeammateChangeReason
TEAMMATE_CHANGE_REASON_SHUTTING_DOWN: TeammateChangeReason
TEAMMATE_CHANGE_REASON_LEFT: TeammateChangeReason
TEAMMATE_CHANGE_REASON_REMOVED: TeammateChangeReason
TEAMMATE_CHANGE_REASON_BUSY: TeammateChangeReason
TEAMMATE_CHANGE_REASON_AWAITING_PLAN: TeammateChangeReason
TEAMMATE_CHANGE_REASON_ADDED: TeammateChangeReason
TEAMMATE_CHANGE_REASON_WAITING: TeammateChangeReason
CLAIM_END_REASON_UNSPECIFIED: ClaimEndReason
CLAIM_END_REASON_LEASE_EXPIRED: ClaimEndReason
CLAIM_END_REASON_TASK_CANCELED: ClaimEndReason
CLAIM_END_REASON_TEAMMATE_REMOVED: ClaimEndReason
CLAIM_END_REASON_REVOKED: ClaimEndReason
CLAIM_END_REASON_ATTEMPT_TIMEOUT: ClaimEndReason

class ReviewPolicy(_message.Message):
    __slots__ = ("reviewer_role", "max_rounds")
    REVIEWER_ROLE_FIELD_NUMBER: _ClassVar[int]
    MAX_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    reviewer_role: str
    max_rounds: int
    def __init__(self, reviewer_role: _Optional[str] = ..., max_rounds: _Optional[int] = ...) -> None: ...

class TaskSpec(_message.Message):
    __slots__ = ("id", "title", "description", "payload", "depends_on", "priority", "max_attempts", "lease_duration", "required_role", "not_before_time", "retry_backoff", "retry_backoff_max", "trace_parent", "concurrency_key", "attempt_timeout", "review", "resources", "shared_resources")
    ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LEASE_DURATION_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_ROLE_FIELD_NUMBER: _ClassVar[int]
    NOT_BEFORE_TIME_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKOFF_MAX_FIELD_NUMBER: _ClassVar[int]
    TRACE_PARENT_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    REVIEW_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    SHARED_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    id: str
    title: str
    description: str
    payload: bytes
    depends_on: _containers.RepeatedScalarFieldContainer[str]
    priority: int
    max_attempts: int
    lease_duration: _duration_pb2.Duration
    required_role: str
    not_before_time: _timestamp_pb2.Timestamp
    retry_backoff: _duration_pb2.Duration
    retry_backoff_max: _duration_pb2.Duration
    trace_parent: str
    concurrency_key: str
    attempt_timeout: _duration_pb2.Duration
    review: ReviewPolicy
    resources: _containers.RepeatedScalarFieldContainer[str]
    shared_resources: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., title: _Optional[str] = ..., description: _Optional[str] = ..., payload: _Optional[bytes] = ..., depends_on: _Optional[_Iterable[str]] = ..., priority: _Optional[int] = ..., max_attempts: _Optional[int] = ..., lease_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., required_role: _Optional[str] = ..., not_before_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., retry_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., retry_backoff_max: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., trace_parent: _Optional[str] = ..., concurrency_key: _Optional[str] = ..., attempt_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., review: _Optional[_Union[ReviewPolicy, _Mapping]] = ..., resources: _Optional[_Iterable[str]] = ..., shared_resources: _Optional[_Iterable[str]] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("id", "title", "description", "payload", "depends_on", "priority", "required_role", "max_attempts", "lease_duration", "state", "owner", "attempt", "result", "error", "seq", "create_time", "lease_expire_time", "finish_time", "not_before_time", "retry_backoff", "retry_backoff_max", "ready_time", "progress", "progress_fraction", "progress_time", "waiting_for", "trace_parent", "concurrency_key", "usage", "attempt_timeout", "attempts_used", "question", "review", "review_rounds", "discovered_from", "proposed_by", "artifacts", "resources", "shared_resources")
    ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_ROLE_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LEASE_DURATION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    NOT_BEFORE_TIME_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKOFF_MAX_FIELD_NUMBER: _ClassVar[int]
    READY_TIME_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FRACTION_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_TIME_FIELD_NUMBER: _ClassVar[int]
    WAITING_FOR_FIELD_NUMBER: _ClassVar[int]
    TRACE_PARENT_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_USED_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    REVIEW_FIELD_NUMBER: _ClassVar[int]
    REVIEW_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    DISCOVERED_FROM_FIELD_NUMBER: _ClassVar[int]
    PROPOSED_BY_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    SHARED_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    id: str
    title: str
    description: str
    payload: bytes
    depends_on: _containers.RepeatedScalarFieldContainer[str]
    priority: int
    required_role: str
    max_attempts: int
    lease_duration: _duration_pb2.Duration
    state: TaskState
    owner: str
    attempt: int
    result: bytes
    error: str
    seq: int
    create_time: _timestamp_pb2.Timestamp
    lease_expire_time: _timestamp_pb2.Timestamp
    finish_time: _timestamp_pb2.Timestamp
    not_before_time: _timestamp_pb2.Timestamp
    retry_backoff: _duration_pb2.Duration
    retry_backoff_max: _duration_pb2.Duration
    ready_time: _timestamp_pb2.Timestamp
    progress: str
    progress_fraction: float
    progress_time: _timestamp_pb2.Timestamp
    waiting_for: WaitingFor
    trace_parent: str
    concurrency_key: str
    usage: Usage
    attempt_timeout: _duration_pb2.Duration
    attempts_used: int
    question: str
    review: ReviewPolicy
    review_rounds: int
    discovered_from: str
    proposed_by: str
    artifacts: _containers.RepeatedCompositeFieldContainer[Artifact]
    resources: _containers.RepeatedScalarFieldContainer[str]
    shared_resources: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., title: _Optional[str] = ..., description: _Optional[str] = ..., payload: _Optional[bytes] = ..., depends_on: _Optional[_Iterable[str]] = ..., priority: _Optional[int] = ..., required_role: _Optional[str] = ..., max_attempts: _Optional[int] = ..., lease_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., state: _Optional[_Union[TaskState, str]] = ..., owner: _Optional[str] = ..., attempt: _Optional[int] = ..., result: _Optional[bytes] = ..., error: _Optional[str] = ..., seq: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lease_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., not_before_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., retry_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., retry_backoff_max: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., ready_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., progress: _Optional[str] = ..., progress_fraction: _Optional[float] = ..., progress_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., waiting_for: _Optional[_Union[WaitingFor, _Mapping]] = ..., trace_parent: _Optional[str] = ..., concurrency_key: _Optional[str] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., attempt_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., attempts_used: _Optional[int] = ..., question: _Optional[str] = ..., review: _Optional[_Union[ReviewPolicy, _Mapping]] = ..., review_rounds: _Optional[int] = ..., discovered_from: _Optional[str] = ..., proposed_by: _Optional[str] = ..., artifacts: _Optional[_Iterable[_Union[Artifact, _Mapping]]] = ..., resources: _Optional[_Iterable[str]] = ..., shared_resources: _Optional[_Iterable[str]] = ...) -> None: ...

class Artifact(_message.Message):
    __slots__ = ("name", "media_type", "size", "sha256", "attempt", "create_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    media_type: str
    size: int
    sha256: str
    attempt: int
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., media_type: _Optional[str] = ..., size: _Optional[int] = ..., sha256: _Optional[str] = ..., attempt: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DependencyArtifact(_message.Message):
    __slots__ = ("task_id", "artifact")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    artifact: Artifact
    def __init__(self, task_id: _Optional[str] = ..., artifact: _Optional[_Union[Artifact, _Mapping]] = ...) -> None: ...

class WaitingFor(_message.Message):
    __slots__ = ("dependencies", "ready_time", "concurrency_key", "teammates", "resources")
    DEPENDENCIES_FIELD_NUMBER: _ClassVar[int]
    READY_TIME_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    TEAMMATES_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    dependencies: _containers.RepeatedScalarFieldContainer[str]
    ready_time: _timestamp_pb2.Timestamp
    concurrency_key: str
    teammates: TeammateAvailability
    resources: _containers.RepeatedCompositeFieldContainer[ResourceWait]
    def __init__(self, dependencies: _Optional[_Iterable[str]] = ..., ready_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., concurrency_key: _Optional[str] = ..., teammates: _Optional[_Union[TeammateAvailability, str]] = ..., resources: _Optional[_Iterable[_Union[ResourceWait, _Mapping]]] = ...) -> None: ...

class ResourceWait(_message.Message):
    __slots__ = ("resource", "held_by_task_id", "held_resource", "held_exclusive")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    HELD_BY_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    HELD_RESOURCE_FIELD_NUMBER: _ClassVar[int]
    HELD_EXCLUSIVE_FIELD_NUMBER: _ClassVar[int]
    resource: str
    held_by_task_id: str
    held_resource: str
    held_exclusive: bool
    def __init__(self, resource: _Optional[str] = ..., held_by_task_id: _Optional[str] = ..., held_resource: _Optional[str] = ..., held_exclusive: _Optional[bool] = ...) -> None: ...

class HeldResource(_message.Message):
    __slots__ = ("resource", "task_id", "teammate", "exclusive")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TEAMMATE_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_FIELD_NUMBER: _ClassVar[int]
    resource: str
    task_id: str
    teammate: str
    exclusive: bool
    def __init__(self, resource: _Optional[str] = ..., task_id: _Optional[str] = ..., teammate: _Optional[str] = ..., exclusive: _Optional[bool] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("input_tokens", "output_tokens", "cost_micros", "model")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_MICROS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    output_tokens: int
    cost_micros: int
    model: str
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cost_micros: _Optional[int] = ..., model: _Optional[str] = ...) -> None: ...

class Budget(_message.Message):
    __slots__ = ("max_cost_micros", "max_tokens")
    MAX_COST_MICROS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    max_cost_micros: int
    max_tokens: int
    def __init__(self, max_cost_micros: _Optional[int] = ..., max_tokens: _Optional[int] = ...) -> None: ...

class BudgetExhausted(_message.Message):
    __slots__ = ("teammate", "spent", "budget")
    TEAMMATE_FIELD_NUMBER: _ClassVar[int]
    SPENT_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    teammate: str
    spent: Usage
    budget: Budget
    def __init__(self, teammate: _Optional[str] = ..., spent: _Optional[_Union[Usage, _Mapping]] = ..., budget: _Optional[_Union[Budget, _Mapping]] = ...) -> None: ...

class TaskAttempt(_message.Message):
    __slots__ = ("attempt", "owner", "fence", "claim_time", "end_time", "outcome", "error", "verdict", "feedback")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    CLAIM_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    owner: str
    fence: int
    claim_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    outcome: AttemptOutcome
    error: str
    verdict: ReviewVerdict
    feedback: str
    def __init__(self, attempt: _Optional[int] = ..., owner: _Optional[str] = ..., fence: _Optional[int] = ..., claim_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., outcome: _Optional[_Union[AttemptOutcome, str]] = ..., error: _Optional[str] = ..., verdict: _Optional[_Union[ReviewVerdict, _Mapping]] = ..., feedback: _Optional[str] = ...) -> None: ...

class Teammate(_message.Message):
    __slots__ = ("name", "roles", "status", "require_plan_approval", "held_task_ids", "waiting_for_task_ids", "usage", "budget", "daemon", "task_creation")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_PLAN_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    HELD_TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    WAITING_FOR_TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    DAEMON_FIELD_NUMBER: _ClassVar[int]
    TASK_CREATION_FIELD_NUMBER: _ClassVar[int]
    name: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    status: TeammateStatus
    require_plan_approval: bool
    held_task_ids: _containers.RepeatedScalarFieldContainer[str]
    waiting_for_task_ids: _containers.RepeatedScalarFieldContainer[str]
    usage: Usage
    budget: Budget
    daemon: str
    task_creation: TaskCreationPolicy
    def __init__(self, name: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., status: _Optional[_Union[TeammateStatus, str]] = ..., require_plan_approval: _Optional[bool] = ..., held_task_ids: _Optional[_Iterable[str]] = ..., waiting_for_task_ids: _Optional[_Iterable[str]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., budget: _Optional[_Union[Budget, _Mapping]] = ..., daemon: _Optional[str] = ..., task_creation: _Optional[_Union[TaskCreationPolicy, str]] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("seq", "send_time", "sender", "body")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SEND_TIME_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    seq: int
    send_time: _timestamp_pb2.Timestamp
    sender: str
    body: str
    def __init__(self, seq: _Optional[int] = ..., send_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., sender: _Optional[str] = ..., body: _Optional[str] = ...) -> None: ...

class ShutdownRequest(_message.Message):
    __slots__ = ("seq", "send_time", "request_id", "reason", "deadline_time")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SEND_TIME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_TIME_FIELD_NUMBER: _ClassVar[int]
    seq: int
    send_time: _timestamp_pb2.Timestamp
    request_id: str
    reason: str
    deadline_time: _timestamp_pb2.Timestamp
    def __init__(self, seq: _Optional[int] = ..., send_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., request_id: _Optional[str] = ..., reason: _Optional[str] = ..., deadline_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class PlanDecision(_message.Message):
    __slots__ = ("seq", "send_time", "plan_id", "approve", "feedback")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SEND_TIME_FIELD_NUMBER: _ClassVar[int]
    PLAN_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_FIELD_NUMBER: _ClassVar[int]
    seq: int
    send_time: _timestamp_pb2.Timestamp
    plan_id: str
    approve: bool
    feedback: str
    def __init__(self, seq: _Optional[int] = ..., send_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., plan_id: _Optional[str] = ..., approve: _Optional[bool] = ..., feedback: _Optional[str] = ...) -> None: ...

class ProposalDecision(_message.Message):
    __slots__ = ("seq", "send_time", "task_ids", "approve", "feedback")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SEND_TIME_FIELD_NUMBER: _ClassVar[int]
    TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_FIELD_NUMBER: _ClassVar[int]
    seq: int
    send_time: _timestamp_pb2.Timestamp
    task_ids: _containers.RepeatedScalarFieldContainer[str]
    approve: bool
    feedback: str
    def __init__(self, seq: _Optional[int] = ..., send_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., task_ids: _Optional[_Iterable[str]] = ..., approve: _Optional[bool] = ..., feedback: _Optional[str] = ...) -> None: ...

class Claim(_message.Message):
    __slots__ = ("task", "claim_token", "lease_expire_time", "attempt", "fence", "previous_attempt", "dependency_results", "dependency_results_omitted", "answers", "review", "rejected_result", "dependency_artifacts")
    class DependencyResultsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    TASK_FIELD_NUMBER: _ClassVar[int]
    CLAIM_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_RESULTS_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_RESULTS_OMITTED_FIELD_NUMBER: _ClassVar[int]
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    REVIEW_FIELD_NUMBER: _ClassVar[int]
    REJECTED_RESULT_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    task: Task
    claim_token: str
    lease_expire_time: _timestamp_pb2.Timestamp
    attempt: int
    fence: int
    previous_attempt: TaskAttempt
    dependency_results: _containers.ScalarMap[str, bytes]
    dependency_results_omitted: _containers.RepeatedScalarFieldContainer[str]
    answers: _containers.RepeatedCompositeFieldContainer[QuestionAnswer]
    review: ReviewItem
    rejected_result: bytes
    dependency_artifacts: _containers.RepeatedCompositeFieldContainer[DependencyArtifact]
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ..., claim_token: _Optional[str] = ..., lease_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., attempt: _Optional[int] = ..., fence: _Optional[int] = ..., previous_attempt: _Optional[_Union[TaskAttempt, _Mapping]] = ..., dependency_results: _Optional[_Mapping[str, bytes]] = ..., dependency_results_omitted: _Optional[_Iterable[str]] = ..., answers: _Optional[_Iterable[_Union[QuestionAnswer, _Mapping]]] = ..., review: _Optional[_Union[ReviewItem, _Mapping]] = ..., rejected_result: _Optional[bytes] = ..., dependency_artifacts: _Optional[_Iterable[_Union[DependencyArtifact, _Mapping]]] = ...) -> None: ...

class ReviewItem(_message.Message):
    __slots__ = ("result", "author", "round")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    result: bytes
    author: str
    round: int
    def __init__(self, result: _Optional[bytes] = ..., author: _Optional[str] = ..., round: _Optional[int] = ...) -> None: ...

class ReviewVerdict(_message.Message):
    __slots__ = ("approve", "feedback")
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_FIELD_NUMBER: _ClassVar[int]
    approve: bool
    feedback: str
    def __init__(self, approve: _Optional[bool] = ..., feedback: _Optional[str] = ...) -> None: ...

class QuestionAnswer(_message.Message):
    __slots__ = ("question", "answer", "asked_by", "ask_time", "answer_time")
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    ASKED_BY_FIELD_NUMBER: _ClassVar[int]
    ASK_TIME_FIELD_NUMBER: _ClassVar[int]
    ANSWER_TIME_FIELD_NUMBER: _ClassVar[int]
    question: str
    answer: str
    asked_by: str
    ask_time: _timestamp_pb2.Timestamp
    answer_time: _timestamp_pb2.Timestamp
    def __init__(self, question: _Optional[str] = ..., answer: _Optional[str] = ..., asked_by: _Optional[str] = ..., ask_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., answer_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class IdleTimeout(_message.Message):
    __slots__ = ("idle_polls",)
    IDLE_POLLS_FIELD_NUMBER: _ClassVar[int]
    idle_polls: int
    def __init__(self, idle_polls: _Optional[int] = ...) -> None: ...

class SessionRequest(_message.Message):
    __slots__ = ("op_id", "open", "ack", "renew", "complete", "fail", "release", "free_slot", "ask", "propose", "output")
    OP_ID_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    RENEW_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    FAIL_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    FREE_SLOT_FIELD_NUMBER: _ClassVar[int]
    ASK_FIELD_NUMBER: _ClassVar[int]
    PROPOSE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    op_id: str
    open: IdleRequest
    ack: AckMessagesRequest
    renew: RenewLeaseRequest
    complete: CompleteTaskRequest
    fail: FailTaskRequest
    release: ReleaseTaskRequest
    free_slot: FreeSlotRequest
    ask: AskQuestionRequest
    propose: ProposeTasksRequest
    output: AppendOutputRequest
    def __init__(self, op_id: _Optional[str] = ..., open: _Optional[_Union[IdleRequest, _Mapping]] = ..., ack: _Optional[_Union[AckMessagesRequest, _Mapping]] = ..., renew: _Optional[_Union[RenewLeaseRequest, _Mapping]] = ..., complete: _Optional[_Union[CompleteTaskRequest, _Mapping]] = ..., fail: _Optional[_Union[FailTaskRequest, _Mapping]] = ..., release: _Optional[_Union[ReleaseTaskRequest, _Mapping]] = ..., free_slot: _Optional[_Union[FreeSlotRequest, _Mapping]] = ..., ask: _Optional[_Union[AskQuestionRequest, _Mapping]] = ..., propose: _Optional[_Union[ProposeTasksRequest, _Mapping]] = ..., output: _Optional[_Union[AppendOutputRequest, _Mapping]] = ...) -> None: ...

class SessionResponse(_message.Message):
    __slots__ = ("op_result", "message", "shutdown_request", "plan_decision", "claim", "idle_timeout", "budget_exhausted", "claim_ended", "proposals_decided")
    OP_RESULT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SHUTDOWN_REQUEST_FIELD_NUMBER: _ClassVar[int]
    PLAN_DECISION_FIELD_NUMBER: _ClassVar[int]
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    BUDGET_EXHAUSTED_FIELD_NUMBER: _ClassVar[int]
    CLAIM_ENDED_FIELD_NUMBER: _ClassVar[int]
    PROPOSALS_DECIDED_FIELD_NUMBER: _ClassVar[int]
    op_result: SessionOpResult
    message: Message
    shutdown_request: ShutdownRequest
    plan_decision: PlanDecision
    claim: Claim
    idle_timeout: IdleTimeout
    budget_exhausted: BudgetExhausted
    claim_ended: ClaimEnded
    proposals_decided: ProposalDecision
    def __init__(self, op_result: _Optional[_Union[SessionOpResult, _Mapping]] = ..., message: _Optional[_Union[Message, _Mapping]] = ..., shutdown_request: _Optional[_Union[ShutdownRequest, _Mapping]] = ..., plan_decision: _Optional[_Union[PlanDecision, _Mapping]] = ..., claim: _Optional[_Union[Claim, _Mapping]] = ..., idle_timeout: _Optional[_Union[IdleTimeout, _Mapping]] = ..., budget_exhausted: _Optional[_Union[BudgetExhausted, _Mapping]] = ..., claim_ended: _Optional[_Union[ClaimEnded, _Mapping]] = ..., proposals_decided: _Optional[_Union[ProposalDecision, _Mapping]] = ...) -> None: ...

class SessionOpResult(_message.Message):
    __slots__ = ("op_id", "status", "lease_expire_time", "result", "task", "protocol_pending", "proposed_tasks", "output")
    OP_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_PENDING_FIELD_NUMBER: _ClassVar[int]
    PROPOSED_TASKS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    op_id: str
    status: _status_pb2.Status
    lease_expire_time: _timestamp_pb2.Timestamp
    result: bytes
    task: Task
    protocol_pending: bool
    proposed_tasks: _containers.RepeatedCompositeFieldContainer[Task]
    output: AppendOutputResponse
    def __init__(self, op_id: _Optional[str] = ..., status: _Optional[_Union[_status_pb2.Status, _Mapping]] = ..., lease_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., result: _Optional[bytes] = ..., task: _Optional[_Union[Task, _Mapping]] = ..., protocol_pending: _Optional[bool] = ..., proposed_tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., output: _Optional[_Union[AppendOutputResponse, _Mapping]] = ...) -> None: ...

class CreateTasksRequest(_message.Message):
    __slots__ = ("tasks", "request_id")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskSpec]
    request_id: str
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskSpec, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class CreateTasksResponse(_message.Message):
    __slots__ = ("tasks", "unchanged_task_ids")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    unchanged_task_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., unchanged_task_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class CancelTasksRequest(_message.Message):
    __slots__ = ("ids", "request_id")
    IDS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    request_id: str
    def __init__(self, ids: _Optional[_Iterable[str]] = ..., request_id: _Optional[str] = ...) -> None: ...

class RetryTasksRequest(_message.Message):
    __slots__ = ("ids", "reset_attempts", "request_id")
    IDS_FIELD_NUMBER: _ClassVar[int]
    RESET_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    reset_attempts: bool
    request_id: str
    def __init__(self, ids: _Optional[_Iterable[str]] = ..., reset_attempts: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class RetryTasksResponse(_message.Message):
    __slots__ = ("tasks", "omitted_count")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    OMITTED_COUNT_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    omitted_count: int
    def __init__(self, tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., omitted_count: _Optional[int] = ...) -> None: ...

class CancelTasksResponse(_message.Message):
    __slots__ = ("tasks", "omitted_count")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    OMITTED_COUNT_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    omitted_count: int
    def __init__(self, tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., omitted_count: _Optional[int] = ...) -> None: ...

class AddTeammateRequest(_message.Message):
    __slots__ = ("name", "roles", "require_plan_approval", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_PLAN_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    require_plan_approval: bool
    request_id: str
    def __init__(self, name: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., require_plan_approval: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class AddTeammateResponse(_message.Message):
    __slots__ = ("teammate", "token")
    TEAMMATE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    teammate: Teammate
    token: str
    def __init__(self, teammate: _Optional[_Union[Teammate, _Mapping]] = ..., token: _Optional[str] = ...) -> None: ...

class RemoveTeammateRequest(_message.Message):
    __slots__ = ("name", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    request_id: str
    def __init__(self, name: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class RemoveTeammateResponse(_message.Message):
    __slots__ = ("teammate",)
    TEAMMATE_FIELD_NUMBER: _ClassVar[int]
    teammate: Teammate
    def __init__(self, teammate: _Optional[_Union[Teammate, _Mapping]] = ...) -> None: ...

class RevokeClaimRequest(_message.Message):
    __slots__ = ("task_id", "reason", "request_id")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    reason: str
    request_id: str
    def __init__(self, task_id: _Optional[str] = ..., reason: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class AnswerQuestionRequest(_message.Message):
    __slots__ = ("task_id", "answer", "request_id")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    answer: str
    request_id: str
    def __init__(self, task_id: _Optional[str] = ..., answer: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ReviewTaskRequest(_message.Message):
    __slots__ = ("task_id", "approve", "feedback", "request_id")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    approve: bool
    feedback: str
    request_id: str
    def __init__(self, task_id: _Optional[str] = ..., approve: _Optional[bool] = ..., feedback: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class SetTaskCreationRequest(_message.Message):
    __slots__ = ("teammate", "policy", "request_id")
    TEAMMATE_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    teammate: str
    policy: TaskCreationPolicy
    request_id: str
    def __init__(self, teammate: _Optional[str] = ..., policy: _Optional[_Union[TaskCreationPolicy, str]] = ..., request_id: _Optional[str] = ...) -> None: ...

class SetTaskCreationResponse(_message.Message):
    __slots__ = ("policy",)
    POLICY_FIELD_NUMBER: _ClassVar[int]
    policy: TaskCreationPolicy
    def __init__(self, policy: _Optional[_Union[TaskCreationPolicy, str]] = ...) -> None: ...

class DecideProposalsRequest(_message.Message):
    __slots__ = ("task_ids", "approve", "feedback", "request_id")
    TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    task_ids: _containers.RepeatedScalarFieldContainer[str]
    approve: bool
    feedback: str
    request_id: str
    def __init__(self, task_ids: _Optional[_Iterable[str]] = ..., approve: _Optional[bool] = ..., feedback: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class DecideProposalsResponse(_message.Message):
    __slots__ = ("tasks", "omitted_count")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    OMITTED_COUNT_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    omitted_count: int
    def __init__(self, tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., omitted_count: _Optional[int] = ...) -> None: ...

class AddDependenciesRequest(_message.Message):
    __slots__ = ("task_id", "depends_on", "request_id")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    depends_on: _containers.RepeatedScalarFieldContainer[str]
    request_id: str
    def __init__(self, task_id: _Optional[str] = ..., depends_on: _Optional[_Iterable[str]] = ..., request_id: _Optional[str] = ...) -> None: ...

class AddDependenciesResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class ReviewTaskResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class AnswerQuestionResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class RevokeClaimResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class RequestShutdownRequest(_message.Message):
    __slots__ = ("name", "reason", "grace", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    GRACE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    reason: str
    grace: _duration_pb2.Duration
    request_id: str
    def __init__(self, name: _Optional[str] = ..., reason: _Optional[str] = ..., grace: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class RequestShutdownResponse(_message.Message):
    __slots__ = ("request_id", "deadline_time")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_TIME_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    deadline_time: _timestamp_pb2.Timestamp
    def __init__(self, request_id: _Optional[str] = ..., deadline_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DecidePlanRequest(_message.Message):
    __slots__ = ("plan_id", "approve", "feedback", "request_id")
    PLAN_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    plan_id: str
    approve: bool
    feedback: str
    request_id: str
    def __init__(self, plan_id: _Optional[str] = ..., approve: _Optional[bool] = ..., feedback: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class DecidePlanResponse(_message.Message):
    __slots__ = ("seq",)
    SEQ_FIELD_NUMBER: _ClassVar[int]
    seq: int
    def __init__(self, seq: _Optional[int] = ...) -> None: ...

class SetConcurrencyLimitRequest(_message.Message):
    __slots__ = ("key", "limit", "request_id")
    KEY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    key: str
    limit: int
    request_id: str
    def __init__(self, key: _Optional[str] = ..., limit: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class ConcurrencyLimit(_message.Message):
    __slots__ = ("key", "limit", "in_progress")
    KEY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    IN_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    key: str
    limit: int
    in_progress: int
    def __init__(self, key: _Optional[str] = ..., limit: _Optional[int] = ..., in_progress: _Optional[int] = ...) -> None: ...

class SetConcurrencyLimitResponse(_message.Message):
    __slots__ = ("limit",)
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: ConcurrencyLimit
    def __init__(self, limit: _Optional[_Union[ConcurrencyLimit, _Mapping]] = ...) -> None: ...

class ListConcurrencyLimitsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListConcurrencyLimitsResponse(_message.Message):
    __slots__ = ("limits",)
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    limits: _containers.RepeatedCompositeFieldContainer[ConcurrencyLimit]
    def __init__(self, limits: _Optional[_Iterable[_Union[ConcurrencyLimit, _Mapping]]] = ...) -> None: ...

class SetBudgetRequest(_message.Message):
    __slots__ = ("teammate", "max_cost_micros", "max_tokens", "request_id")
    TEAMMATE_FIELD_NUMBER: _ClassVar[int]
    MAX_COST_MICROS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    teammate: str
    max_cost_micros: int
    max_tokens: int
    request_id: str
    def __init__(self, teammate: _Optional[str] = ..., max_cost_micros: _Optional[int] = ..., max_tokens: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class SetBudgetResponse(_message.Message):
    __slots__ = ("budget",)
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    budget: Budget
    def __init__(self, budget: _Optional[_Union[Budget, _Mapping]] = ...) -> None: ...

class Viewer(_message.Message):
    __slots__ = ("name", "created_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CREATED_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    created_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., created_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class AddViewerRequest(_message.Message):
    __slots__ = ("name", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    request_id: str
    def __init__(self, name: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class AddViewerResponse(_message.Message):
    __slots__ = ("name", "token")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    token: str
    def __init__(self, name: _Optional[str] = ..., token: _Optional[str] = ...) -> None: ...

class RemoveViewerRequest(_message.Message):
    __slots__ = ("name", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    request_id: str
    def __init__(self, name: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class RemoveViewerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListViewersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListViewersResponse(_message.Message):
    __slots__ = ("viewers",)
    VIEWERS_FIELD_NUMBER: _ClassVar[int]
    viewers: _containers.RepeatedCompositeFieldContainer[Viewer]
    def __init__(self, viewers: _Optional[_Iterable[_Union[Viewer, _Mapping]]] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("after_seq",)
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    after_seq: int
    def __init__(self, after_seq: _Optional[int] = ...) -> None: ...

class TeammateChanged(_message.Message):
    __slots__ = ("teammate", "status", "reason")
    TEAMMATE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    teammate: Teammate
    status: TeammateStatus
    reason: TeammateChangeReason
    def __init__(self, teammate: _Optional[_Union[Teammate, _Mapping]] = ..., status: _Optional[_Union[TeammateStatus, str]] = ..., reason: _Optional[_Union[TeammateChangeReason, str]] = ...) -> None: ...

class PlanSubmitted(_message.Message):
    __slots__ = ("plan_id", "author", "plan")
    PLAN_ID_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    plan_id: str
    author: str
    plan: str
    def __init__(self, plan_id: _Optional[str] = ..., author: _Optional[str] = ..., plan: _Optional[str] = ...) -> None: ...

class PlanDecided(_message.Message):
    __slots__ = ("plan_id", "author", "approve", "feedback")
    PLAN_ID_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_FIELD_NUMBER: _ClassVar[int]
    plan_id: str
    author: str
    approve: bool
    feedback: str
    def __init__(self, plan_id: _Optional[str] = ..., author: _Optional[str] = ..., approve: _Optional[bool] = ..., feedback: _Optional[str] = ...) -> None: ...

class ShutdownAnswered(_message.Message):
    __slots__ = ("request_id", "teammate", "approve", "reason")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEAMMATE_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    teammate: str
    approve: bool
    reason: str
    def __init__(self, request_id: _Optional[str] = ..., teammate: _Optional[str] = ..., approve: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ("seq", "time", "task_changed", "teammate_changed", "message", "plan_submitted", "shutdown_answered", "budget_exhausted", "plan_decided", "question_asked", "question_answered", "review_decided", "tasks_proposed", "proposals_decided", "artifact_added")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    TASK_CHANGED_FIELD_NUMBER: _ClassVar[int]
    TEAMMATE_CHANGED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PLAN_SUBMITTED_FIELD_NUMBER: _ClassVar[int]
    SHUTDOWN_ANSWERED_FIELD_NUMBER: _ClassVar[int]
    BUDGET_EXHAUSTED_FIELD_NUMBER: _ClassVar[int]
    PLAN_DECIDED_FIELD_NUMBER: _ClassVar[int]
    QUESTION_ASKED_FIELD_NUMBER: _ClassVar[int]
    QUESTION_ANSWERED_FIELD_NUMBER: _ClassVar[int]
    REVIEW_DECIDED_FIELD_NUMBER: _ClassVar[int]
    TASKS_PROPOSED_FIELD_NUMBER: _ClassVar[int]
    PROPOSALS_DECIDED_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_ADDED_FIELD_NUMBER: _ClassVar[int]
    seq: int
    time: _timestamp_pb2.Timestamp
    task_changed: Task
    teammate_changed: TeammateChanged
    message: Message
    plan_submitted: PlanSubmitted
    shutdown_answered: ShutdownAnswered
    budget_exhausted: BudgetExhausted
    plan_decided: PlanDecided
    question_asked: QuestionAsked
    question_answered: QuestionAnswered
    review_decided: ReviewDecided
    tasks_proposed: TasksProposed
    proposals_decided: ProposalsDecided
    artifact_added: ArtifactAdded
    def __init__(self, seq: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., task_changed: _Optional[_Union[Task, _Mapping]] = ..., teammate_changed: _Optional[_Union[TeammateChanged, _Mapping]] = ..., message: _Optional[_Union[Message, _Mapping]] = ..., plan_submitted: _Optional[_Union[PlanSubmitted, _Mapping]] = ..., shutdown_answered: _Optional[_Union[ShutdownAnswered, _Mapping]] = ..., budget_exhausted: _Optional[_Union[BudgetExhausted, _Mapping]] = ..., plan_decided: _Optional[_Union[PlanDecided, _Mapping]] = ..., question_asked: _Optional[_Union[QuestionAsked, _Mapping]] = ..., question_answered: _Optional[_Union[QuestionAnswered, _Mapping]] = ..., review_decided: _Optional[_Union[ReviewDecided, _Mapping]] = ..., tasks_proposed: _Optional[_Union[TasksProposed, _Mapping]] = ..., proposals_decided: _Optional[_Union[ProposalsDecided, _Mapping]] = ..., artifact_added: _Optional[_Union[ArtifactAdded, _Mapping]] = ...) -> None: ...

class ArtifactAdded(_message.Message):
    __slots__ = ("task_id", "teammate", "artifact")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TEAMMATE_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    teammate: str
    artifact: Artifact
    def __init__(self, task_id: _Optional[str] = ..., teammate: _Optional[str] = ..., artifact: _Optional[_Union[Artifact, _Mapping]] = ...) -> None: ...

class TasksProposed(_message.Message):
    __slots__ = ("teammate", "task_ids", "discovered_from", "needs_decision", "split")
    TEAMMATE_FIELD_NUMBER: _ClassVar[int]
    TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    DISCOVERED_FROM_FIELD_NUMBER: _ClassVar[int]
    NEEDS_DECISION_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    teammate: str
    task_ids: _containers.RepeatedScalarFieldContainer[str]
    discovered_from: str
    needs_decision: bool
    split: bool
    def __init__(self, teammate: _Optional[str] = ..., task_ids: _Optional[_Iterable[str]] = ..., discovered_from: _Optional[str] = ..., needs_decision: _Optional[bool] = ..., split: _Optional[bool] = ...) -> None: ...

class ProposalsDecided(_message.Message):
    __slots__ = ("task_ids", "approve", "feedback")
    TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_FIELD_NUMBER: _ClassVar[int]
    task_ids: _containers.RepeatedScalarFieldContainer[str]
    approve: bool
    feedback: str
    def __init__(self, task_ids: _Optional[_Iterable[str]] = ..., approve: _Optional[bool] = ..., feedback: _Optional[str] = ...) -> None: ...

class ReviewDecided(_message.Message):
    __slots__ = ("task_id", "approve", "feedback", "reviewer", "round")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_FIELD_NUMBER: _ClassVar[int]
    REVIEWER_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    approve: bool
    feedback: str
    reviewer: str
    round: int
    def __init__(self, task_id: _Optional[str] = ..., approve: _Optional[bool] = ..., feedback: _Optional[str] = ..., reviewer: _Optional[str] = ..., round: _Optional[int] = ...) -> None: ...

class QuestionAsked(_message.Message):
    __slots__ = ("task_id", "question", "asked_by")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    ASKED_BY_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    question: str
    asked_by: str
    def __init__(self, task_id: _Optional[str] = ..., question: _Optional[str] = ..., asked_by: _Optional[str] = ...) -> None: ...

class QuestionAnswered(_message.Message):
    __slots__ = ("task_id", "question", "answer")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    question: str
    answer: str
    def __init__(self, task_id: _Optional[str] = ..., question: _Optional[str] = ..., answer: _Optional[str] = ...) -> None: ...

class IdleRequest(_message.Message):
    __slots__ = ("max_idle_polls", "poll_interval", "slots", "hold_slots_until_freed", "busy_claim_tokens")
    MAX_IDLE_POLLS_FIELD_NUMBER: _ClassVar[int]
    POLL_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    HOLD_SLOTS_UNTIL_FREED_FIELD_NUMBER: _ClassVar[int]
    BUSY_CLAIM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    max_idle_polls: int
    poll_interval: _duration_pb2.Duration
    slots: int
    hold_slots_until_freed: bool
    busy_claim_tokens: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, max_idle_polls: _Optional[int] = ..., poll_interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., slots: _Optional[int] = ..., hold_slots_until_freed: _Optional[bool] = ..., busy_claim_tokens: _Optional[_Iterable[str]] = ...) -> None: ...

class IdleResponse(_message.Message):
    __slots__ = ("message", "shutdown_request", "plan_decision", "claim", "idle_timeout", "budget_exhausted", "claim_ended", "proposals_decided")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SHUTDOWN_REQUEST_FIELD_NUMBER: _ClassVar[int]
    PLAN_DECISION_FIELD_NUMBER: _ClassVar[int]
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    BUDGET_EXHAUSTED_FIELD_NUMBER: _ClassVar[int]
    CLAIM_ENDED_FIELD_NUMBER: _ClassVar[int]
    PROPOSALS_DECIDED_FIELD_NUMBER: _ClassVar[int]
    message: Message
    shutdown_request: ShutdownRequest
    plan_decision: PlanDecision
    claim: Claim
    idle_timeout: IdleTimeout
    budget_exhausted: BudgetExhausted
    claim_ended: ClaimEnded
    proposals_decided: ProposalDecision
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ..., shutdown_request: _Optional[_Union[ShutdownRequest, _Mapping]] = ..., plan_decision: _Optional[_Union[PlanDecision, _Mapping]] = ..., claim: _Optional[_Union[Claim, _Mapping]] = ..., idle_timeout: _Optional[_Union[IdleTimeout, _Mapping]] = ..., budget_exhausted: _Optional[_Union[BudgetExhausted, _Mapping]] = ..., claim_ended: _Optional[_Union[ClaimEnded, _Mapping]] = ..., proposals_decided: _Optional[_Union[ProposalDecision, _Mapping]] = ...) -> None: ...

class ClaimEnded(_message.Message):
    __slots__ = ("task_id", "claim_token", "reason", "detail")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CLAIM_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    claim_token: str
    reason: ClaimEndReason
    detail: str
    def __init__(self, task_id: _Optional[str] = ..., claim_token: _Optional[str] = ..., reason: _Optional[_Union[ClaimEndReason, str]] = ..., detail: _Optional[str] = ...) -> None: ...

class AckMessagesRequest(_message.Message):
    __slots__ = ("through_seq",)
    THROUGH_SEQ_FIELD_NUMBER: _ClassVar[int]
    through_seq: int
    def __init__(self, through_seq: _Optional[int] = ...) -> None: ...

class AckMessagesResponse(_message.Message):
    __slots__ = ("acked_through_seq",)
    ACKED_THROUGH_SEQ_FIELD_NUMBER: _ClassVar[int]
    acked_through_seq: int
    def __init__(self, acked_through_seq: _Optional[int] = ...) -> None: ...

class RenewLeaseRequest(_message.Message):
    __slots__ = ("task_id", "claim_token", "progress", "progress_fraction", "usage")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CLAIM_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FRACTION_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    claim_token: str
    progress: str
    progress_fraction: float
    usage: Usage
    def __init__(self, task_id: _Optional[str] = ..., claim_token: _Optional[str] = ..., progress: _Optional[str] = ..., progress_fraction: _Optional[float] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ...) -> None: ...

class RenewLeaseResponse(_message.Message):
    __slots__ = ("lease_expire_time", "protocol_pending")
    LEASE_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_PENDING_FIELD_NUMBER: _ClassVar[int]
    lease_expire_time: _timestamp_pb2.Timestamp
    protocol_pending: bool
    def __init__(self, lease_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., protocol_pending: _Optional[bool] = ...) -> None: ...

class CompleteTaskRequest(_message.Message):
    __slots__ = ("task_id", "claim_token", "result", "usage", "verdict")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CLAIM_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    claim_token: str
    result: bytes
    usage: Usage
    verdict: ReviewVerdict
    def __init__(self, task_id: _Optional[str] = ..., claim_token: _Optional[str] = ..., result: _Optional[bytes] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., verdict: _Optional[_Union[ReviewVerdict, _Mapping]] = ...) -> None: ...

class CompleteTaskResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class FailTaskRequest(_message.Message):
    __slots__ = ("task_id", "claim_token", "error", "retryable", "usage")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CLAIM_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    claim_token: str
    error: str
    retryable: bool
    usage: Usage
    def __init__(self, task_id: _Optional[str] = ..., claim_token: _Optional[str] = ..., error: _Optional[str] = ..., retryable: _Optional[bool] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ...) -> None: ...

class FailTaskResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class ReleaseTaskRequest(_message.Message):
    __slots__ = ("task_id", "claim_token")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CLAIM_TOKEN_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    claim_token: str
    def __init__(self, task_id: _Optional[str] = ..., claim_token: _Optional[str] = ...) -> None: ...

class ReleaseTaskResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class AskQuestionRequest(_message.Message):
    __slots__ = ("task_id", "claim_token", "question")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CLAIM_TOKEN_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    claim_token: str
    question: str
    def __init__(self, task_id: _Optional[str] = ..., claim_token: _Optional[str] = ..., question: _Optional[str] = ...) -> None: ...

class AskQuestionResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class ProposeTasksRequest(_message.Message):
    __slots__ = ("tasks", "task_id", "claim_token", "block_claimed_task")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CLAIM_TOKEN_FIELD_NUMBER: _ClassVar[int]
    BLOCK_CLAIMED_TASK_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskSpec]
    task_id: str
    claim_token: str
    block_claimed_task: bool
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskSpec, _Mapping]]] = ..., task_id: _Optional[str] = ..., claim_token: _Optional[str] = ..., block_claimed_task: _Optional[bool] = ...) -> None: ...

class ProposeTasksResponse(_message.Message):
    __slots__ = ("tasks", "claimed_task")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    CLAIMED_TASK_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    claimed_task: Task
    def __init__(self, tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., claimed_task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class AppendOutputRequest(_message.Message):
    __slots__ = ("task_id", "claim_token", "data")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CLAIM_TOKEN_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    claim_token: str
    data: bytes
    def __init__(self, task_id: _Optional[str] = ..., claim_token: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class AppendOutputResponse(_message.Message):
    __slots__ = ("attempt", "size")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    size: int
    def __init__(self, attempt: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...

class PutArtifactRequest(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: ArtifactHeader
    data: bytes
    def __init__(self, header: _Optional[_Union[ArtifactHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class ArtifactHeader(_message.Message):
    __slots__ = ("task_id", "claim_token", "name", "media_type")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CLAIM_TOKEN_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    claim_token: str
    name: str
    media_type: str
    def __init__(self, task_id: _Optional[str] = ..., claim_token: _Optional[str] = ..., name: _Optional[str] = ..., media_type: _Optional[str] = ...) -> None: ...

class SubmitPlanRequest(_message.Message):
    __slots__ = ("plan",)
    PLAN_FIELD_NUMBER: _ClassVar[int]
    plan: str
    def __init__(self, plan: _Optional[str] = ...) -> None: ...

class SubmitPlanResponse(_message.Message):
    __slots__ = ("plan_id",)
    PLAN_ID_FIELD_NUMBER: _ClassVar[int]
    plan_id: str
    def __init__(self, plan_id: _Optional[str] = ...) -> None: ...

class RespondShutdownRequest(_message.Message):
    __slots__ = ("request_id", "approve", "reason")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    approve: bool
    reason: str
    def __init__(self, request_id: _Optional[str] = ..., approve: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class RespondShutdownResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class FreeSlotRequest(_message.Message):
    __slots__ = ("claim_token",)
    CLAIM_TOKEN_FIELD_NUMBER: _ClassVar[int]
    claim_token: str
    def __init__(self, claim_token: _Optional[str] = ...) -> None: ...

class FreeSlotResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TailOutputRequest(_message.Message):
    __slots__ = ("task_id", "attempt", "offset", "follow")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    attempt: int
    offset: int
    follow: bool
    def __init__(self, task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., offset: _Optional[int] = ..., follow: _Optional[bool] = ...) -> None: ...

class GetArtifactRequest(_message.Message):
    __slots__ = ("task_id", "name")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    name: str
    def __init__(self, task_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ArtifactChunk(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class OutputChunk(_message.Message):
    __slots__ = ("attempt", "offset", "data", "end")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    offset: int
    data: bytes
    end: bool
    def __init__(self, attempt: _Optional[int] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., end: _Optional[bool] = ...) -> None: ...

class GetTaskRequest(_message.Message):
    __slots__ = ("id", "task_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    task_id: str
    def __init__(self, id: _Optional[str] = ..., task_id: _Optional[str] = ...) -> None: ...

class GetTaskResponse(_message.Message):
    __slots__ = ("task", "attempts")
    TASK_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    task: Task
    attempts: _containers.RepeatedCompositeFieldContainer[TaskAttempt]
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ..., attempts: _Optional[_Iterable[_Union[TaskAttempt, _Mapping]]] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ("states", "owner", "page_size", "page_token")
    STATES_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[TaskState]
    owner: str
    page_size: int
    page_token: str
    def __init__(self, states: _Optional[_Iterable[_Union[TaskState, str]]] = ..., owner: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("tasks", "next_page_token")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    next_page_token: str
    def __init__(self, tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListTeammatesRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTeammatesResponse(_message.Message):
    __slots__ = ("teammates", "next_page_token")
    TEAMMATES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    teammates: _containers.RepeatedCompositeFieldContainer[Teammate]
    next_page_token: str
    def __init__(self, teammates: _Optional[_Iterable[_Union[Teammate, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class SendMessageRequest(_message.Message):
    __slots__ = ("to", "body", "request_id")
    TO_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    to: str
    body: str
    request_id: str
    def __init__(self, to: _Optional[str] = ..., body: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class SendMessageResponse(_message.Message):
    __slots__ = ("recipients",)
    RECIPIENTS_FIELD_NUMBER: _ClassVar[int]
    recipients: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, recipients: _Optional[_Iterable[str]] = ...) -> None: ...

class GetIdentityRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetIdentityResponse(_message.Message):
    __slots__ = ("identity", "role", "roles")
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    identity: str
    role: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, identity: _Optional[str] = ..., role: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ...) -> None: ...

class GetStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WriterStats(_message.Message):
    __slots__ = ("queue_depth", "queue_depth_p50", "queue_depth_p99", "commits", "mean_batch_size", "busy_retries", "jobs", "failed_commits", "refused_jobs", "commit_latency_p50_ms", "commit_latency_p99_ms", "job_time_p99_ms", "job_time_max_ms")
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_P50_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_P99_FIELD_NUMBER: _ClassVar[int]
    COMMITS_FIELD_NUMBER: _ClassVar[int]
    MEAN_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    BUSY_RETRIES_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    FAILED_COMMITS_FIELD_NUMBER: _ClassVar[int]
    REFUSED_JOBS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LATENCY_P50_MS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LATENCY_P99_MS_FIELD_NUMBER: _ClassVar[int]
    JOB_TIME_P99_MS_FIELD_NUMBER: _ClassVar[int]
    JOB_TIME_MAX_MS_FIELD_NUMBER: _ClassVar[int]
    queue_depth: int
    queue_depth_p50: float
    queue_depth_p99: float
    commits: int
    mean_batch_size: float
    busy_retries: int
    jobs: int
    failed_commits: int
    refused_jobs: int
    commit_latency_p50_ms: float
    commit_latency_p99_ms: float
    job_time_p99_ms: float
    job_time_max_ms: float
    def __init__(self, queue_depth: _Optional[int] = ..., queue_depth_p50: _Optional[float] = ..., queue_depth_p99: _Optional[float] = ..., commits: _Optional[int] = ..., mean_batch_size: _Optional[float] = ..., busy_retries: _Optional[int] = ..., jobs: _Optional[int] = ..., failed_commits: _Optional[int] = ..., refused_jobs: _Optional[int] = ..., commit_latency_p50_ms: _Optional[float] = ..., commit_latency_p99_ms: _Optional[float] = ..., job_time_p99_ms: _Optional[float] = ..., job_time_max_ms: _Optional[float] = ...) -> None: ...

class PostgresStats(_message.Message):
    __slots__ = ("listener_connected", "listener_reconnects", "daemons", "oldest_transaction_age", "task_dead_tuples", "task_live_tuples", "notifies_sent", "notifies_heard", "writers", "writers_in_transaction", "readers", "readers_in_use", "writable", "commit_outcomes_asked", "connections_cut")
    LISTENER_CONNECTED_FIELD_NUMBER: _ClassVar[int]
    LISTENER_RECONNECTS_FIELD_NUMBER: _ClassVar[int]
    DAEMONS_FIELD_NUMBER: _ClassVar[int]
    OLDEST_TRANSACTION_AGE_FIELD_NUMBER: _ClassVar[int]
    TASK_DEAD_TUPLES_FIELD_NUMBER: _ClassVar[int]
    TASK_LIVE_TUPLES_FIELD_NUMBER: _ClassVar[int]
    NOTIFIES_SENT_FIELD_NUMBER: _ClassVar[int]
    NOTIFIES_HEARD_FIELD_NUMBER: _ClassVar[int]
    WRITERS_FIELD_NUMBER: _ClassVar[int]
    WRITERS_IN_TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    READERS_FIELD_NUMBER: _ClassVar[int]
    READERS_IN_USE_FIELD_NUMBER: _ClassVar[int]
    WRITABLE_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OUTCOMES_ASKED_FIELD_NUMBER: _ClassVar[int]
    CONNECTIONS_CUT_FIELD_NUMBER: _ClassVar[int]
    listener_connected: bool
    listener_reconnects: int
    daemons: int
    oldest_transaction_age: _duration_pb2.Duration
    task_dead_tuples: int
    task_live_tuples: int
    notifies_sent: int
    notifies_heard: int
    writers: int
    writers_in_transaction: int
    readers: int
    readers_in_use: int
    writable: bool
    commit_outcomes_asked: int
    connections_cut: int
    def __init__(self, listener_connected: _Optional[bool] = ..., listener_reconnects: _Optional[int] = ..., daemons: _Optional[int] = ..., oldest_transaction_age: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., task_dead_tuples: _Optional[int] = ..., task_live_tuples: _Optional[int] = ..., notifies_sent: _Optional[int] = ..., notifies_heard: _Optional[int] = ..., writers: _Optional[int] = ..., writers_in_transaction: _Optional[int] = ..., readers: _Optional[int] = ..., readers_in_use: _Optional[int] = ..., writable: _Optional[bool] = ..., commit_outcomes_asked: _Optional[int] = ..., connections_cut: _Optional[int] = ...) -> None: ...

class GetStatsResponse(_message.Message):
    __slots__ = ("tasks_by_state", "teammates_by_status", "writer", "open_streams", "refused_calls", "loop_lag_p99_ms", "loop_lag_max_ms", "claims", "claims_handed_off", "usage", "store", "postgres", "held_resources", "held_resources_total")
    class TasksByStateEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class TeammatesByStatusEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TASKS_BY_STATE_FIELD_NUMBER: _ClassVar[int]
    TEAMMATES_BY_STATUS_FIELD_NUMBER: _ClassVar[int]
    WRITER_FIELD_NUMBER: _ClassVar[int]
    OPEN_STREAMS_FIELD_NUMBER: _ClassVar[int]
    REFUSED_CALLS_FIELD_NUMBER: _ClassVar[int]
    LOOP_LAG_P99_MS_FIELD_NUMBER: _ClassVar[int]
    LOOP_LAG_MAX_MS_FIELD_NUMBER: _ClassVar[int]
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    CLAIMS_HANDED_OFF_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    POSTGRES_FIELD_NUMBER: _ClassVar[int]
    HELD_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    HELD_RESOURCES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    tasks_by_state: _containers.ScalarMap[str, int]
    teammates_by_status: _containers.ScalarMap[str, int]
    writer: WriterStats
    open_streams: int
    refused_calls: int
    loop_lag_p99_ms: float
    loop_lag_max_ms: float
    claims: int
    claims_handed_off: int
    usage: Usage
    store: str
    postgres: PostgresStats
    held_resources: _containers.RepeatedCompositeFieldContainer[HeldResource]
    held_resources_total: int
    def __init__(self, tasks_by_state: _Optional[_Mapping[str, int]] = ..., teammates_by_status: _Optional[_Mapping[str, int]] = ..., writer: _Optional[_Union[WriterStats, _Mapping]] = ..., open_streams: _Optional[int] = ..., refused_calls: _Optional[int] = ..., loop_lag_p99_ms: _Optional[float] = ..., loop_lag_max_ms: _Optional[float] = ..., claims: _Optional[int] = ..., claims_handed_off: _Optional[int] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., store: _Optional[str] = ..., postgres: _Optional[_Union[PostgresStats, _Mapping]] = ..., held_resources: _Optional[_Iterable[_Union[HeldResource, _Mapping]]] = ..., held_resources_total: _Optional[int] = ...) -> None: ...
