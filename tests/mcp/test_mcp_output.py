"""A task's live output through the bridge, in-process against a real daemon: a
teammate appends to the output of a task it holds (append_output), the Lead reads it a
page at a time (read_output), reading the task once a call to label it; bad input and
the output limit are isError results, and a refused append stores nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import corral
from corral import aio
from corral.mcp_bridge.output_tools import READ_OUTPUT_MAX_BYTES

from .mcpkit import Secrets, bridge_agent

pytestmark = pytest.mark.timeout(60)


def _stored(board: corral.Lead, task_id: str) -> bytes:
    return b"".join(chunk.data for chunk in board.tail_output(task_id, follow=False))


@pytest.mark.parametrize("transport", ["session", "idle"])
def test_a_teammate_appends_and_the_lead_reads_it_to_the_end(board, secrets, mint, monkeypatch, transport) -> None:
    monkeypatch.setenv("CORRAL_TRANSPORT", transport)
    name, token = mint(roles=[f"out-{transport}"])
    task_id = f"{name}-work"
    board.create_tasks([corral.TaskSpec(task_id, required_role=f"out-{transport}")])

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, token, secrets) as mate,
            bridge_agent(board.address, board.token, secrets) as lead,
        ):
            assert (await mate.ok("next_item", wait_seconds=5))["claim"]["task_id"] == task_id
            first = await mate.ok("append_output", task_id=task_id, text="trying the build\n")
            assert {k: first[k] for k in ("task_id", "attempt", "appended", "size")} == {
                "task_id": task_id,
                "attempt": 1,
                "appended": 17,
                "size": 17,
            }
            assert (await mate.ok("append_output", task_id=task_id, text="é\n"))["size"] == 20

            read = await lead.ok("read_output", task_id=task_id)
            assert read["output"] == {"from": name, "role": "teammate", "text": "trying the build\né\n"}
            assert (read["attempt"], read["offset"], read["next_offset"], read["ended"]) == (1, 0, 20, False)
            later = await lead.ok("read_output", task_id=task_id, offset=20)
            assert (later["output"]["text"], later["next_offset"], later["ended"]) == ("", 20, False)

            await mate.ok("complete_task", task_id=task_id, result="built")
            done = await lead.ok("read_output", task_id=task_id, offset=17, attempt=1)
            assert (done["output"]["text"], done["next_offset"], done["ended"]) == ("é\n", 20, True)

    asyncio.run(scenario())


def test_each_read_output_reads_the_task_once(board, secrets, mint, monkeypatch) -> None:
    name, token = mint(roles=["once"])
    task_id = f"{name}-once"
    board.create_tasks([corral.TaskSpec(task_id, required_role="once")])
    fetched: list[str] = []
    get_task = aio.Lead.get_task

    async def counted(self: aio.Lead, task_id: str) -> corral.Task:
        fetched.append(task_id)
        return await get_task(self, task_id)

    monkeypatch.setattr(aio.Lead, "get_task", counted)  # the Lead bridge's reads, counted

    async def read(lead, **args) -> tuple:
        fetched.clear()
        page = await lead.ok("read_output", task_id=task_id, **args)
        assert fetched == [task_id], f"{args}: the task was read {len(fetched)} times"
        assert page["output"]["from"] == name
        return page["attempt"], page["offset"], page["next_offset"], page["ended"], page["output"]["text"]

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, token, secrets) as mate,
            bridge_agent(board.address, board.token, secrets) as lead,
        ):
            await mate.ok("next_item", wait_seconds=5)
            await mate.ok("append_output", task_id=task_id, text="abc")
            assert await read(lead) == (1, 0, 3, False, "abc")  # the attempt the chunks named
            assert await read(lead, offset=3) == (1, 3, 3, False, "")  # none read: the task's latest
            assert await read(lead, offset=1, attempt=1) == (1, 1, 3, False, "bc")
            await mate.ok("complete_task", task_id=task_id, result="")
            assert await read(lead, offset=3) == (1, 3, 3, True, "")  # the end chunk names it

    asyncio.run(scenario())


def test_a_long_output_is_read_in_pages_that_never_cut_a_character(board, secrets, mint) -> None:
    name, token = mint(roles=["pages"])
    task_id = f"{name}-long"
    board.create_tasks([corral.TaskSpec(task_id, required_role="pages")])
    # 24 KiB - 1 ASCII bytes, then two-byte characters: the first page's last one is cut in the middle.
    text = "a" * (READ_OUTPUT_MAX_BYTES - 1) + "é" * 5000

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, token, secrets) as mate,
            bridge_agent(board.address, board.token, secrets) as lead,
        ):
            await mate.ok("next_item", wait_seconds=5)
            for start in range(0, len(text), 10_000):
                await mate.ok("append_output", task_id=task_id, text=text[start : start + 10_000])
            await mate.ok("complete_task", task_id=task_id, result="")
            pages, offset, ended = [], 0, False
            while not ended:
                page = await lead.ok("read_output", task_id=task_id, offset=offset)
                assert page["next_offset"] - offset <= READ_OUTPUT_MAX_BYTES
                assert "\ufffd" not in page["output"]["text"]
                pages.append(page["output"]["text"])
                offset, ended = page["next_offset"], page["ended"]
                assert len(pages) < 10
            assert pages[0] == "a" * (READ_OUTPUT_MAX_BYTES - 1)  # the cut character starts the next page
            assert "".join(pages) == text and offset == len(text.encode())

    asyncio.run(scenario())


def test_bad_appends_and_reads_are_errors_and_store_nothing(board, secrets, mint) -> None:
    name, token = mint(roles=["bad-out"])
    task_id, other = f"{name}-held", f"{name}-not-held"
    board.create_tasks([corral.TaskSpec(task_id, required_role="bad-out"), corral.TaskSpec(other, required_role="x")])

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, token, secrets) as mate,
            bridge_agent(board.address, board.token, secrets) as lead,
        ):
            await mate.ok("next_item", wait_seconds=5)
            await mate.ok("append_output", task_id=task_id, text="kept\n")
            assert (await mate.error("append_output", task_id=other, text="x")).startswith("NOT_HELD:")
            assert (await mate.error("append_output", task_id=task_id, text="")).startswith("INVALID_ARGUMENT: text")
            big = await mate.error("append_output", task_id=task_id, text="é" * 40_000)  # 80,000 bytes
            assert big.startswith("INVALID_ARGUMENT: text: 80000 bytes is over the 64 KiB limit")
            forged = await mate.error("append_output", task_id=task_id, text="x", claim_token="t")
            assert forged.startswith("INVALID_ARGUMENT: claim_token: not an argument")
            assert (await mate.error("read_output", task_id=task_id)).startswith("PERMISSION_DENIED:")

            assert (await lead.error("read_output", task_id=f"{name}-never")).startswith("NOT_FOUND:")
            assert (await lead.error("read_output", task_id=other)).startswith("NOT_FOUND:")  # never claimed
            assert (await lead.error("read_output", task_id=task_id, attempt=7)).startswith("NOT_FOUND:")
            past = await lead.error("read_output", task_id=task_id, offset=99)
            assert past.startswith("INVALID_ARGUMENT:") and "offset" in past
            assert (await lead.error("read_output", task_id=task_id, offset=-1)).startswith("INVALID_ARGUMENT: offset")
            assert (await lead.error("append_output", task_id=task_id, text="x")).startswith("PERMISSION_DENIED:")

    asyncio.run(scenario())
    assert _stored(board, task_id) == b"kept\n"


def test_an_append_past_the_attempts_limit_is_an_error_that_stores_nothing(tmp_path: Path) -> None:
    with corral.Lead.launch(tmp_path / "state", extra_args=["--max-output-bytes", "1000"]) as board:
        secrets = Secrets({board.token})
        new = board.add_teammate("ann")
        secrets.tokens.add(new.token)
        board.create_tasks([corral.TaskSpec("t")])

        async def scenario() -> None:
            async with bridge_agent(board.address, new.token, secrets) as mate:
                await mate.ok("next_item", wait_seconds=5)
                assert (await mate.ok("append_output", task_id="t", text="a" * 600))["size"] == 600
                refused = await mate.error("append_output", task_id="t", text="b" * 600)
                assert refused.startswith("OUTPUT_LIMIT:") and "nothing of it was stored" in refused
                await mate.ok("complete_task", task_id="t", result="done anyway")

        asyncio.run(scenario())
        assert _stored(board, "t") == b"a" * 600
        assert board.get_task("t").state is corral.TaskState.COMPLETED
