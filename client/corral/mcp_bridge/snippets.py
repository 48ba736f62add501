"""MCP client configuration that starts `corral mcp` for one credential."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from corral._channel import ADDRESS_ENV, TOKEN_ENV

__all__ = ["mcp_config_snippet"]


def mcp_config_snippet(name: str, address: str, *, token_file: Path | None = None, token: str = "") -> dict[str, Any]:
    """The `mcpServers` entry for teammate `name`: reading `token_file`, or with `token`
    in its environment (for `corral teammates add --mcp-config`, which shows it once).

    The command is this interpreter's absolute path running `-m corral.cli`: an MCP
    client (a desktop app) starts it without the environment's `bin/` on its PATH."""
    args = ["-m", "corral.cli", "mcp"]
    env = {ADDRESS_ENV: address}
    if token_file is not None:
        args += ["--token-file", str(token_file)]
    else:
        env[TOKEN_ENV] = token
    command = str(Path(sys.executable).absolute())
    return {"mcpServers": {f"corral-{name}": {"command": command, "args": args, "env": env}}}
