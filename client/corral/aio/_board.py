"""The client base: a channel, a credential, and the BoardService calls that
both the Lead and teammates may make."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import AsyncGenerator, Callable, Iterable
from pathlib import Path
from typing import Any, overload

import grpc.aio

from corral import _convert
from corral._artifacts import TRANSFER_TIMEOUT_S, Download
from corral._channel import DEFAULT_RPC_TIMEOUT, bearer_metadata
from corral._errors import Unavailable, error_from_rpc
from corral._primitives import async_next_message
from corral._retry import async_retrying, async_write_retrying
from corral._types import Identity, OutputChunk, Stats, Task, TaskState, TeammateInfo
from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

# How long a write is sent again, with its request id, while the daemon cannot say whether
# it was applied: unreachable or restarting, draining, or its commit in doubt.
# The board applies a request id once, so every retry is safe.
WRITE_RETRY_S = 15.0
# How long `tail_output` keeps reconnecting through one outage (a daemon restarting, say).
TAIL_RECONNECT_S = 60.0


class BoardClient:
    """Connection plumbing plus the board reads and messaging."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        address: str,
        token: str,
        *,
        rpc_timeout: float | None,
    ) -> None:
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
        timeout = timeout or self._rpc_timeout
        try:
            return await method(request, metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as exc:
            # `from None`: the CorralError carries the status, and a chained
            # gRPC error would only add the SDK's internals to the traceback.
            raise error_from_rpc(exc) from None

    async def _write(self, method: Callable[..., Any], request: Any) -> Any:
        """A unary write, sent with a request id (a new one unless the caller chose it) and sent
        again with that id while its outcome is unknown (WRITE_RETRY_S), then the last error."""
        if not request.request_id:
            request.request_id = secrets.token_hex(16)
        return await async_write_retrying(WRITE_RETRY_S)(self._unary, method, request)

    async def _stream(
        self, method: Callable[..., Any], request: Any, *, timeout: float | None = None
    ) -> AsyncGenerator[Any, None]:
        """Iterate a server stream, mapping errors and cancelling it when abandoned."""
        call = method(request, metadata=self._metadata, timeout=timeout)
        try:
            while True:
                try:
                    response = await async_next_message(call)
                except grpc.RpcError as exc:
                    raise error_from_rpc(exc) from None
                if response is None:
                    return
                yield response
        finally:
            call.cancel()

    async def close(self) -> None:
        """Close the channel; calls in flight end with CANCELLED."""
        await self._channel.close()

    # ------------------------------------------------------------ board

    async def get_task(self, task_id: str) -> Task:
        """One task by id, its claim history in `attempts`; raises NotFound."""
        request = pb.GetTaskRequest(task_id=task_id)
        response = await self._unary(self._board.GetTask, request)
        return _convert.task_with_attempts_from_pb(response)

    async def list_tasks(
        self,
        *,
        states: Iterable[TaskState] = (),
        owner: str = "",
        page_size: int | None = None,
    ) -> AsyncGenerator[Task, None]:
        """Every task matching the filters, fetching pages lazily as you iterate.

        Empty `states` means every state; `page_size` None is the daemon's default.
        """
        states = tuple(states)
        page_token = ""
        while True:
            tasks, page_token = await self.list_tasks_page(
                states=states, owner=owner, page_size=page_size, page_token=page_token
            )
            for task in tasks:
                yield task
            if not page_token:
                return

    async def list_tasks_page(
        self,
        *,
        states: Iterable[TaskState] = (),
        owner: str = "",
        page_size: int | None = None,
        page_token: str = "",
    ) -> tuple[list[Task], str]:
        """One page of `list_tasks`: its tasks, and the token of the next page ("" after the last)."""
        request = _convert.list_tasks_request(tuple(states), owner, page_size, page_token)
        response = await self._unary(self._board.ListTasks, request)
        return _convert.tasks_from_pb(response.tasks), response.next_page_token

    async def list_teammates(self) -> list[TeammateInfo]:
        """Every teammate the daemon knows, with status and held claims, in the order they were added."""
        teammates: list[TeammateInfo] = []
        page_token = ""
        while True:
            response = await self._unary(self._board.ListTeammates, pb.ListTeammatesRequest(page_token=page_token))
            teammates.extend(_convert.teammate_from_pb(teammate) for teammate in response.teammates)
            page_token = response.next_page_token
            if not page_token:
                return teammates

    async def send_message(self, to: str, body: str) -> list[str]:
        """Send `body` to "lead", a teammate's name, or "*" (every teammate).

        Returns the names it was queued for.
        """
        request = pb.SendMessageRequest(to=to, body=body)
        response = await self._write(self._board.SendMessage, request)
        return list(response.recipients)

    async def get_identity(self) -> Identity:
        """Who this client's credential is: name, role ("lead" or "teammate") and task
        roles. Raises Unauthenticated for a missing, invalid or revoked credential."""
        response = await self._unary(self._board.GetIdentity, pb.GetIdentityRequest())
        return _convert.identity_from_pb(response)

    async def get_stats(self) -> Stats:
        """Counts by state and status, and the daemon writer's health."""
        response = await self._unary(self._board.GetStats, pb.GetStatsRequest())
        return _convert.stats_from_pb(response)

    # ------------------------------------------------------------ output

    async def tail_output(
        self,
        task_id: str,
        *,
        attempt: int = 0,
        offset: int = 0,
        follow: bool = True,
        reconnect_timeout: float = TAIL_RECONNECT_S,
    ) -> AsyncGenerator[OutputChunk, None]:
        """A task's live output (what its holder wrote with `Claim.output`), as
        `OutputChunk`s in order from byte `offset` of the attempt's output.

        `attempt` is the claim's attempt number (`Claim.attempt`, `Task.attempts`);
        0 is the task's latest claim. With `follow`, each append comes as the daemon
        stores it, and the iterator ends after the chunk with `end` set, once the
        attempt has ended; without it, it ends once the stored output is sent. A
        broken stream (the daemon restarting, say) is opened again at the next
        offset of the same attempt, with no gap and no repeat, for up to
        `reconnect_timeout` seconds per outage; then the last error is raised.

        The Lead and viewers may tail any task; a teammate, the tasks it holds or
        held and their dependencies (PermissionDenied otherwise). Raises NotFound for
        an unknown task or an attempt it never had (reason ATTEMPT_NOT_FOUND), and
        InvalidArgument for an offset past the stored end. Close the iterator
        (`contextlib.aclosing`) to end the stream promptly when you stop early.
        """
        tail = _OutputTail(task_id, attempt, offset, follow)
        policy = async_retrying(reconnect_timeout)
        try:
            while True:
                chunk: OutputChunk | None = await policy(self._next_output_chunk, tail)
                if chunk is None:
                    return
                yield chunk
                if chunk.end:
                    return
        finally:
            tail.drop()

    async def _next_output_chunk(self, tail: _OutputTail) -> OutputChunk | None:
        """The tail's next chunk, opening its stream at its position first if none is
        open; None once a stream without `follow` has sent what is stored."""
        if tail.call is None:
            tail.call = self._board.TailOutput(tail.request(), metadata=self._metadata)
        try:
            response = await async_next_message(tail.call)
        except grpc.RpcError as exc:
            tail.drop()
            raise error_from_rpc(exc) from None
        if response is None:
            tail.drop()
            if tail.follow:
                # A following stream ends after its end chunk: this one's daemon is going away.
                raise Unavailable("the output stream ended before the attempt did")
            return None
        chunk = _convert.output_chunk_from_pb(response)
        tail.advance(chunk)
        return chunk

    # ------------------------------------------------------------ artifacts

    @overload
    async def get_artifact(self, task_id: str, name: str, *, to: None = None, sha256: str | None = None) -> bytes: ...

    @overload
    async def get_artifact(
        self, task_id: str, name: str, *, to: str | os.PathLike[str], sha256: str | None = None
    ) -> Path: ...

    async def get_artifact(
        self, task_id: str, name: str, *, to: str | os.PathLike[str] | None = None, sha256: str | None = None
    ) -> bytes | Path:
        """The bytes of the task's artifact `name` (the one `Task.artifacts` lists).

        Without `to`, returns them. With `to`, streams them into a temporary file
        beside that path and renames it onto the path once every byte arrived, so
        a failed download leaves no partial file; returns the path. With `sha256`
        (an `Artifact.sha256` from `Task.artifacts` or `Claim.dependency_artifacts`),
        bytes of any other SHA-256 (a newer upload of the name superseded it) raise
        CorralError and nothing is kept.

        The Lead and viewers may read any task's artifacts; a teammate, those of the
        tasks it holds or held and of their dependencies (PermissionDenied
        otherwise). Raises NotFound for an unknown task, or a name the task has no
        artifact of (reason ARTIFACT_NOT_FOUND).
        """
        request = pb.GetArtifactRequest(task_id=task_id, name=name)
        with Download(task_id, name, to, sha256) as download:
            stream = self._stream(self._board.GetArtifact, request, timeout=TRANSFER_TIMEOUT_S)
            async with contextlib.aclosing(stream) as chunks:
                async for chunk in chunks:
                    download.write(chunk.data)
            return download.finish()


class _OutputTail:
    """Where a `tail_output` is: the attempt (fixed by its first chunk, so a resumed
    stream reads the same attempt even when a newer one began), the next offset, and
    the stream open at that position, if any."""

    def __init__(self, task_id: str, attempt: int, offset: int, follow: bool) -> None:
        self.task_id = task_id
        self.attempt = attempt
        self.offset = offset
        self.follow = follow
        self.call: Any = None

    def request(self) -> pb.TailOutputRequest:
        return pb.TailOutputRequest(task_id=self.task_id, attempt=self.attempt, offset=self.offset, follow=self.follow)

    def advance(self, chunk: OutputChunk) -> None:
        self.attempt = chunk.attempt
        self.offset = chunk.offset + len(chunk.data)

    def drop(self) -> None:
        """Cancel the open stream, if any."""
        call, self.call = self.call, None
        if call is not None:
            call.cancel()
