"""A task's live output through the bridge: a teammate appends to the output of a task
it holds (append_output); the Lead reads any task's output a page at a time
(read_output), as text labelled with the teammate that wrote it."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Annotated

import pydantic

import corral
from corral import aio
from corral._outputbuffer import APPEND_MAX_BYTES

from .errors import ToolFailure
from .registry import BOOLEAN, INTEGER, STRING, Arguments, Count, Outcome, Progress, ToolSpec, obj

if TYPE_CHECKING:
    from .teammate_link import TeammateLink

__all__ = [
    "READ_OUTPUT_MAX_BYTES",
    "append_output_tool",
    "author_of",
    "read_output_tool",
]

# The daemon's limit on one append: refused here first, naming the field.
# The most output one read_output answer carries: what fits the model-visible text of a
# result (32 KiB, rendering.py) beside the rest of the answer. Page on with next_offset.
READ_OUTPUT_MAX_BYTES = 24 * 1024

TaskId = Annotated[str, pydantic.Field(min_length=1, max_length=200)]
Attempt = Annotated[int, pydantic.Field(ge=0, le=2**31 - 1)]


class AppendOutputArgs(Arguments):
    task_id: TaskId
    text: Annotated[str, pydantic.Field(min_length=1, max_length=APPEND_MAX_BYTES)]


class ReadOutputArgs(Arguments):
    task_id: TaskId
    offset: Count = 0
    attempt: Attempt = 0


def append_output_tool(link: TeammateLink) -> ToolSpec:
    """append_output, for a teammate bridge."""

    async def append_output(args: AppendOutputArgs, progress: Progress) -> Outcome:
        size = len(args.text.encode("utf-8"))
        if size > APPEND_MAX_BYTES:
            raise ToolFailure(
                "INVALID_ARGUMENT", f"text: {size} bytes is over the 64 KiB limit of one append; send it in parts"
            )
        attempt, total = await link.append_output(args.task_id, args.text)
        return Outcome(
            f"appended {size} bytes to the output of task {args.task_id}, attempt {attempt} ({total} bytes now)",
            {"task_id": args.task_id, "attempt": attempt, "appended": size, "size": total},
        )

    return ToolSpec(
        "append_output",
        "Append text (UTF-8, at most 64 KiB a call) to the live output of a task you hold, which the Lead and "
        "the board follow as you work: what you are trying, what a command printed. Answers with the attempt "
        "and the output's size in bytes after it; an attempt keeps at most the daemon's limit (16 MiB unless "
        "set otherwise: OUTPUT_LIMIT past it, nothing stored).",
        AppendOutputArgs,
        obj(
            ["task_id", "attempt", "appended", "size"], task_id=STRING, attempt=INTEGER, appended=INTEGER, size=INTEGER
        ),
        append_output,
    )


def read_output_tool(lead: aio.Lead) -> ToolSpec:
    """read_output, for a Lead bridge."""

    async def read_output(args: ReadOutputArgs, progress: Progress) -> Outcome:
        page, attempt, ended = await _read_page(lead, args)
        whole = _whole_characters(page, more=not ended)
        next_offset = args.offset + len(whole)
        # The task once a call: the attempt it names when none was read, and its author.
        task: corral.Task | None
        if attempt == 0:  # nothing stored from the offset yet: name the attempt all the same
            task = await lead.get_task(args.task_id)
            attempt = _latest_attempt(task)
        else:
            task = await _task_if_any(lead, args.task_id)
        author = author_of(task, attempt)
        content = {
            "task_id": args.task_id,
            "attempt": attempt,
            "offset": args.offset,
            "next_offset": next_offset,
            "ended": ended and next_offset == args.offset + len(page),
            "output": {"from": author, "role": "teammate", "text": whole.decode("utf-8", errors="replace")},
        }
        if content["ended"]:
            then = "the attempt has ended: this is all of it"
        else:
            then = f"more may come: call again with offset={next_offset}"
        return Outcome(f"{len(whole)} bytes of task {args.task_id}'s output (attempt {attempt}); {then}", content)

    return ToolSpec(
        "read_output",
        "A task's live output (what its holder appended as it worked), from byte offset: at most 24 KiB an "
        "answer, as UTF-8 text (invalid bytes replaced) labelled with the teammate that wrote it. attempt is "
        "the attempt number (0: the latest). Continue with offset=next_offset; ended says the attempt is over "
        "and nothing more will come.",
        ReadOutputArgs,
        obj(
            ["task_id", "attempt", "offset", "next_offset", "ended", "output"],
            task_id=STRING,
            attempt=INTEGER,
            offset=INTEGER,
            next_offset=INTEGER,
            ended=BOOLEAN,
            output={"type": "object"},
        ),
        read_output,
        read_only=True,
    )


async def _read_page(lead: aio.Lead, args: ReadOutputArgs) -> tuple[bytes, int, bool]:
    """Up to READ_OUTPUT_MAX_BYTES of stored output from the offset, the attempt it
    belongs to (0 when nothing was read), and whether the attempt ended with it (the end read)."""
    page = bytearray()
    attempt, ended = args.attempt, False
    chunks = lead.tail_output(args.task_id, attempt=args.attempt, offset=args.offset, follow=False, reconnect_timeout=0)
    async with contextlib.aclosing(chunks):
        async for chunk in chunks:
            attempt, ended = chunk.attempt, chunk.end
            page += chunk.data
            if len(page) >= READ_OUTPUT_MAX_BYTES:
                break
    if len(page) > READ_OUTPUT_MAX_BYTES:
        return bytes(page[:READ_OUTPUT_MAX_BYTES]), attempt, False
    return bytes(page), attempt, ended


def _whole_characters(page: bytes, *, more: bool) -> bytes:
    """`page` without a UTF-8 character cut at its end (the next page starts with it),
    unless that would leave nothing or no more bytes come."""
    if not more or not page:
        return page
    for back in range(1, min(4, len(page)) + 1):
        byte = page[-back]
        if byte < 0x80:
            return page  # ASCII: nothing cut
        if byte >= 0xC0:  # the lead byte of the last character
            needed = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return page if back >= needed else (page[:-back] or page)
    return page


def _latest_attempt(task: corral.Task) -> int:
    return max((entry.attempt for entry in task.attempts), default=task.attempt)


async def _task_if_any(lead: aio.Lead, task_id: str) -> corral.Task | None:
    """The task, or None when it cannot be read now (its author is then just "teammate")."""
    with contextlib.suppress(corral.CorralError):
        return await lead.get_task(task_id)
    return None


def author_of(task: corral.Task | None, attempt: int) -> str:
    """The teammate whose claim of `task` has this attempt number (the latest such)."""
    owners = [entry.owner for entry in task.attempts if entry.attempt == attempt] if task is not None else []
    return owners[-1] if owners else "teammate"
