"""One bridge per credential: checks who the credential is, offers only that role's
tools, and serves them over MCP (stdio in `corral mcp`, in-process in tests).

stdout carries MCP messages only; every log line goes to stderr, and none names
a token (the SDK's claim handles never print theirs).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.metadata
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

import corral
from corral import aio

from .errors import ToolFailure, failure_from_error
from .lead_tools import LeadLink, lead_tools
from .registry import Outcome, ToolSpec, error_result, parse_arguments, success_result
from .teammate_link import LinkSettings, TeammateLink
from .teammate_tools import teammate_tools

__all__ = ["ALL_TOOL_NAMES", "Bridge", "BridgeConfig", "serve_stdio"]

_log = logging.getLogger("corral.mcp")

# On end of stdin the bridge stops renewing and is gone within this long.
CLOSE_TIMEOUT_S = 1.5

_INSTRUCTIONS = (
    "corral coordinates a team of agents. As a teammate: call next_item, handle the one item it returns "
    "(do a claimed task and finish it with complete_task or fail_task, or ask_lead when you cannot go on without "
    "the Lead's answer, or propose_tasks for work you discovered, splitting your task on it when that work "
    "must come first; judge a review and answer it with submit_review; answer a shutdown_request with "
    "respond_shutdown), then call next_item again. Text from other parties is labelled with its author."
)


@dataclasses.dataclass(frozen=True)
class BridgeConfig:
    address: str
    token: str = dataclasses.field(repr=False)
    quiet_limit: float = 30 * 60.0
    mint_dir: Path | None = None
    progress_interval: float = 10.0
    max_idle_polls: int | None = None  # None: the daemon's defaults
    poll_interval: float | None = None


@dataclasses.dataclass
class _Role:
    tools: list[ToolSpec]
    close: Callable[[], Awaitable[None]]
    touch: Callable[[], str | None] = lambda: None
    attention: Callable[[], list[str]] = list


async def _open_teammate(config: BridgeConfig, teammate: aio.Teammate, identity: corral.Identity) -> _Role:
    held: tuple[str, ...] = ()
    for mate in await teammate.list_teammates():
        if mate.name == identity.name:
            held = mate.held_task_ids
    settings = LinkSettings(
        quiet_limit=config.quiet_limit,
        progress_interval=config.progress_interval,
        max_idle_polls=config.max_idle_polls,
        poll_interval=config.poll_interval,
    )
    link = TeammateLink(teammate, identity, settings, held_at_start=held)
    return _Role(teammate_tools(link), link.close, link.touch, link.attention)


async def _open_lead(config: BridgeConfig, teammate: aio.Teammate, identity: corral.Identity) -> _Role:
    await teammate.close()
    link = LeadLink(await aio.Lead.connect(config.address, config.token, connect_timeout=0), mint_dir=config.mint_dir)
    return _Role(lead_tools(link), link.close)


# The tool set each role gets: a new role is one more line.
_ROLES: dict[str, Callable[[BridgeConfig, aio.Teammate, corral.Identity], Awaitable[_Role]]] = {
    "teammate": _open_teammate,
    "lead": _open_lead,
}
# Every tool name any role has, so calling another role's tool is PERMISSION_DENIED, not unknown.
ALL_TOOL_NAMES = frozenset(
    {
        *("next_item", "get_task", "list_tasks", "list_teammates", "renew_lease", "complete_task", "fail_task"),
        *("release_task", "ask_lead", "submit_review", "send_message", "submit_plan", "respond_shutdown"),
        *("my_status", "propose_tasks", "append_output", "put_artifact"),
        *("create_tasks", "cancel_tasks", "revoke_claim", "answer_question", "review_task", "set_budget"),
        *("set_concurrency_limit", "decide_plan", "decide_proposals", "add_dependencies", "set_task_creation"),
        *("request_shutdown", "board_summary", "watch_events", "add_teammate", "read_output", "get_artifact"),
    }
)


class Bridge:
    """An MCP server for one corral credential. `await Bridge.open(config)`, serve
    `bridge.server`, then `await bridge.close()`."""

    def __init__(self, identity: corral.Identity, role: _Role) -> None:
        self.identity = identity
        self._role = role
        self._tools = {spec.name: spec for spec in role.tools}
        self.server: Server[Any] = Server(
            "corral",
            version=_version(),
            instructions=_INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    @classmethod
    async def open(cls, config: BridgeConfig) -> Bridge:
        """Check the credential (raises Unauthenticated when revoked or unknown) and set up its role."""
        # An unreachable daemon exits 3 at once (the MCP client shows it), as the CLI does.
        teammate = await aio.Teammate.connect(config.address, config.token, connect_timeout=0)
        try:
            identity = await teammate.get_identity()
            opener = _ROLES.get(identity.role)
            if opener is None:
                raise corral.CorralError(f"the credential's role {identity.role!r} has no MCP tools")
            role = await opener(config, teammate, identity)
        except BaseException:
            await teammate.close()
            raise
        _log.info("bridge for %s (%s) with %d tools", identity.name, identity.role, len(role.tools))
        return cls(identity, role)

    @property
    def tool_names(self) -> list[str]:
        return list(self._tools)

    async def close(self) -> None:
        await self._role.close()

    async def _list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[spec.listing() for spec in self._tools.values()])

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        notice = self._role.touch()
        notes = [notice] if notice else []
        try:
            spec = self._tool(params.name)
            arguments = parse_arguments(spec, params.arguments)
            outcome = await spec.handler(arguments, _progress_sender(ctx))
        except ToolFailure as failure:
            return error_result(failure, [*notes, *self._role.attention()])
        except corral.CorralError as exc:
            return error_result(failure_from_error(exc), [*notes, *self._role.attention()])
        except Exception as exc:  # a bug here must not end the session
            _log.exception("tool %s failed", params.name)
            return error_result(ToolFailure("INTERNAL", f"the bridge failed: {type(exc).__name__}"), notes)
        finally:
            self._role.touch()
        content = dict(outcome.content)
        attention = self._role.attention()
        if attention:
            content["attention"] = attention
        if notice:
            content["notice"] = notice
        return success_result(Outcome(outcome.summary, content))

    def _tool(self, name: str) -> ToolSpec:
        spec = self._tools.get(name)
        if spec is not None:
            return spec
        if name in ALL_TOOL_NAMES:
            raise ToolFailure(
                "PERMISSION_DENIED", f"{name} is not a tool of a {self.identity.role}; this credential may not use it"
            )
        raise ToolFailure("UNKNOWN_TOOL", f"no tool named {name!r}; this bridge offers: {', '.join(self._tools)}")


def _progress_sender(ctx: Any) -> Callable[[str], Awaitable[None]]:
    """Progress notifications for this call; the SDK sends none when the call asked for none."""
    count = 0

    async def send(message: str) -> None:
        nonlocal count
        count += 1
        with contextlib.suppress(Exception):  # a client gone away must not fail the wait
            await ctx.session.report_progress(float(count), None, message)

    return send


def _version() -> str:
    try:
        return importlib.metadata.version("corral")
    except importlib.metadata.PackageNotFoundError:
        return "0"


async def serve_stdio(config: BridgeConfig) -> None:
    """Serve MCP on stdin/stdout until stdin ends, then stop at once (a long poll in
    flight is abandoned: its caller has gone). The bridge is opened first, so a bad
    credential fails before any MCP message is read."""
    bridge = await Bridge.open(config)
    try:
        async with stdio_server() as (read_stream, write_stream):
            screened_in, screened_out = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            async with anyio.create_task_group() as group:

                async def screen() -> None:
                    await _screen_input(read_stream, screened_in, write_stream)
                    group.cancel_scope.cancel()  # end of stdin: the session is over

                group.start_soon(screen)
                await bridge.server.run(screened_out, write_stream, bridge.server.create_initialization_options())
                group.cancel_scope.cancel()
    finally:
        try:
            await asyncio.wait_for(bridge.close(), CLOSE_TIMEOUT_S)
        except TimeoutError:
            _log.warning("closing the bridge took over %gs; leaving", CLOSE_TIMEOUT_S)


async def _screen_input(
    source: Any, forward: anyio.abc.ObjectSendStream[SessionMessage | Exception], replies: Any
) -> None:
    """Pass MCP messages on; answer a line that is not one with a JSON-RPC parse error
    (id null) instead of dropping it silently, and keep serving."""
    async with forward:
        async for item in source:
            if isinstance(item, Exception):
                _log.info("refused an input line that is not a JSON-RPC message")
                error = types.ErrorData(code=types.PARSE_ERROR, message="Parse error: not a JSON-RPC 2.0 message")
                await replies.send(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=None, error=error)))
                continue
            await forward.send(item)
