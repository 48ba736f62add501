"""LeadService and BoardService: thin conversions around the board."""

from __future__ import annotations

import base64

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

from .. import errors
from ..board import Board, Identity
from ..model import TaskState
from ..overload.lanes import CallLanes
from ..wake import WakeHub
from . import convert

FEED_PAGE = 256
PAGE_BYTES = 3 * 1024 * 1024  # under gRPC's default 4 MiB receive limit


class LeadServicer(pb_grpc.LeadServiceServicer):
    def __init__(self, board: Board, hub: WakeHub) -> None:
        self._board = board
        self._hub = hub

    async def CreateTasks(self, request: pb.CreateTasksRequest, context, identity: Identity) -> pb.CreateTasksResponse:
        specs = [convert.task_spec(spec) for spec in request.tasks]
        created = await self._board.create_tasks(specs, request.request_id)
        # A batch may carry 10,000 payloads; echoing them would make the reply
        # larger than the request and than a default client accepts.
        return pb.CreateTasksResponse(tasks=[convert.task_summary(t) for t in created])

    async def CancelTasks(self, request: pb.CancelTasksRequest, context, identity: Identity) -> pb.CancelTasksResponse:
        canceled = await self._board.cancel_tasks(list(request.ids))
        return pb.CancelTasksResponse(tasks=[convert.task_summary(t) for t in canceled])

    async def AddTeammate(self, request: pb.AddTeammateRequest, context, identity: Identity) -> pb.AddTeammateResponse:
        record, token = await self._board.add_teammate(request.name, list(request.roles), request.require_plan_approval)
        return pb.AddTeammateResponse(teammate=convert.teammate(record), token=token)

    async def RemoveTeammate(self, request: pb.RemoveTeammateRequest, context, identity: Identity) -> pb.RemoveTeammateResponse:
        record = await self._board.remove_teammate(request.name)
        return pb.RemoveTeammateResponse(teammate=convert.teammate(record))

    async def RequestShutdown(self, request: pb.RequestShutdownRequest, context, identity: Identity) -> pb.RequestShutdownResponse:
        grace = convert.duration_ms(request, "grace")
        request_id, deadline = await self._board.request_shutdown(request.name, request.reason, grace)
        return pb.RequestShutdownResponse(request_id=request_id, deadline_time=convert.timestamp(deadline))

    async def DecidePlan(self, request: pb.DecidePlanRequest, context, identity: Identity) -> pb.DecidePlanResponse:
        seq = await self._board.decide_plan(request.plan_id, request.approve, request.feedback)
        return pb.DecidePlanResponse(seq=seq)

    async def Watch(self, request: pb.WatchRequest, context, identity: Identity):
        if request.after_seq < 0:
            raise errors.InvalidArgument("after_seq", "must not be negative")
        after = request.after_seq
        # The shape of grpc's health Watch: send what moved, wait, repeat.
        while not self._hub.closing:
            moved = self._hub.board_moved()  # taken before reading, so no change slips between
            feed = await self._board.read_feed(after, FEED_PAGE)
            for event, task, mate in feed:
                yield convert.watch_response(event, task, mate)
                after = event.seq
            if len(feed) < FEED_PAGE:
                await self._hub.wait_or_close(moved)


class BoardServicer(pb_grpc.BoardServiceServicer):
    def __init__(self, board: Board, hub: WakeHub, lanes: CallLanes) -> None:
        self._board = board
        self._hub = hub
        self._lanes = lanes

    async def GetTask(self, request: pb.GetTaskRequest, context, identity: Identity) -> pb.GetTaskResponse:
        return pb.GetTaskResponse(task=convert.task(await self._board.get_task(request.id)))

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
        found = await self._board.list_tasks(states=states, owner=request.owner, after_seq=after, limit=page_size + 1)
        page, size = [], 0
        for record in found[:page_size]:
            message = convert.task(record)
            size += message.ByteSize()
            if page and size > PAGE_BYTES:
                break  # a page never outgrows what a default client accepts
            page.append(message)
        more = len(found) > len(page)
        token = _encode_page_token(page[-1].seq) if more else ""
        return pb.ListTasksResponse(tasks=page, next_page_token=token)

    async def ListTeammates(self, request, context, identity: Identity) -> pb.ListTeammatesResponse:
        mates = await self._board.list_teammates()
        return pb.ListTeammatesResponse(teammates=[convert.teammate(m) for m in mates])

    async def SendMessage(self, request: pb.SendMessageRequest, context, identity: Identity) -> pb.SendMessageResponse:
        recipients = await self._board.send_message(identity.name, request.to, request.body)
        return pb.SendMessageResponse(recipients=recipients)

    async def GetStats(self, request, context, identity: Identity) -> pb.GetStatsResponse:
        stats = await self._board.stats()
        writer = stats.writer
        return pb.GetStatsResponse(
            tasks_by_state={pb.TaskState.Name(int(s)): n for s, n in stats.tasks_by_state.items()},
            teammates_by_status={pb.TeammateStatus.Name(int(s)): n for s, n in stats.teammates_by_status.items()},
            writer=pb.WriterStats(
                queue_depth=writer.queue_depth, queue_depth_p50=writer.queue_depth_p50,
                queue_depth_p99=writer.queue_depth_p99, commits=writer.commits,
                mean_batch_size=writer.mean_batch_size, busy_retries=writer.busy_retries, jobs=writer.jobs,
                failed_commits=writer.failed_commits, refused_jobs=writer.refused_jobs,
                commit_latency_p50_ms=writer.commit_latency_p50_ms,
                commit_latency_p99_ms=writer.commit_latency_p99_ms,
            ),
            open_streams=self._hub.open_streams,
            refused_calls=self._lanes.refused,
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
