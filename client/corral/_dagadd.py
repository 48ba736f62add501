"""Adding a DAG file to a board (`corral tasks add`): its new tasks are created, and a
task already on the board that the file gives more dependencies gains them.

The daemon's CreateTasks takes a task already on the board only with the very spec it
was created with (an identical one is left as it is; any other is ALREADY_EXISTS). A
file may also name an existing task with the same spec but more `depends_on`: such a
task is left out of the batch, and once the batch is created the edges it lacks are
added with AddDependencies, which refuses one that would close a cycle, naming it.
"""

from __future__ import annotations

import re
from collections.abc import Container, Sequence
from dataclasses import dataclass

import corral
from corral._dagfile import DagFile, explain_create_error

__all__ = ["AddRefused", "AddedDag", "add_dag"]

# CreateTasks names the first task on the board with another spec by this field.
_ID_FIELD = re.compile(r"tasks\[(\d+)\]\.id")


@dataclass(frozen=True)
class AddedDag:
    """What adding a file did: the tasks it sent (as created or found unchanged), the ids
    of those that were on the board already unchanged, and the tasks on the board that
    gained dependencies (as they are now) with the edges each gained."""

    created: list[corral.Task]
    unchanged: tuple[str, ...]
    deepened: list[tuple[corral.Task, tuple[str, ...]]]


class AddRefused(Exception):
    """The daemon refused the file's batch (`positions` maps the batch's `tasks[i]` to the
    file's), or, with `task_id`, the dependencies the file adds to that task on the board
    (after the batch was created)."""

    def __init__(self, error: corral.CorralError, positions: Sequence[int], task_id: str = "") -> None:
        super().__init__(str(error))
        self.error = error
        self.positions = tuple(positions)
        self.task_id = task_id

    def explain(self, dag: DagFile) -> str | None:
        """The refusal pointed at the task and field in the file; None when it names none."""
        if self.task_id:
            return (
                f"{dag.name}: task {self.task_id!r}: depends_on: {self.error.details}; "
                "the file's new tasks were added, this task's dependencies were not"
            )
        return explain_create_error(self.error, dag, self.positions)


def add_dag(lead: corral.Lead, dag: DagFile, *, request_id: str | None = None) -> AddedDag:
    """Create the file's tasks; give tasks already on the board the dependencies it adds.

    Raises AddRefused (wrapping the daemon's error) when the batch is refused, and the
    CorralError of AddDependencies when an added edge is (one that would close a cycle,
    say): the batch is created by then.
    """
    positions = list(range(len(dag.specs)))
    edges: dict[int, tuple[str, ...]] = {}  # file position -> the dependencies to add
    while True:
        specs = [dag.specs[position] for position in positions]
        # A request id names one batch: the batch without the tasks on the board gets its own.
        sent_id = f"{request_id}+dependencies" if request_id and edges else request_id
        try:
            created, unchanged = lead._create_batch(specs, request_id=sent_id) if specs else ([], ())
            break
        except corral.AlreadyExists as exc:
            position = _existing_position(exc, positions, edges)
            if position is None:
                raise AddRefused(exc, positions) from None
            edges[position] = _added_edges(lead, dag, position, exc, positions)
            positions.remove(position)
        except corral.CorralError as exc:
            raise AddRefused(exc, positions) from None
    deepened = []
    for position, added in sorted(edges.items()):
        if added:
            task_id = dag.specs[position].id
            try:
                deepened.append((lead.add_dependencies(task_id, added), added))
            except corral.CorralError as exc:
                raise AddRefused(exc, (), task_id) from None
    unchanged += tuple(dag.specs[position].id for position, added in sorted(edges.items()) if not added)
    return AddedDag(created, unchanged, deepened)


def _existing_position(exc: corral.AlreadyExists, positions: Sequence[int], edges: Container[int]) -> int | None:
    """The file position of the task the refusal names as on the board with another spec."""
    match = _ID_FIELD.fullmatch(exc.metadata.get("field", ""))
    if match is None:
        return None
    index = int(match.group(1))
    if not 0 <= index < len(positions) or positions[index] in edges:
        return None
    return positions[index]


def _added_edges(
    lead: corral.Lead, dag: DagFile, position: int, exc: corral.AlreadyExists, positions: Sequence[int]
) -> tuple[str, ...]:
    """The dependencies the file adds to the task at `position`, on the board already with
    the same spec but for those; AddRefused (the daemon's refusal) when it differs in more,
    or is past taking dependencies (IN_PROGRESS or finished)."""
    spec = dag.specs[position]
    on_board = lead.get_task(spec.id)
    if not _same_but_dependencies(spec, on_board):
        raise AddRefused(exc, positions)
    added = tuple(dep for dep in spec.depends_on if dep not in on_board.depends_on)
    if added and on_board.state not in (corral.TaskState.PENDING, corral.TaskState.PROPOSED):
        state = on_board.state.name.lower()
        raise AddRefused(
            corral.FailedPrecondition(
                f"tasks[{positions.index(position)}].depends_on: task {spec.id!r} is on the board and {state}: "
                f"only a pending or proposed task gains dependencies ({', '.join(added)}); nothing was added"
            ),
            positions,
        )
    return added


def _same_but_dependencies(spec: corral.TaskSpec, task: corral.Task) -> bool:
    """Whether the board's `task` was created from `spec` but for dependencies the spec
    adds. What the spec leaves to the daemon's defaults (None) matches any value."""
    if not set(task.depends_on) <= set(spec.depends_on) or not _same_review(spec.review, task.review):
        return False
    optional = (
        (spec.max_attempts, task.max_attempts),
        (spec.lease_duration, task.lease_duration),
        (spec.not_before, task.not_before_time),
        (spec.retry_backoff, task.retry_backoff),
        (spec.retry_backoff_max, task.retry_backoff_max),
        (spec.attempt_timeout, task.attempt_timeout),
    )
    asked = (spec.title, spec.description, spec.payload, spec.priority, spec.required_role, spec.concurrency_key)
    kept = (task.title, task.description, task.payload, task.priority, task.required_role, task.concurrency_key)
    leases = (spec.resources, spec.shared_resources) == (task.resources, task.shared_resources)
    return asked == kept and leases and all(wanted is None or wanted == stored for wanted, stored in optional)


def _same_review(wanted: corral.ReviewPolicy | None, stored: corral.ReviewPolicy | None) -> bool:
    """A review policy as created: max_rounds 0 asks for the daemon's default."""
    if wanted is None or stored is None:
        return wanted is stored
    return wanted.reviewer_role == stored.reviewer_role and wanted.max_rounds in (0, stored.max_rounds)
