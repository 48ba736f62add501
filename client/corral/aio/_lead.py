"""The asyncio Lead client. Same calls as `corral.Lead`, awaited."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import grpc.aio

from corral import _convert
from corral._channel import open_aio_channel, teammate_env
from corral._errors import Unavailable
from corral._launch import DaemonProcess, launch_daemon
from corral._progress import track_unfinished
from corral._types import NewTeammate, Stats, Task, TaskChanged, TaskSpec, TaskState, TeammateInfo, WatchEvent
from corral.aio._board import BoardClient
from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

__all__ = ["Lead"]


class Lead(BoardClient):
    """The Lead's asyncio connection to a corrald daemon.

    `lead = await Lead.launch(...)` starts a daemon (stopped by `await
    lead.close()` or leaving `async with lead:`); `await Lead.connect(address,
    token)` joins a running one.
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
    ) -> Lead:
        """Start `corrald serve` on `state_dir` and connect as the Lead (see `corral.Lead.launch`)."""
        daemon = await asyncio.to_thread(
            launch_daemon, state_dir, listen=listen, extra_args=extra_args, env=env, ready_timeout=ready_timeout
        )
        try:
            token = daemon.read_lead_token()
            channel = open_aio_channel(daemon.address, root_certificates=root_certificates)
            return cls(channel, daemon.address, token, daemon=daemon, rpc_timeout=rpc_timeout)
        except BaseException:
            await asyncio.to_thread(daemon.stop)
            raise

    @classmethod
    async def connect(
        cls,
        address: str,
        token: str,
        *,
        root_certificates: bytes | None = None,
        rpc_timeout: float | None = None,
    ) -> Lead:
        """Join a running daemon at `address` with the Lead credential `token`."""
        channel = open_aio_channel(address, root_certificates=root_certificates)
        return cls(channel, address, token.strip(), rpc_timeout=rpc_timeout)

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
            await asyncio.to_thread(self._daemon.stop)

    async def __aenter__(self) -> Lead:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # ------------------------------------------------------------ tasks and teammates

    async def create_tasks(self, specs: Iterable[TaskSpec], *, request_id: str | None = None) -> list[Task]:
        """Add a batch of tasks atomically (see `corral.Lead.create_tasks`)."""
        response = await self._unary(self._lead.CreateTasks, _convert.create_tasks_request(specs, request_id))
        return _convert.tasks_from_pb(response.tasks)

    async def cancel_tasks(self, ids: Iterable[str]) -> list[Task]:
        """Cancel tasks and, transitively, their dependents; returns every task changed."""
        response = await self._unary(self._lead.CancelTasks, pb.CancelTasksRequest(ids=list(ids)))
        return _convert.tasks_from_pb(response.tasks)

    async def add_teammate(
        self, name: str, *, roles: Iterable[str] = (), require_plan_approval: bool = False
    ) -> NewTeammate:
        """Mint a teammate credential. Its token is shown only in the result."""
        request = pb.AddTeammateRequest(name=name, roles=list(roles), require_plan_approval=require_plan_approval)
        return _convert.new_teammate_from_pb(await self._unary(self._lead.AddTeammate, request))

    async def remove_teammate(self, name: str) -> TeammateInfo:
        """Revoke a teammate: its streams end and its claims return to PENDING."""
        response = await self._unary(self._lead.RemoveTeammate, pb.RemoveTeammateRequest(name=name))
        return _convert.teammate_from_pb(response.teammate)

    async def request_shutdown(
        self, name: str, *, reason: str = "", grace: datetime.timedelta | float | None = None
    ) -> str:
        """Ask a teammate to stop; returns the request id (see `corral.Lead.request_shutdown`)."""
        request = _convert.request_shutdown_request(name, reason, grace)
        response: pb.RequestShutdownResponse = await self._unary(self._lead.RequestShutdown, request)
        return response.request_id

    async def decide_plan(self, plan_id: str, *, approve: bool, feedback: str = "") -> None:
        """Approve or reject a submitted plan."""
        request = pb.DecidePlanRequest(plan_id=plan_id, approve=approve, feedback=feedback)
        await self._unary(self._lead.DecidePlan, request)

    def teammate_env(self, new_teammate: NewTeammate, *, address: str | None = None) -> dict[str, str]:
        """CORRAL_ADDRESS and CORRAL_TOKEN for a teammate process's environment."""
        return teammate_env(address or self.address, new_teammate.token)

    # ------------------------------------------------------------ events

    async def watch(self, after_seq: int = 0) -> AsyncGenerator[WatchEvent, None]:
        """Board events with a sequence number above `after_seq`, then live ones.

        Wrap in `contextlib.aclosing(...)` to cancel the stream as soon as you stop.
        """
        request = pb.WatchRequest(after_seq=after_seq)
        async with contextlib.aclosing(self._stream(self._lead.Watch, request)) as responses:
            async for response in responses:
                event = _convert.watch_event_from_pb(response)
                if event is not None:
                    yield event

    async def wait_until_done(self, timeout: datetime.timedelta | float) -> Stats:
        """Wait until no task is PENDING or IN_PROGRESS; returns the final stats.

        Follows the Watch feed and confirms with GetStats. Raises TimeoutError.
        """
        seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)
        async with asyncio.timeout(seconds):
            stats = await self.get_stats()
            if stats.active_tasks == 0:
                return stats
            unfinished: dict[str, TaskState] = {}
            async with contextlib.aclosing(self.watch(0)) as events:
                async for event in events:
                    if isinstance(event, TaskChanged) and track_unfinished(unfinished, event.task):
                        stats = await self.get_stats()
                        if stats.active_tasks == 0:
                            return stats
        raise Unavailable("the daemon ended the watch stream before every task finished")
