"""`corral mcp`: an MCP server per corral credential, so an MCP-capable agent joins
a team as a teammate or as the Lead with no code.

Identity and role come from the credential (BoardService.GetIdentity); only that
role's tools are offered. Claims are held by the bridge and named by task id, so
no claim token reaches the model; leases are renewed while the agent keeps calling
corral tools. The server needs the `mcp` extra (`pip install 'corral[mcp]'`); it is
imported on first use, so `mcp_config_snippet` works without it.
"""

from __future__ import annotations

from typing import Any

from corral.mcp_bridge.snippets import mcp_config_snippet

__all__ = ["Bridge", "BridgeConfig", "mcp_config_snippet", "serve_stdio"]


def __getattr__(name: str) -> Any:
    if name in ("Bridge", "BridgeConfig", "serve_stdio"):
        from corral.mcp_bridge import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
