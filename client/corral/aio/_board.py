"""The asyncio client base: a `grpc.aio` channel, a credential, and the
BoardService calls both the Lead and teammates may make."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Iterable
from typing import Any

import grpc
import grpc.aio

from corral import _convert
from corral._channel import DEFAULT_RPC_TIMEOUT, bearer_metadata
from corral._errors import error_from_rpc
from corral._types import Stats, Task, TaskState, TeammateInfo
from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc


class BoardClient:
    """Connection plumbing plus the board reads and messaging (asyncio)."""

    def __init__(self, channel: grpc.aio.Channel, address: str, token: str, *, rpc_timeout: float | None) -> None:
        self._channel = channel
        self._metadata = bearer_metadata(token)
        self._rpc_timeout = DEFAULT_RPC_TIMEOUT if rpc_timeout is None else rpc_timeout
        self._board = pb_grpc.BoardServiceStub(channel)
        self.address = address
        """The daemon's address, usable as a gRPC target."""
        self.token = token
        """This client's bearer credential."""

    # ------------------------------------------------------------ plumbing

    async def _unary(self, method: Callable[..., Any], request: Any, *, timeout: float | None = None) -> Any:
        try:
            return await method(request, metadata=self._metadata, timeout=timeout or self._rpc_timeout)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc) from exc

    async def _stream(
        self, method: Callable[..., Any], request: Any, *, timeout: float | None = None
    ) -> AsyncGenerator[Any, None]:
        """Iterate a server stream, mapping errors and cancelling it when abandoned."""
        call = method(request, metadata=self._metadata, timeout=timeout)
        try:
            while True:
                try:
                    response = await call.read()
                except grpc.RpcError as exc:
                    raise error_from_rpc(exc) from exc
                if response is grpc.aio.EOF:
                    return
                yield response
        finally:
            call.cancel()

    async def close(self) -> None:
        """Close the channel; calls in flight end with CANCELLED."""
        await self._channel.close()

    # ------------------------------------------------------------ board

    async def get_task(self, task_id: str) -> Task:
        """One task by id; raises NotFound."""
        response = await self._unary(self._board.GetTask, pb.GetTaskRequest(id=task_id))
        return _convert.task_from_pb(response.task)

    async def list_tasks(
        self, *, states: Iterable[TaskState] = (), owner: str = "", page_size: int | None = None
    ) -> AsyncGenerator[Task, None]:
        """Every task matching the filters, fetching pages lazily as you iterate."""
        states = tuple(states)
        page_token = ""
        while True:
            request = _convert.list_tasks_request(states, owner, page_size, page_token)
            response = await self._unary(self._board.ListTasks, request)
            for task in _convert.tasks_from_pb(response.tasks):
                yield task
            page_token = response.next_page_token
            if not page_token:
                return

    async def list_teammates(self) -> list[TeammateInfo]:
        """Every teammate the daemon knows, with status and held claims."""
        response = await self._unary(self._board.ListTeammates, pb.ListTeammatesRequest())
        return [_convert.teammate_from_pb(teammate) for teammate in response.teammates]

    async def send_message(self, to: str, body: str) -> list[str]:
        """Send `body` to "lead", a teammate's name, or "*"; returns the recipients."""
        response = await self._unary(self._board.SendMessage, pb.SendMessageRequest(to=to, body=body))
        return list(response.recipients)

    async def get_stats(self) -> Stats:
        """Counts by state and status, and the daemon writer's health."""
        return _convert.stats_from_pb(await self._unary(self._board.GetStats, pb.GetStatsRequest()))
