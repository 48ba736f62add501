"""Artifacts through the bridge, in-process against a real daemon: a teammate attaches
text or base64 to a task it holds (put_artifact); the Lead reads one back as text or
base64 (get_artifact) and sees them in watch_events, a teammate in get_task; a dependent's claim
from next_item lists its dependencies' artifacts as references. Both-or-neither
contents, bad base64, content over 4 MiB and a task not held are isError results that
attach nothing."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from pathlib import Path

import pytest

import corral
from corral.mcp_bridge.artifact_tools import MCP_ARTIFACT_MAX_BYTES, is_textual

from .mcpkit import Secrets, bridge_agent

pytestmark = pytest.mark.timeout(60)

BINARY = bytes(range(256)) * 3


@pytest.mark.parametrize("transport", ["session", "idle"])
def test_put_text_and_base64_then_the_lead_reads_them_and_a_dependent_sees_them(
    board, secrets, mint, monkeypatch, transport
) -> None:
    monkeypatch.setenv("CORRAL_TRANSPORT", transport)
    role = f"art-{transport}"
    name, token = mint(roles=[role])
    made, uses = f"{name}-make", f"{name}-use"
    board.create_tasks(
        [corral.TaskSpec(made, required_role=role), corral.TaskSpec(uses, required_role=role, depends_on=(made,))]
    )
    report = "# Findings\nall é good\n"

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, token, secrets) as mate,
            bridge_agent(board.address, board.token, secrets) as lead,
        ):
            assert (await mate.ok("next_item", wait_seconds=5))["claim"]["task_id"] == made
            text = await mate.ok("put_artifact", task_id=made, name="report.md", text=report)
            assert {k: text[k] for k in ("task_id", "name", "media_type", "size", "sha256", "attempt")} == {
                "task_id": made,
                "name": "report.md",
                "media_type": "text/markdown",
                "size": len(report.encode()),
                "sha256": hashlib.sha256(report.encode()).hexdigest(),
                "attempt": 1,
            }
            plain = await mate.ok("put_artifact", task_id=made, name="notes", text="no extension")
            assert plain["media_type"] == "text/plain", "text with a name that says nothing is text/plain"
            binary = await mate.ok(
                "put_artifact",
                task_id=made,
                name="out/data.bin",
                base64=base64.b64encode(BINARY).decode(),
                media_type="application/x-corral-test",
            )
            assert (binary["media_type"], binary["size"]) == ("application/x-corral-test", len(BINARY))
            await mate.ok("complete_task", task_id=made, result="made")

            read = await lead.ok("get_artifact", task_id=made, name="report.md")
            assert read["content"] == {"from": name, "role": "teammate", "encoding": "utf-8", "text": report}
            assert read["sha256"] == text["sha256"]
            raw = await lead.ok("get_artifact", task_id=made, name="out/data.bin")
            assert raw["content"]["encoding"] == "base64"
            assert base64.b64decode(raw["content"]["data"]) == BINARY
            shown = (await mate.ok("get_task", task_id=made))["task"]
            assert [a["name"] for a in shown["artifacts"]] == ["notes", "out/data.bin", "report.md"]
            events = (await lead.ok("watch_events", after_seq=0, wait_seconds=1))["events"]
            added = [e for e in events if e.get("kind") == "artifact_added" and e["task_id"] == made]
            assert [e["artifact"]["name"] for e in added] == ["report.md", "notes", "out/data.bin"]

            claim = (await mate.ok("next_item", wait_seconds=5))["claim"]
            assert claim["task_id"] == uses
            listed = claim["dependency_artifacts"]
            assert [(d["task_id"], d["name"]) for d in listed] == [
                (made, "notes"),
                (made, "out/data.bin"),
                (made, "report.md"),
            ]
            assert listed[2] == {"task_id": made, **{k: text[k] for k in listed[2] if k != "task_id"}}
            assert "text" not in listed[2] and "data" not in listed[2], "references, never the bytes"
            await mate.ok("complete_task", task_id=uses, result="used")

    asyncio.run(scenario())


def test_bad_contents_are_errors_and_attach_nothing(board, secrets, mint) -> None:
    name, token = mint(roles=["bad-art"])
    task_id, other = f"{name}-held", f"{name}-not-held"
    board.create_tasks([corral.TaskSpec(task_id, required_role="bad-art"), corral.TaskSpec(other, required_role="x")])

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, token, secrets) as mate,
            bridge_agent(board.address, board.token, secrets) as lead,
        ):
            await mate.ok("next_item", wait_seconds=5)
            both = await mate.error("put_artifact", task_id=task_id, name="a.txt", text="x", base64="eA==")
            assert both.startswith("INVALID_ARGUMENT: give exactly one of text")
            neither = await mate.error("put_artifact", task_id=task_id, name="a.txt")
            assert neither.startswith("INVALID_ARGUMENT: give exactly one of text")
            bad = await mate.error("put_artifact", task_id=task_id, name="a.bin", base64="not base64!")
            assert bad.startswith("INVALID_ARGUMENT: base64: not valid base64")
            over = MCP_ARTIFACT_MAX_BYTES + 1
            big = await mate.error("put_artifact", task_id=task_id, name="big.txt", text="a" * over)
            assert big.startswith(f"INVALID_ARGUMENT: text: {over} bytes is over the 4 MiB limit")
            big64 = base64.b64encode(b"\0" * over).decode()
            assert "over the 4 MiB limit" in await mate.error("put_artifact", task_id=task_id, name="b", base64=big64)
            escape = await mate.error("put_artifact", task_id=task_id, name="../up.txt", text="x")
            assert escape.startswith("INVALID_ARGUMENT:") and "header.name" in escape
            typed = await mate.error("put_artifact", task_id=task_id, name="a.txt", text="x", media_type="nope")
            assert typed.startswith("INVALID_ARGUMENT:") and "header.media_type" in typed
            assert (await mate.error("put_artifact", task_id=other, name="a.txt", text="x")).startswith("NOT_HELD:")
            assert (await mate.error("get_artifact", task_id=task_id, name="a.txt")).startswith("PERMISSION_DENIED:")

            assert (await lead.error("get_artifact", task_id=task_id, name="a.txt")).startswith("NOT_FOUND:")
            assert (await lead.error("get_artifact", task_id=f"{name}-never", name="a")).startswith("NOT_FOUND:")
            assert (await lead.error("put_artifact", task_id=task_id, name="a", text="x")).startswith(
                "PERMISSION_DENIED:"
            )

    asyncio.run(scenario())
    assert board.get_task(task_id).artifacts == ()


def test_a_file_over_4_mib_is_not_read_through_mcp(tmp_path: Path) -> None:
    with corral.Lead.launch(tmp_path / "state") as board:
        secrets = Secrets({board.token})
        new = board.add_teammate("ann")
        secrets.tokens.add(new.token)
        board.create_tasks([corral.TaskSpec("t")])
        with corral.Teammate.connect(board.address, new.token) as ann:
            events = ann.idle()
            claim = next(events)
            assert isinstance(claim, corral.Claim)
            claim.put_artifact("big.log", b"x" * (MCP_ARTIFACT_MAX_BYTES + 1), media_type="text/plain")
            claim.complete("ok")
            events.close()

        async def scenario() -> None:
            async with bridge_agent(board.address, board.token, secrets) as lead:
                refused = await lead.error("get_artifact", task_id="t", name="big.log")
                assert refused.startswith("RESOURCE_EXHAUSTED:") and "corral artifacts get t big.log -o FILE" in refused

        asyncio.run(scenario())


def test_textual_media_types() -> None:
    for kind in ("text/plain", "text/x-diff", "application/json", "application/ld+json", "image/svg+xml"):
        assert is_textual(kind), kind
    for kind in ("application/octet-stream", "image/png", "application/zip"):
        assert not is_textual(kind), kind
