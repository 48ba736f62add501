"""BoardService (both roles): reads of the board, messages, stats."""

from __future__ import annotations

import base64

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

from .. import errors
from ..board import Board
from ..credentials import VIEWER_PREFIX, Identity
from ..looplag import LoopLag
from ..model import TaskState
from ..overload.lanes import CallLanes
from ..wake import WakeHub
from . import artifacts, convert, once, output


class BoardServicer(pb_grpc.BoardServiceServicer):
    def __init__(self, board: Board, hub: WakeHub, lanes: CallLanes, loop_lag: LoopLag) -> None:
        self._board = board
        self._hub = hub
        self._lanes = lanes
        self._loop_lag = loop_lag

    async def GetTask(self, request: pb.GetTaskRequest, context, identity: Identity) -> pb.GetTaskResponse:
        record, attempts, waiting = await self._board.task_history(_task_id(request))
        found = convert.task(record, waiting)
        return pb.GetTaskResponse(task=found, attempts=convert.recent_attempts(attempts, found.ByteSize()))

    async def ListTasks(self, request: pb.ListTasksRequest, context, identity: Identity) -> pb.ListTasksResponse:
        limits = self._board.limits
        if request.page_size < 0 or request.page_size > limits.page_size_max:
            raise errors.InvalidArgument("page_size", f"must be within [0, {limits.page_size_max}]")
        page_size = request.page_size or limits.page_size_default
        states = []
        for index, state in enumerate(request.states):
            if state not in TaskState._value2member_map_:
                raise errors.InvalidArgument(f"states[{index}]", f"unknown task state {state}")
            states.append(TaskState(state))
        after = _decode_page_token(request.page_token)
        page = await self._board.list_tasks(
            states=states, owner=request.owner, after_seq=after, limit=page_size, max_bytes=convert.REPLY_BYTES
        )
        token = _encode_page_token(page.tasks[-1].seq) if page.more else ""
        listed = [convert.task(record, page.waiting.get(record.seq)) for record in page.tasks]
        return pb.ListTasksResponse(tasks=listed, next_page_token=token)

    async def ListTeammates(
        self, request: pb.ListTeammatesRequest, context, identity: Identity
    ) -> pb.ListTeammatesResponse:
        limits = self._board.limits
        if request.page_size < 0 or request.page_size > limits.page_size_max:
            raise errors.InvalidArgument("page_size", f"must be within [0, {limits.page_size_max}]")
        after = _decode_page_token(request.page_token)
        # Unset means the most a page holds, so a client that never pages sees
        # the whole of any team of up to 1,000.
        limit = request.page_size or limits.page_size_max
        found = await self._board.list_teammates(after, limit + 1)
        kept = convert.fitting(convert.teammate(record) for _, record in found[:limit])
        more = len(found) > len(kept)
        token = _encode_page_token(found[len(kept) - 1][0]) if more else ""
        return pb.ListTeammatesResponse(teammates=kept, next_page_token=token)

    def TailOutput(self, request: pb.TailOutputRequest, context, identity: Identity):
        return output.tail(self._board, self._hub, request, identity)

    def GetArtifact(self, request: pb.GetArtifactRequest, context, identity: Identity):
        return artifacts.get(self._board, request, identity)

    async def SendMessage(self, request: pb.SendMessageRequest, context, identity: Identity) -> pb.SendMessageResponse:
        return await once.answer(
            identity,
            request,
            self._board.limits.name_max_chars,
            lambda key: self._board.send_message(identity.name, request.to, request.body, key),
            lambda recipients: pb.SendMessageResponse(recipients=recipients),
        )

    async def GetIdentity(self, request, context, identity: Identity) -> pb.GetIdentityResponse:
        # The interceptor has checked the credential: a revoked one never gets here.
        if identity.is_lead or identity.is_viewer:
            # A viewer is named as the Lead named it (ListViewers); its role tells it from a teammate.
            name = identity.name.removeprefix(VIEWER_PREFIX) if identity.is_viewer else identity.name
            return pb.GetIdentityResponse(identity=name, role=identity.role)
        roles = await self._board.teammate_roles(identity.name)
        return pb.GetIdentityResponse(identity=identity.name, role=identity.role, roles=roles)

    async def GetStats(self, request, context, identity: Identity) -> pb.GetStatsResponse:
        stats = await self._board.stats()
        writer = stats.writer
        return pb.GetStatsResponse(
            tasks_by_state={pb.TaskState.Name(int(s)): n for s, n in stats.tasks_by_state.items()},
            teammates_by_status={pb.TeammateStatus.Name(int(s)): n for s, n in stats.teammates_by_status.items()},
            writer=pb.WriterStats(
                queue_depth=writer.queue_depth,
                queue_depth_p50=writer.queue_depth_p50,
                queue_depth_p99=writer.queue_depth_p99,
                commits=writer.commits,
                mean_batch_size=writer.mean_batch_size,
                busy_retries=writer.busy_retries,
                jobs=writer.jobs,
                failed_commits=writer.failed_commits,
                refused_jobs=writer.refused_jobs,
                commit_latency_p50_ms=writer.commit_latency_p50_ms,
                commit_latency_p99_ms=writer.commit_latency_p99_ms,
                job_time_p99_ms=writer.job_time_p99_ms,
                job_time_max_ms=writer.job_time_max_ms,
            ),
            open_streams=self._hub.open_streams,
            refused_calls=self._lanes.refused,
            usage=convert.usage(stats.usage),
            loop_lag_p99_ms=self._loop_lag.p99_ms(),
            loop_lag_max_ms=self._loop_lag.max_ms(),
            claims=self._hub.claims,
            claims_handed_off=self._hub.claims_handed_off,
            store=stats.store,
            postgres=convert.postgres_health(stats.postgres),
            held_resources=[convert.held_resource(held) for held in stats.held_resources],
            held_resources_total=stats.held_resources_total,
        )


def _encode_page_token(seq: int) -> str:
    return base64.urlsafe_b64encode(f"after:{seq}".encode()).decode()


def _decode_page_token(token: str) -> int:
    if not token:
        return 0
    try:
        kind, _, seq = base64.urlsafe_b64decode(token.encode()).decode().partition(":")
        if kind == "after" and seq.isascii() and seq.isdigit() and len(seq) <= 18:
            return int(seq)
    except ValueError:
        pass
    raise errors.InvalidArgument("page_token", "not a page token this server issued")


def _task_id(request: pb.GetTaskRequest) -> str:
    """`task_id`, or the older `id`; both set means both must agree."""
    if request.task_id and request.id and request.task_id != request.id:
        raise errors.InvalidArgument("id", "id and task_id name different tasks; send task_id alone")
    return request.task_id or request.id
