"""Questions to the Lead through the bridges, against a real daemon: a teammate asks
(`ask_lead`), the Lead sees it waiting (`board_summary`, `watch_events`) and answers
(`answer_question`), and the task's next claim shows the answer. Bad input is an
isError result that writes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import corral

from .mcpkit import Agent, bridge_agent

QUESTION = "Which database should the migration target: the old one or the new one?"
ANSWER = "The new one; leave the old one read-only."


async def eventually(probe: Callable[[], Awaitable[Any]], what: str, timeout: float = 10.0) -> Any:
    """Poll `probe` until it returns something true, within `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        found = await probe()
        if found:
            return found
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def cursor(lead: Agent) -> int:
    """The Watch log's end now (the cursor after every event so far)."""
    after = 0
    while True:
        page = await lead.ok("watch_events", after_seq=after, wait_seconds=1, limit=1000)
        if not page["events"]:
            return after
        after = page["next_after_seq"]


async def events_after(lead: Agent, after: int) -> list[dict[str, Any]]:
    return (await lead.ok("watch_events", after_seq=after, wait_seconds=1, limit=1000))["events"]


async def waiting(lead: Agent, task_id: str) -> dict[str, Any] | None:
    summary = await lead.ok("board_summary")
    return next((q for q in summary["questions_waiting"] if q["task_id"] == task_id), None)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("transport", ["session", "idle"])
def test_a_teammate_asks_the_lead_answers_and_the_next_claim_shows_the_answer(
    board, secrets, mint, monkeypatch, transport
) -> None:
    monkeypatch.setenv("CORRAL_TRANSPORT", transport)  # ask_lead as a Session op, or the unary call
    name, token = mint(roles=[f"ask-{transport}"])
    task_id = f"{name}-migrate"

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, board.token, secrets) as lead,
            bridge_agent(board.address, token, secrets) as mate,
        ):
            start = await cursor(lead)
            await lead.ok("create_tasks", tasks=[{"id": task_id, "required_role": f"ask-{transport}"}])
            first = await mate.ok("next_item", wait_seconds=5)
            assert first["kind"] == "claim" and first["claim"]["task_id"] == task_id
            assert "answers" not in first["claim"]  # no question asked on it yet

            asked = await mate.ok("ask_lead", task_id=task_id, question=QUESTION)
            assert (asked["task_id"], asked["state"]) == (task_id, "NEEDS_INPUT")
            assert "next_item" in asked["hint"]
            status = await mate.ok("my_status")
            assert status["held_claims"] == []  # the claim ended with the question
            gone = await mate.error("complete_task", task_id=task_id, result="x")
            assert gone.startswith("NOT_HELD:")
            nothing = await mate.ok("next_item", wait_seconds=1)  # never claimed while it waits
            assert nothing["kind"] == "none", nothing

            # The Lead sees it waiting, with the question labelled as the asker's.
            shown = await eventually(
                lambda: _asked_by(lead, task_id, name), "the question waiting, labelled with its asker"
            )
            assert shown["question"]["text"] == QUESTION and shown["question"]["role"] == "teammate"
            summary = await lead.ok("board_summary")
            assert summary["tasks_by_state"]["NEEDS_INPUT"] >= 1
            assert summary["questions_waiting_total"] >= 1
            events = await events_after(lead, start)
            changes = [e for e in events if e["kind"] == "task_changed" and e["task_id"] == task_id]
            assert [e["state"] for e in changes][-1] == "NEEDS_INPUT"
            (asked_event,) = [e for e in events if e["kind"] == "question_asked"]
            assert (asked_event["task_id"], asked_event["asked_by"]) == (task_id, name)
            assert asked_event["question"]["text"] == QUESTION
            seen = await mate.ok("get_task", task_id=task_id)
            assert seen["task"]["state"] == "NEEDS_INPUT" and seen["task"]["question"]["text"] == QUESTION
            assert seen["task"]["attempts"][-1]["outcome"] == "ASKED"
            listed = await mate.ok("list_tasks", states=["NEEDS_INPUT"])
            assert task_id in [t["id"] for t in listed["tasks"]]

            answered = await lead.ok("answer_question", task_id=task_id, answer=ANSWER)
            assert (answered["task_id"], answered["state"]) == (task_id, "PENDING")
            assert await waiting(lead, task_id) is None
            after_answer = await events_after(lead, start)
            (answer_event,) = [e for e in after_answer if e["kind"] == "question_answered"]
            assert answer_event["answer"] == {**answer_event["answer"], "from": "lead", "text": ANSWER}

            again = await mate.ok("next_item", wait_seconds=5)
            assert again["kind"] == "claim" and again["claim"]["task_id"] == task_id, again
            (given,) = again["claim"]["answers"]
            assert given["question"] == {**given["question"], "from": name, "role": "teammate", "text": QUESTION}
            assert given["answer"] == {**given["answer"], "from": "lead", "role": "lead", "text": ANSWER}
            assert given["ask_time"] and given["answer_time"]
            assert again["claim"]["previous_attempt"]["outcome"] == "ASKED"
            assert again["claim"]["attempt"] == 1  # a question uses no attempt
            done = await mate.ok("complete_task", task_id=task_id, result="migrated to the new one")
            assert done["state"] == "COMPLETED"

    asyncio.run(scenario())


async def _asked_by(lead: Agent, task_id: str, name: str) -> dict[str, Any] | None:
    found = await waiting(lead, task_id)
    return found if found is not None and found["question"]["from"] == name else None


@pytest.mark.timeout(30)
def test_bad_questions_and_answers_are_refused_and_write_nothing(board, secrets, mint) -> None:
    name, token = mint(roles=["badask"])
    task_id, other = f"{name}-held", f"{name}-pending"

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, board.token, secrets) as lead,
            bridge_agent(board.address, token, secrets) as mate,
        ):
            await lead.ok("create_tasks", tasks=[{"id": task_id, "required_role": "badask"}])
            claim = await mate.ok("next_item", wait_seconds=5)
            assert claim["claim"]["task_id"] == task_id
            await lead.ok("create_tasks", tasks=[{"id": other, "required_role": "nobody-takes-it"}])
            start = await cursor(lead)
            cases: list[tuple[Agent, str, dict[str, Any], str, str]] = [
                (mate, "ask_lead", {"task_id": task_id}, "INVALID_ARGUMENT:", "question: missing"),
                (mate, "ask_lead", {"task_id": task_id, "question": ""}, "INVALID_ARGUMENT:", "question"),
                (mate, "ask_lead", {"task_id": task_id, "question": " \n\t "}, "INVALID_ARGUMENT:", "question"),
                # 40,000 characters (within the schema's bound) are 80,000 bytes of UTF-8: over 64 KiB.
                (mate, "ask_lead", {"task_id": task_id, "question": "é" * 40_000}, "INVALID_ARGUMENT:", "64 KiB"),
                (mate, "ask_lead", {"task_id": task_id, "question": "x" * 70_000}, "INVALID_ARGUMENT:", "question"),
                (mate, "ask_lead", {"task_id": "", "question": "why?"}, "INVALID_ARGUMENT:", "task_id"),
                (mate, "ask_lead", {"task_id": other, "question": "why?"}, "NOT_HELD:", other),
                (
                    mate,
                    "ask_lead",
                    {"task_id": task_id, "question": "why?", "claim_token": "guess"},
                    "INVALID",
                    "claim_token",
                ),
                (mate, "answer_question", {"task_id": task_id, "answer": "x"}, "PERMISSION_DENIED:", "answer_question"),
                (lead, "ask_lead", {"task_id": task_id, "question": "why?"}, "PERMISSION_DENIED:", "ask_lead"),
                (lead, "answer_question", {"task_id": task_id}, "INVALID_ARGUMENT:", "answer: missing"),
                (lead, "answer_question", {"task_id": "", "answer": "x"}, "INVALID_ARGUMENT:", "task_id"),
                (lead, "answer_question", {"task_id": task_id, "answer": 7}, "INVALID_ARGUMENT:", "answer"),
                (lead, "answer_question", {"task_id": task_id, "answer": "é" * 40_000}, "INVALID_ARGUMENT:", "64 KiB"),
                (lead, "answer_question", {"task_id": task_id, "answer": "x", "owner": "me"}, "INVALID", "owner"),
                (lead, "answer_question", {"task_id": f"{name}-never-made", "answer": "x"}, "NOT_FOUND:", ""),
                # A task with no question waiting: held (IN_PROGRESS), or PENDING.
                (lead, "answer_question", {"task_id": task_id, "answer": "x"}, "FAILED_PRECONDITION:", task_id),
                (lead, "answer_question", {"task_id": other, "answer": "x"}, "FAILED_PRECONDITION:", other),
            ]
            for agent, tool, arguments, reason, mentions in cases:
                text = await agent.error(tool, **arguments)
                assert text.startswith(reason) and mentions in text, (tool, arguments, text)
            assert await events_after(lead, start) == []  # nothing was written
            held = await mate.ok("my_status")
            assert [c["task_id"] for c in held["held_claims"]] == [task_id]  # still held, still renewed
            await mate.ok("complete_task", task_id=task_id, result="done without asking")

    asyncio.run(scenario())
    assert board.get_task(task_id).state is corral.TaskState.COMPLETED
    assert board.get_task(other).attempts == ()


@pytest.mark.timeout(60)
def test_past_twenty_questions_ask_lead_is_refused_and_the_claim_stays_held(board, secrets, mint) -> None:
    name, token = mint(roles=["curious"])
    task_id = f"{name}-puzzle"

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, board.token, secrets) as lead,
            bridge_agent(board.address, token, secrets) as mate,
        ):
            await lead.ok("create_tasks", tasks=[{"id": task_id, "required_role": "curious"}])
            for number in range(1, 21):
                claim = await mate.ok("next_item", wait_seconds=5)
                assert claim["kind"] == "claim" and len(claim["claim"].get("answers", [])) == number - 1
                await mate.ok("ask_lead", task_id=task_id, question=f"question {number}?")
                await lead.ok("answer_question", task_id=task_id, answer=f"answer {number}")
            claim = await mate.ok("next_item", wait_seconds=5)
            answers = claim["claim"]["answers"]
            assert [a["answer"]["text"] for a in answers] == [f"answer {n}" for n in range(1, 21)]  # oldest first
            refused = await mate.error("ask_lead", task_id=task_id, question="question 21?")
            assert refused.startswith("FAILED_PRECONDITION:") and "you still hold the task" in refused, refused
            held = await mate.ok("my_status")
            assert [c["task_id"] for c in held["held_claims"]] == [task_id]
            done = await mate.ok("complete_task", task_id=task_id, result="solved")
            assert done["state"] == "COMPLETED"

    asyncio.run(scenario())
