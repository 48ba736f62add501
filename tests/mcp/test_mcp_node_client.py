"""An independent MCP client, the TypeScript SDK (pinned in tests/polyglot/node), drives
the bridge over stdio: tools listed, progress while waiting, a task completed."""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
import sys

import pytest

import corral

from .mcpkit import REPO_ROOT, bridge_env

NODE_DIR = REPO_ROOT / "tests" / "polyglot" / "node"


@pytest.mark.timeout(60)
def test_the_typescript_sdk_lists_waits_with_progress_and_completes(board, secrets, mint) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("Node.js is required for this test: install node (v18+) and npm, then `make node-deps`")
    if not (NODE_DIR / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        pytest.fail("the Node test dependencies are missing: run `make node-deps`")
    name, token = mint(roles=["node"])
    task_id = f"{name}-later"
    env = {**bridge_env(board.address, token), "CORRAL_PYTHON": sys.executable, "CORRAL_REPO": str(REPO_ROOT)}
    client = subprocess.Popen(
        [node, str(NODE_DIR / "mcp_client.js")], cwd=NODE_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        # The task is created once the client has listed the tools (next_item, waiting, comes
        # next) and is ready 3 s later: however slow the start, the client waits that long,
        # receiving progress every 500 ms. (The test's timeout bounds the read.)
        assert client.stdout is not None
        first_lines = [client.stdout.readline() for _ in range(2)]  # "connected", then "tools"
        later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=3)
        board.create_tasks([corral.TaskSpec(task_id, required_role="node", not_before=later)])
        stdout, stderr = client.communicate(timeout=40)
    finally:
        if client.poll() is None:
            client.kill()
            client.communicate()
    run = subprocess.CompletedProcess(client.args, client.returncode, b"".join(first_lines) + stdout, stderr)
    out, err = run.stdout.decode(), run.stderr.decode()
    secrets.assert_absent(out, "the Node client's output")
    secrets.assert_absent(err, "the bridge's stderr")
    events = {line["event"]: line for line in map(json.loads, out.splitlines())}
    assert run.returncode == 0 and "error" not in events, f"{out}\n{err[-3000:]}"
    assert events["connected"]["protocol"] == "2025-11-25"  # the newest handshake revision
    assert events["connected"]["server"]["name"] == "corral"
    assert "next_item" in events["tools"]["names"] and events["tools"]["output_schemas"] is True
    assert events["waited"]["kind"] == "claim" and events["waited"]["progress"] >= 2
    assert (events["completed"]["task_id"], events["completed"]["state"]) == (task_id, "COMPLETED")
    assert events["refused"]["is_error"] is True and "owner" in events["refused"]["text"]
    assert board.get_task(task_id).result == b"done by node"
