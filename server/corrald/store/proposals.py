"""Discovered work: a teammate proposes tasks (PROPOSED, for the Lead to decide, or PENDING
where the Lead allows it), and may split the task it holds on them; the Lead sets each
teammate's policy and approves or rejects what waits."""

from __future__ import annotations

import json
from collections.abc import Sequence

from .. import errors
from ..model import ClaimOutcome, Proposed, TaskCreation, TaskState
from ..txn import Txn
from ..validate import PreparedBatch
from .dialect import sql, steps
from .events import emit
from .inbox import enqueue
from .tasks.cancel import REJECTED_PROPOSAL
from .tasks.create import Origin, changed_specs, create_batch
from .tasks.ends import cancel_seqs, end_claim, live_claim, slot_freed
from .tasks.graph import link, refuse_cycle
from .tasks.rows import records_by_seq, rows_by_id, task_by_seq, task_changed, task_events

# The PROPOSED tasks one teammate may have waiting for the Lead.
PROPOSALS_WAITING_MAX = 1000


def task_creation_of(tx: Txn, teammate: str) -> TaskCreation:
    """The teammate's policy: its own, else the "*" default."""
    row = tx.conn.execute(sql(tx.conn).graph.TASK_CREATION_OF, (teammate,)).fetchone()
    if row is None:
        raise errors.TeammateNotFound(f"no teammate {teammate!r}", name=teammate)
    return TaskCreation(row[0])


def set_task_creation(tx: Txn, teammate: str, policy: TaskCreation) -> TaskCreation:
    """Sets a teammate's policy, or with "*" the default of every teammate without its own."""
    statements = sql(tx.conn)
    if teammate == "*":
        tx.conn.execute(statements.graph.SET_DEFAULT_TASK_CREATION, (int(policy),))
    elif tx.conn.execute(statements.graph.SET_TASK_CREATION, (int(policy), teammate)).rowcount != 1:
        raise errors.TeammateNotFound(f"no teammate {teammate!r}", name=teammate)
    tx.wakes.note("task_creation", teammate=teammate, policy=policy.name)
    return policy


def propose(
    tx: Txn, teammate: str, batch: PreparedBatch, task_id: str = "", token: str = "", *, block: bool = False
) -> Proposed:
    """Adds a teammate's checked batch as its policy says, all or nothing. With `task_id`,
    the caller's live claim (`token`) of that task is where it was discovered; with `block`
    that task is split: it waits for the new tasks, and the claim ends (SPLIT, no attempt).

    Sent again after its answer was lost (the same tasks from the same source, on the
    board already), it answers as it did and writes nothing."""
    specs = batch.specs
    on_board = rows_by_id(tx.conn, [spec.id for spec in specs])
    if on_board:
        replay = _sent_before(tx, teammate, batch, task_id, block, on_board)
        if replay is not None:
            return replay
        index, taken = next((i, spec.id) for i, spec in enumerate(specs) if spec.id in on_board)
        raise errors.AlreadyExists(
            f"task {taken!r} is on the board already: a proposed task needs a new id", field=f"tasks[{index}].id"
        )
    policy = task_creation_of(tx, teammate)
    if policy is TaskCreation.DENY:
        raise errors.PermissionDenied(f"teammate {teammate!r} may not propose tasks (the lead's policy: deny)")
    source = None
    if task_id:
        try:
            source = live_claim(tx, teammate, task_id, token)
        except (errors.TaskNotFound, errors.ClaimError) as exc:  # named in the field that is wrong
            exc.metadata["field"] = "task_id" if isinstance(exc, errors.TaskNotFound) else "claim_token"
            raise
        if source.reviewing and block:
            raise errors.InvalidArgument(
                "block_claimed_task", f"task {task_id!r} is under your review: it cannot be split"
            )
        (ceiling,) = tx.conn.execute(sql(tx.conn).graph.TASK_PRIORITY, (source.seq,)).fetchone()
        for index, spec in enumerate(specs):
            if spec.priority > ceiling:
                raise errors.InvalidArgument(
                    f"tasks[{index}].priority",
                    f"{spec.priority} is above {ceiling}, the priority of {task_id!r} it was discovered from",
                )
    if policy is TaskCreation.PROPOSE:
        (waiting,) = tx.conn.execute(sql(tx.conn).graph.PROPOSALS_WAITING, (teammate,)).fetchone()
        if waiting + len(specs) > PROPOSALS_WAITING_MAX:
            raise errors.FailedPrecondition(
                f"{teammate!r} has {waiting} proposed tasks waiting for the lead: at most"
                f" {PROPOSALS_WAITING_MAX} may wait",
                field="tasks",
            )
    if block:
        assert source is not None
        steps(tx.conn).lock_graph(tx)
        inside = {spec.id for spec in specs}
        # The split makes the task wait for each proposed task: so, through it, for what it waits for.
        via = {dep: spec.id for spec in reversed(specs) for dep in spec.depends_on if dep not in inside}
        found = rows_by_id(tx.conn, sorted(via))
        refuse_cycle(tx.conn, source.seq, [row.seq for row in found.values()], "block_claimed_task", via)
    created = create_batch(tx, batch, origin=Origin(teammate, task_id, policy is TaskCreation.PROPOSE))
    seqs = [task.seq for task in created.tasks]
    emit(
        tx,
        "tasks_proposed",
        {
            "teammate": teammate,
            "task_ids": [spec.id for spec in specs],
            "discovered_from": task_id,
            "needs_decision": policy is TaskCreation.PROPOSE,
            "split": block,
        },
    )
    tx.wakes.note("proposed", teammate=teammate, tasks=len(specs), split=block)
    split_task = None
    if block:
        assert source is not None
        end_claim(tx, source.fence, ClaimOutcome.SPLIT, key=source.key)
        link(tx, source.seq, seqs)
        tx.conn.execute(sql(tx.conn).graph.SPLIT_TASK, (len(seqs), source.seq))
        task_changed(tx, source.seq)
        slot_freed(tx, teammate)
        split_task = task_by_seq(tx.conn, source.seq)
    return Proposed(records_by_seq(tx.conn, seqs), split_task)


def _sent_before(
    tx: Txn, teammate: str, batch: PreparedBatch, task_id: str, block: bool, on_board: dict
) -> Proposed | None:
    """The answer to this very proposal made before: every task on the board with the same
    spec, proposed by this teammate from the same task. None when it is not that."""
    specs = batch.specs
    if len(on_board) != len(specs) or changed_specs(tx.conn, batch, on_board):
        return None
    records = {record.id: record for record in records_by_seq(tx.conn, [on_board[spec.id].seq for spec in specs])}
    if any(record.proposed_by != teammate or record.discovered_from != task_id for record in records.values()):
        return None
    split_task = task_by_seq(tx.conn, rows_by_id(tx.conn, [task_id])[task_id].seq) if block else None
    return Proposed([records[spec.id] for spec in specs], split_task)


def decide(tx: Txn, task_ids: Sequence[str], approve: bool, feedback: str) -> list[int]:
    """The Lead approves PROPOSED tasks (PENDING: ready once their dependencies are) or
    rejects them (CANCELED with their dependents; a task split on one drops that
    dependency and is ready again once the rest are met). Refuses, deciding nothing, an
    id not on the board or not PROPOSED. Returns the seqs changed, the named ones first."""
    conn = tx.conn
    statements = sql(conn)
    wanted = list(dict.fromkeys(task_ids))
    rows = {task_id: rest for task_id, *rest in conn.execute(statements.graph.PROPOSALS_BY_ID, (json.dumps(wanted),))}
    for task_id in wanted:
        if task_id not in rows:
            raise errors.TaskNotFound(f"no task {task_id!r}", id=task_id)
        state = TaskState(rows[task_id][1])
        if state is not TaskState.PROPOSED:
            raise errors.FailedPrecondition(
                f"task {task_id!r} is {state.name}: only a PROPOSED task is approved or rejected", id=task_id
            )
    named = [rows[task_id][0] for task_id in wanted]
    conn.execute(statements.graph.DECIDED, (json.dumps(named),))
    if approve:
        changed = named
        for seq in named:
            role, unmet = conn.execute(statements.graph.APPROVE_PROPOSED, (seq,)).fetchone()
            if unmet == 0:
                tx.wakes.ready_roles[role] += 1
        task_events(tx, named)
    else:
        why = f"{REJECTED_PROPOSAL}: {feedback}" if feedback else REJECTED_PROPOSAL
        freed = _drop_split_edges(tx, named, why)
        canceled = cancel_seqs(tx, [(seq, why) for seq in named])
        changed = canceled + [seq for seq in freed if seq not in canceled]
    emit(tx, "proposals_decided", {"task_ids": wanted, "approve": approve, "feedback": feedback})
    by_proposer: dict[str, list[str]] = {}
    for task_id in wanted:
        by_proposer.setdefault(rows[task_id][2], []).append(task_id)
    for proposer, ids in sorted(by_proposer.items()):
        _tell(tx, proposer, ids, approve, feedback)
    tx.wakes.note("proposals_decided", tasks=len(wanted), approve=approve)
    return changed


def _drop_split_edges(tx: Txn, rejected: list[int], why: str) -> list[int]:
    """Before a rejection cancels `rejected` and their dependents: a task split on one of
    them (or on a dependent of one it proposed from the same claim) waits for it no more,
    and its split's history says why. Returns the split tasks freed, in seq order.

    Walked from the rejected tasks down their dependents, a level at a time, never across
    a split's edge: a task that waits for the rejection only through a split task freed on
    the way (s → p → f, f split on a rejected task) keeps its own split's edge (s → p)."""
    conn = tx.conn
    statements = sql(conn)
    freed: set[int] = set()
    seen, frontier = set(rejected), list(rejected)
    while frontier:
        edges = conn.execute(statements.graph.SPLIT_EDGES_AMONG, (json.dumps(frontier),)).fetchall()
        for split_seq, proposal_seq in edges:
            conn.execute(statements.graph.DROP_DEPENDENCY, (split_seq, proposal_seq))
            role, unmet = conn.execute(statements.graph.DEPENDENCY_DROPPED, (split_seq,)).fetchone()
            if unmet == 0:
                tx.wakes.ready_roles[role] += 1
            freed.add(split_seq)
        following = []  # the edges just dropped are gone: no dependent is reached across one
        for _, dependent in conn.execute(statements.graph.DEPENDENTS_OF, (json.dumps(frontier),)).fetchall():
            if dependent not in seen:
                seen.add(dependent)
                following.append(dependent)
        frontier = following
    for seq in sorted(freed):
        conn.execute(statements.graph.SPLIT_REJECTED, (f"split rejected: {why}", seq))
        task_changed(tx, seq)
    return sorted(freed)


def _tell(tx: Txn, proposer: str, task_ids: list[str], approve: bool, feedback: str) -> None:
    """The proposer's inbox notice, ahead of its next claim (a protocol item, as a plan
    decision is); none for a teammate removed since it proposed."""
    try:
        enqueue(tx, proposer, "proposals_decided", 0, ref="\n".join(task_ids), approve=approve, body=feedback)
    except errors.TeammateNotFound:
        pass
