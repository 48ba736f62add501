"""Helpers for the MCP bridge tests: the bridge in-process with the SDK's Client,
calls that check every result for secrets, and results as plain data."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from corral.mcp_bridge import Bridge, BridgeConfig


@dataclasses.dataclass
class Secrets:
    """Tokens that must never appear in a result, a log line or stdout."""

    tokens: set[str]

    def assert_absent(self, text: str, where: str) -> None:
        leaked = [t for t in self.tokens if t and t in text]
        assert not leaked, f"a credential appeared in {where}"


@dataclasses.dataclass
class Result:
    is_error: bool
    text: str
    data: dict[str, Any]


class Agent:
    """An MCP client session driven by a test's scripted policy."""

    def __init__(self, client: Client, secrets: Secrets) -> None:
        self.client = client
        self.secrets = secrets
        self.progress: list[str] = []

    async def call(self, tool: str, **arguments: Any) -> Result:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            self.progress.append(message or "")

        raw = await self.client.call_tool(tool, arguments, progress_callback=on_progress)
        text = "\n".join(getattr(part, "text", "") for part in raw.content)
        data = raw.structured_content or {}
        self.secrets.assert_absent(text + json.dumps(data), f"the result of {tool}")
        return Result(bool(raw.is_error), text, data)

    async def ok(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = await self.call(tool, **arguments)
        assert not result.is_error, f"{tool} failed: {result.text}"
        return result.data

    async def error(self, tool: str, **arguments: Any) -> str:
        result = await self.call(tool, **arguments)
        assert result.is_error, f"{tool} succeeded where it should fail: {result.text[:300]}"
        return result.text

    async def tool_names(self) -> set[str]:
        return {tool.name for tool in (await self.client.list_tools()).tools}


@contextlib.asynccontextmanager
async def bridge_agent(address: str, token: str, secrets: Secrets, **options: Any) -> AsyncIterator[Agent]:
    """A bridge for `token` served in-process, and an Agent connected to it."""
    bridge = await Bridge.open(BridgeConfig(address=address, token=token, **options))
    try:
        async with Client(bridge.server) as client:
            yield Agent(client, secrets)
    finally:
        await bridge.close()


# ---------------------------------------------------------------- over stdio

REPO_ROOT = Path(__file__).resolve().parents[2]


def bridge_env(address: str, token: str) -> dict[str, str]:
    """The environment of a `python -m corral mcp` child: the credential, and the source tree."""
    path = os.pathsep.join(str(REPO_ROOT / part) for part in ("server", "client", "."))
    return {**os.environ, "PYTHONPATH": path, "CORRAL_ADDRESS": address, "CORRAL_TOKEN": token}


@dataclasses.dataclass
class StdioLog:
    """Where a stdio bridge's stdout copy and stderr went."""

    out: Path
    err: Path

    def check(self, secrets: Secrets) -> None:
        """No credential in any byte written, and every stdout line a JSON-RPC message."""
        out, err = self.out.read_text(), self.err.read_text()
        secrets.assert_absent(out, f"stdout ({self.out.name})")
        secrets.assert_absent(err, f"stderr ({self.err.name})")
        lines = [line for line in out.splitlines() if line]
        assert lines, "the bridge wrote nothing on stdout"
        for line in lines:
            assert json.loads(line).get("jsonrpc") == "2.0", f"not JSON-RPC on stdout: {line[:200]}"


def stdio_params(address: str, token: str, log: StdioLog, *args: str) -> StdioServerParameters:
    """`python -m corral mcp ARGS` over stdio, its output copied to `log`."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "tests.mcp.stdio_tee", str(log.out), str(log.err), "--", "-m", "corral", "mcp", *args],
        env=bridge_env(address, token),
        cwd=str(REPO_ROOT),
    )


@contextlib.asynccontextmanager
async def stdio_agent(address: str, token: str, secrets: Secrets, log: StdioLog, *args: str) -> AsyncIterator[Agent]:
    """An Agent talking to a `corral mcp` subprocess over stdio."""
    async with Client(stdio_params(address, token, log, *args)) as client:
        yield Agent(client, secrets)
