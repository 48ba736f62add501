"""The Lead client: owns the board, mints teammates, decides plans."""

from __future__ import annotations

import contextlib
import datetime
import os
import time
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import grpc.aio

from corral import _batches, _convert
from corral._channel import DEFAULT_CONNECT_TIMEOUT, async_reach, open_aio_channel, teammate_env
from corral._claimstate import check_feedback, check_verdict
from corral._errors import CorralError, TasksFailed, Unavailable
from corral._launch import DaemonProcess, launch_daemon
from corral._primitives import async_run_blocking, async_time_limit
from corral._progress import seconds, track_unfinished
from corral._types import (
    Budget,
    ConcurrencyLimit,
    DoneSummary,
    NewTeammate,
    Stats,
    Task,
    TaskChanged,
    TaskCreationPolicy,
    TaskSpec,
    TaskState,
    TeammateInfo,
    Verdict,
    ViewerInfo,
    WatchEvent,
)
from corral.aio._board import BoardClient
from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

__all__ = ["Lead"]

_FINAL_STATES = (TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED)


class Lead(BoardClient):
    """The Lead's connection to a corrald daemon.

    Make one with `await Lead.launch(...)` (starts a daemon, stops it on
    `await lead.close()` or when the `async with lead:` block ends) or
    `await Lead.connect(address, token)` (joins a running daemon; `close()`
    only closes the channel).

    Every write is sent with a request id and, while its outcome is unknown
    (the daemon unreachable or restarting, or its commit in doubt), sent
    again with the same id for up to 15 s: the daemon applies it once. Pass
    `request_id` to `create_tasks` to make a retry of your own (after a
    crash, say) safe too.
    """

    def __init__(
        self,
        channel: grpc.aio.Channel,
        address: str,
        token: str,
        *,
        daemon: DaemonProcess | None = None,
        rpc_timeout: float | None = None,
    ) -> None:
        super().__init__(channel, address, token, rpc_timeout=rpc_timeout)
        self._lead = pb_grpc.LeadServiceStub(channel)
        self._daemon = daemon

    @classmethod
    async def launch(
        cls,
        state_dir: str | os.PathLike[str] | None = None,
        *,
        listen: str | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        ready_timeout: float = 30.0,
        rpc_timeout: float | None = None,
        root_certificates: bytes | None = None,
        store: str | None = None,
        lead_token: str | None = None,
    ) -> Lead:
        """Start `corrald serve` on `state_dir` and connect to it as the Lead.

        `state_dir=None` uses a fresh temporary directory, removed when the
        daemon stops. `listen` is `unix:PATH` or `HOST:PORT` (default: a
        socket in the state directory). `store`, a `postgresql://` DSN, keeps
        the board in PostgreSQL, where more daemons may serve it: a daemon
        joining a board another one created has no lead token in its state
        directory, so pass the one the first daemon wrote as `lead_token`.
        Raises CorralError,
        with the daemon's stderr, when it fails to start within `ready_timeout`
        seconds. For a TLS listener (`extra_args=["--tls-cert", …, "--tls-key",
        …]`) pass the CA certificate(s) as `root_certificates`.
        """
        daemon = await async_run_blocking(
            launch_daemon,
            state_dir,
            listen=listen,
            extra_args=extra_args,
            env=env,
            ready_timeout=ready_timeout,
            store=store,
        )
        try:
            token, address = lead_token or daemon.read_lead_token(), daemon.address
            channel = open_aio_channel(address, root_certificates=root_certificates)
            return cls(channel, address, token, daemon=daemon, rpc_timeout=rpc_timeout)
        except BaseException:
            await async_run_blocking(daemon.stop)
            raise

    @classmethod
    async def connect(
        cls,
        address: str,
        token: str,
        *,
        root_certificates: bytes | None = None,
        rpc_timeout: float | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> Lead:
        """Join a running daemon at `address` with the Lead credential `token`.

        Pass the CA certificate(s) as `root_certificates` for a TLS listener.
        Waits for the connection: the first failure logs a warning naming the
        address, and Unavailable (naming it too) is raised once
        `connect_timeout` seconds have passed (0: do not wait; the first call
        finds out). A wrong token is found out by the first call.
        """
        channel = open_aio_channel(address, root_certificates=root_certificates)
        lead_token = token.strip()
        lead = cls(channel, address, lead_token, rpc_timeout=rpc_timeout)
        try:
            await async_reach(channel, address, lead_token, connect_timeout)
        except BaseException:
            await lead.close()
            raise
        return lead

    @property
    def state_dir(self) -> Path | None:
        """The launched daemon's state directory (None after `connect`)."""
        return self._daemon.state_dir if self._daemon else None

    @property
    def pid(self) -> int | None:
        """The launched daemon's process id (None after `connect`)."""
        return self._daemon.pid if self._daemon else None

    async def close(self) -> None:
        """Close the channel and, if this Lead launched the daemon, stop it."""
        await super().close()
        if self._daemon is not None:
            await async_run_blocking(self._daemon.stop)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------ tasks

    async def create_tasks(self, specs: Iterable[TaskSpec], *, request_id: str | None = None) -> list[Task]:
        """Add a batch of tasks atomically (all or nothing).

        A retry with the same `request_id` returns the same tasks instead of
        failing; raises InvalidArgument (cycles, unknown deps, bad values) or
        AlreadyExists (an id taken by a different spec; the trace context is
        not part of a spec, so a retry from another span is the same batch).
        The returned tasks are the specs sent, with where each stands on the
        board (seq, state, times, the defaults applied); owner, attempt, result,
        error and the trace context it was created under of a task that was
        there already come from `get_task`.

        A batch bigger than one request may carry (6 MiB: a few specs with
        megabyte payloads) is sent in parts, each task after the ones it
        depends on, and each part is all or nothing: should a part be refused,
        the parts before it stay created, and the error says so. Sending the
        same batch again (with the same `request_id`, if any) is safe and
        creates the rest. Such a batch with repeated ids or a dependency cycle
        is refused before anything is sent.
        """
        created, _ = await self._create_batch(specs, request_id=request_id)
        return created

    async def _create_batch(
        self, specs: Iterable[TaskSpec], *, request_id: str | None
    ) -> tuple[list[Task], tuple[str, ...]]:
        """`create_tasks`, also returning the ids that were on the board already
        with the same spec (for the CLI's report of what a file added)."""
        request = _convert.create_tasks_request(specs, request_id)
        created: list[Task | None] = [None] * len(request.tasks)
        unchanged: list[str] = []
        parts = _batches.parts(request)  # one, unless the batch is too big for one request
        sent: list[_batches.Part] = []
        for part in parts:
            try:
                response = await self._write(self._lead.CreateTasks, part.request)
            except CorralError as exc:
                if len(parts) == 1:
                    raise
                raise _batches.part_refused(exc, part, sent) from None
            tasks = _convert.created_tasks_from_pb(part.request, response)
            for position, task in zip(part.positions, tasks, strict=True):
                created[position] = task
            unchanged += response.unchanged_task_ids
            sent.append(part)
        return [task for task in created if task is not None], tuple(unchanged)

    async def cancel_tasks(self, ids: Iterable[str]) -> list[Task]:
        """Cancel tasks and, transitively, their dependents; returns the tasks
        canceled, the named ones first, each with its id, seq, state, error (why)
        and finish time. A reply holds at most 3 MiB of them (tens of thousands
        with short ids); `list_tasks(states=[TaskState.CANCELED])` lists them all."""
        request = pb.CancelTasksRequest(ids=list(ids))
        response = await self._write(self._lead.CancelTasks, request)
        return _convert.tasks_from_pb(response.tasks)

    async def retry_tasks(self, ids: Iterable[str], *, reset_attempts: bool = False) -> list[Task]:
        """Send FAILED or CANCELED tasks back to PENDING, with the dependents that
        were canceled because of them (each once nothing else it needs has failed or
        been canceled); returns them, the named ones first (at most 3 MiB of them).
        A teammate's proposal canceled before you decided it comes back PROPOSED,
        still waiting for `decide_proposals`.
        With `reset_attempts` their attempt counts start again from zero; otherwise
        each has one attempt more. A name not on the board raises NotFound; one not
        FAILED or CANCELED, or one with a FAILED or CANCELED dependency that this call
        does not bring back (name that dependency too), raises FailedPrecondition;
        and nothing changes."""
        request = pb.RetryTasksRequest(ids=list(ids), reset_attempts=reset_attempts)
        response = await self._write(self._lead.RetryTasks, request)
        return _convert.tasks_from_pb(response.tasks)

    async def revoke_claim(self, task_id: str, reason: str = "") -> Task:
        """Take the task's live claim from its holder: the task is PENDING again (no
        attempt used up), the holder's open stream hears `ClaimEnded` REVOKED at once, and
        its token is dead (ClaimRevoked). Raises FailedPrecondition when no claim is live,
        NotFound for an unknown task."""
        request = pb.RevokeClaimRequest(task_id=task_id, reason=reason)
        response = await self._write(self._lead.RevokeClaim, request)
        return _convert.task_from_pb(response.task)

    async def answer_question(self, task_id: str, answer: str) -> Task:
        """Answer the question a holder asked about `task_id` (`Claim.ask`; the task is
        NEEDS_INPUT, `task.question` says what it asks): the task is PENDING again, and
        its next claim carries every question and answer so far (`Claim.answers`).
        `answer` may be empty, and is at most 64 KiB of UTF-8. Returns the task as the
        answer left it. Raises FailedPrecondition when the task is not NEEDS_INPUT,
        NotFound for an unknown task; `list_tasks(states=[TaskState.NEEDS_INPUT])`
        lists the questions waiting."""
        request = pb.AnswerQuestionRequest(task_id=task_id, answer=answer)
        response = await self._write(self._lead.AnswerQuestion, request)
        return _convert.task_from_pb(response.task)

    async def review_task(self, task_id: str, verdict: Verdict) -> Task:
        """Decide the review of `task_id` (IN_REVIEW: its result, `task.result`, waits
        for a verdict) as a reviewer would: `Approve()` completes it with that result,
        `Reject(feedback)` sends it back for rework (the next claim carries the
        feedback and the rejected result), or fails it at its policy's max_rounds. A
        review a teammate holds ends under it (ClaimEnded REVOKED). Returns the task
        as the verdict left it. Raises InvalidArgument, before any call, for a
        Reject with no feedback or feedback over 64 KiB; FailedPrecondition when the
        task is not IN_REVIEW, NotFound for an unknown task;
        `list_tasks(states=[TaskState.IN_REVIEW])` lists the reviews waiting."""
        check_verdict(verdict, "feedback")
        request = pb.ReviewTaskRequest(task_id=task_id, approve=verdict.approve, feedback=verdict.feedback)
        response = await self._write(self._lead.ReviewTask, request)
        return _convert.task_from_pb(response.task)

    # ------------------------------------------------------------ discovered work

    async def decide_proposals(self, task_ids: Iterable[str], approve: bool, feedback: str = "") -> list[Task]:
        """Decide tasks teammates proposed (PROPOSED; 1 to 1,000 ids): approved, they
        are PENDING and claimed like any task once ready; rejected, they are CANCELED
        with error "proposal rejected: <feedback>", their dependents with them (as a cancel),
        and a task split on one drops that dependency and is ready again (its next
        claim's `previous_attempt.error` says the split was rejected and why). Each
        proposer's stream gets a `ProposalsDecided`. Returns the tasks decided, the
        named ones first, then those canceled or freed with them (at most 3 MiB).

        Raises InvalidArgument, before any call, for feedback over 64 KiB of UTF-8;
        NotFound for an unknown id, FailedPrecondition for a task not PROPOSED, and
        nothing is decided; `list_tasks(states=[TaskState.PROPOSED])` lists them.
        """
        check_feedback(feedback, "feedback")
        request = pb.DecideProposalsRequest(task_ids=list(task_ids), approve=approve, feedback=feedback)
        response = await self._write(self._lead.DecideProposals, request)
        return _convert.tasks_from_pb(response.tasks)

    async def add_dependencies(self, task_id: str, depends_on: Iterable[str]) -> Task:
        """Make `task_id` (PENDING or PROPOSED) wait for `depends_on` too (1 to 1,000
        ids; those it depends on already are left alone), as for the dependencies it
        was created with. Returns the task with its dependencies as they are now.

        Raises InvalidArgument for an edge that would close a cycle (the message names
        it: "dependency cycle: a → c → b → a") or a FAILED or CANCELED dependency;
        FailedPrecondition for a task IN_PROGRESS or finished; NotFound for an unknown id.
        """
        request = pb.AddDependenciesRequest(task_id=task_id, depends_on=list(depends_on))
        response = await self._write(self._lead.AddDependencies, request)
        return _convert.task_from_pb(response.task)

    async def set_task_creation(self, teammate: str, policy: TaskCreationPolicy) -> TaskCreationPolicy:
        """Set how `teammate`'s proposed tasks land, or with "*" the default of every
        teammate without a policy of its own: `TaskCreationPolicy.PROPOSE` (the
        default: PROPOSED, waiting for `decide_proposals`), `ALLOW` (PENDING at once)
        or `DENY` (ProposeTasks raises PermissionDenied). `list_teammates` shows each
        teammate's (`task_creation`). Returns the policy set; raises NotFound for an
        unknown teammate."""
        request = pb.SetTaskCreationRequest(teammate=teammate, policy=_convert.task_creation_to_pb(policy))
        response: pb.SetTaskCreationResponse = await self._write(self._lead.SetTaskCreation, request)
        return _convert.task_creation_from_pb(response.policy)

    # ------------------------------------------------------------ teammates

    async def add_teammate(
        self,
        name: str,
        *,
        roles: Iterable[str] = (),
        require_plan_approval: bool = False,
    ) -> NewTeammate:
        """Mint a teammate credential. Its token is shown only in the result."""
        request = pb.AddTeammateRequest(name=name, roles=list(roles), require_plan_approval=require_plan_approval)
        response = await self._write(self._lead.AddTeammate, request)
        return _convert.new_teammate_from_pb(response)

    async def remove_teammate(self, name: str) -> TeammateInfo:
        """Revoke a teammate: its streams end and its claims return to PENDING."""
        request = pb.RemoveTeammateRequest(name=name)
        response = await self._write(self._lead.RemoveTeammate, request)
        return _convert.teammate_from_pb(response.teammate)

    async def add_viewer(self, name: str) -> str:
        """Mint a read-only viewer credential (the web board and the board's reads);
        returns its token, shown only this once."""
        response: pb.AddViewerResponse = await self._write(self._lead.AddViewer, pb.AddViewerRequest(name=name))
        return response.token

    async def remove_viewer(self, name: str) -> None:
        """Revoke a viewer: its web sessions and open event streams end."""
        await self._write(self._lead.RemoveViewer, pb.RemoveViewerRequest(name=name))

    async def list_viewers(self) -> list[ViewerInfo]:
        """Every viewer, in the order they were added."""
        response: pb.ListViewersResponse = await self._unary(self._lead.ListViewers, pb.ListViewersRequest())
        return [ViewerInfo(v.name, _convert.time_from_pb(v, "created_time")) for v in response.viewers]

    async def request_shutdown(
        self,
        name: str,
        *,
        reason: str = "",
        grace: datetime.timedelta | float | None = None,
    ) -> str:
        """Ask a teammate to stop; returns the request id.

        If it has not answered within `grace` (default: the daemon's, 5 min)
        the daemon removes it.
        """
        request = _convert.request_shutdown_request(name, reason, grace)
        response: pb.RequestShutdownResponse = await self._write(self._lead.RequestShutdown, request)
        return response.request_id

    async def decide_plan(
        self,
        plan_id: str,
        *,
        approve: bool,
        feedback: str = "",
    ) -> None:
        """Approve or reject a submitted plan; the author receives a plan_decision."""
        request = pb.DecidePlanRequest(plan_id=plan_id, approve=approve, feedback=feedback)
        await self._write(self._lead.DecidePlan, request)

    async def set_concurrency_limit(self, key: str, limit: int) -> ConcurrencyLimit:
        """At most `limit` tasks with this `concurrency_key` IN_PROGRESS at once
        (1 to 10,000); 0 removes the key's limit. Returns the limit as stored."""
        request = pb.SetConcurrencyLimitRequest(key=key, limit=limit)
        response: pb.SetConcurrencyLimitResponse = await self._write(self._lead.SetConcurrencyLimit, request)
        return _convert.concurrency_limit_from_pb(response.limit)

    async def list_concurrency_limits(self) -> list[ConcurrencyLimit]:
        """Every key with a limit, by key, with how many of its tasks are IN_PROGRESS."""
        response: pb.ListConcurrencyLimitsResponse = await self._unary(
            self._lead.ListConcurrencyLimits, pb.ListConcurrencyLimitsRequest()
        )
        return [_convert.concurrency_limit_from_pb(limit) for limit in response.limits]

    async def set_budget(self, teammate: str, *, max_cost_micros: int = 0, max_tokens: int = 0) -> Budget:
        """Set `teammate`'s budget, or with "*" the default of every teammate without
        its own; 0 is no limit on that measure. A teammate whose spending reached
        its budget gets no new claim until it is raised (held claims stay).
        Returns the budget set."""
        request = pb.SetBudgetRequest(
            teammate=teammate,
            max_cost_micros=_convert.int64("max_cost_micros", max_cost_micros),
            max_tokens=_convert.int64("max_tokens", max_tokens),
        )
        response: pb.SetBudgetResponse = await self._write(self._lead.SetBudget, request)
        return _convert.budget_from_pb(response.budget)

    def teammate_env(self, new_teammate: NewTeammate, *, address: str | None = None) -> dict[str, str]:
        """CORRAL_ADDRESS and CORRAL_TOKEN for a teammate process's environment.

        `address` defaults to the one this Lead is connected to (pass it
        explicitly when teammates reach the daemon by another route).
        """
        return teammate_env(address or self.address, new_teammate.token)

    # ------------------------------------------------------------ events

    async def watch(
        self, after_seq: int = 0, *, timeout: datetime.timedelta | float | None = None
    ) -> AsyncGenerator[WatchEvent, None]:
        """Board events with a sequence number above `after_seq`, then live ones.

        Runs until you stop iterating (close the iterator, e.g. with
        `contextlib.aclosing`, to cancel the stream at once), the daemon ends
        it, or `timeout` passes (TimeoutError). Resume after a break with the
        last event's `seq`.
        """
        limit = seconds(timeout) if timeout is not None else None
        request = pb.WatchRequest(after_seq=after_seq)
        stream = self._stream(self._lead.Watch, request, timeout=limit)
        async with contextlib.aclosing(stream) as responses:
            try:
                async for response in responses:
                    event = _convert.watch_event_from_pb(response)
                    if event is not None:
                        yield event
            except CorralError as exc:
                if exc.code is grpc.StatusCode.DEADLINE_EXCEEDED:
                    message = f"watch ran past its {limit:g}s timeout"
                    raise TimeoutError(message) from None
                raise

    async def wait_until_done(
        self, timeout: datetime.timedelta | float, *, raise_on_failure: bool = False
    ) -> DoneSummary:
        """Wait until no task is PENDING, IN_PROGRESS, NEEDS_INPUT, IN_REVIEW or PROPOSED; returns what became of them.

        Follows the Watch feed and confirms with GetStats, so it reacts as
        soon as the last task finishes. The summary names the tasks that
        completed, failed and were canceled. A task waiting for an answer
        (NEEDS_INPUT) is unfinished, and so is a result waiting for its review
        (IN_REVIEW), and so is a proposed task (PROPOSED): answer it
        (`answer_question`) or decide it (`review_task`, `decide_proposals`) from
        another task or thread, or the wait times out. Raises TimeoutError, saying how
        much is unfinished, after `timeout`; with `raise_on_failure`, raises
        TasksFailed (carrying the summary) when any task failed.
        """
        limit = seconds(timeout)
        try:
            stats = await self._wait_for_no_active_tasks(limit)
        except TimeoutError:
            stats = await self.get_stats()
            raise TimeoutError(
                f"wait_until_done: {stats.active_tasks} task(s) unfinished after "
                f"{limit:g}s ({stats.count(TaskState.PENDING)} pending, "
                f"{stats.count(TaskState.IN_PROGRESS)} in progress, "
                f"{stats.count(TaskState.NEEDS_INPUT)} waiting for an answer, "
                f"{stats.count(TaskState.IN_REVIEW)} in review, "
                f"{stats.count(TaskState.PROPOSED)} proposed)"
            ) from None
        summary = await self._done_summary(stats)
        if raise_on_failure and summary.failed:
            raise TasksFailed(summary)
        return summary

    async def _wait_for_no_active_tasks(self, limit: float) -> Stats:
        deadline = time.monotonic() + limit
        async with async_time_limit(limit):
            stats = await self.get_stats()
            if stats.active_tasks == 0:
                return stats
            unfinished: dict[str, TaskState] = {}
            left = max(deadline - time.monotonic(), 0.001)
            async with contextlib.aclosing(self.watch(0, timeout=left)) as events:
                async for event in events:
                    if not isinstance(event, TaskChanged):
                        continue
                    if track_unfinished(unfinished, event.task):
                        stats = await self.get_stats()
                        if stats.active_tasks == 0:
                            return stats
        raise Unavailable("the daemon ended the watch stream before every task finished")

    async def _done_summary(self, stats: Stats) -> DoneSummary:
        ids: dict[TaskState, list[str]] = {state: [] for state in _FINAL_STATES}
        async for task in self.list_tasks(states=_FINAL_STATES):
            ids[task.state].append(task.id)
        return DoneSummary(
            completed_ids=tuple(ids[TaskState.COMPLETED]),
            failed_ids=tuple(ids[TaskState.FAILED]),
            canceled_ids=tuple(ids[TaskState.CANCELED]),
            stats=stats,
        )
