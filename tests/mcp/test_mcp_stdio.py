"""The bridge as a process: `python -m corral mcp` over stdio, with raw JSON-RPC."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .mcpkit import REPO_ROOT, bridge_env

_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}


def _bridge(address: str, token: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "corral", "mcp", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=bridge_env(address, token),
        cwd=str(REPO_ROOT),
    )


def _send(child: subprocess.Popen[bytes], message: dict | str) -> None:
    assert child.stdin is not None
    line = message if isinstance(message, str) else json.dumps(message)
    child.stdin.write(line.encode() + b"\n")
    child.stdin.flush()


def _reply(child: subprocess.Popen[bytes]) -> dict:
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line, "the bridge closed stdout"
    return json.loads(line)


@pytest.mark.timeout(30)
def test_malformed_input_gets_a_parse_error_and_the_bridge_serves_on_until_stdin_closes(board, mint, secrets) -> None:
    _, token = mint()
    child = _bridge(board.address, token)
    try:
        _send(child, "{this is not json")
        error = _reply(child)
        assert (error["id"], error["error"]["code"]) == (None, -32700)
        _send(child, _INITIALIZE)
        assert _reply(child)["result"]["protocolVersion"] == "2025-06-18"
        _send(child, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        _send(child, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        tools = {tool["name"] for tool in _reply(child)["result"]["tools"]}
        assert "next_item" in tools
        # A long poll in flight does not keep the bridge alive once stdin ends.
        call = {"name": "next_item", "arguments": {"wait_seconds": 50}}
        _send(child, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call})
        assert child.stdin is not None
        child.stdin.close()
        assert child.wait(timeout=10) == 0  # long before its 50 s poll could have ended
        assert child.stdout is not None and child.stderr is not None
        rest, err = child.stdout.read().decode(), child.stderr.read().decode()
        secrets.assert_absent(rest + err, "the bridge's output")
        assert all(json.loads(line)["jsonrpc"] == "2.0" for line in rest.splitlines() if line)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


@pytest.mark.timeout(30)
def test_a_missing_invalid_or_revoked_credential_exits_1_with_one_line_on_stderr(board, mint, tmp) -> None:
    # (and a daemon that cannot be reached exits 3, the CLI's status for it)
    name, revoked = mint()
    board.remove_teammate(name)
    viewer = board.add_viewer("mcp-viewer")  # a valid credential whose role has no tools
    children = {
        kind: _bridge(board.address, token)
        for kind, token in [("missing", ""), ("invalid", "x"), ("revoked", revoked), ("viewer", viewer)]
    }
    children["unreachable"] = _bridge(f"unix:{tmp}/no-daemon.sock", revoked)
    for kind, child in children.items():
        out, err = child.communicate(timeout=20)
        assert out == b"", kind
        lines = err.decode().strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("corral: "), (kind, lines)
        assert revoked not in lines[0] and viewer not in lines[0]
        assert child.returncode == (3 if kind == "unreachable" else 1), (kind, lines)
        if kind == "viewer":
            assert "role 'viewer' has no MCP tools" in lines[0], lines


@pytest.mark.timeout(30)
def test_the_oldest_handshake_revision_is_negotiated_with_a_token_file(board, mint, tmp) -> None:
    # 2025-06-18 is the malformed-input test's; the Python and TypeScript clients take the newest.
    version = "2024-11-05"
    _, token = mint()
    token_file = tmp / "mate.token"
    token_file.write_text(token + "\n")
    child = _bridge(board.address, "", "--token-file", str(token_file), "--agent-quiet-limit", "90s")
    try:
        _send(child, {**_INITIALIZE, "params": {**_INITIALIZE["params"], "protocolVersion": version}})
        assert _reply(child)["result"]["protocolVersion"] == version
    finally:
        assert child.stdin is not None
        child.stdin.close()
        assert child.wait(timeout=10) == 0


@pytest.mark.timeout(30)
def test_the_sdk_and_cli_do_not_import_the_mcp_sdk() -> None:
    probe = (
        "import sys, corral, corral.aio, corral.cli, corral.mcp_bridge; "
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))"
    )
    env = bridge_env("unix:/nonexistent", "")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=20, check=True)
    assert out.stdout.strip() == "[]"
