"""Reviews before done through the bridges, against a real daemon: an author's result
waits IN_REVIEW, a reviewer's `next_item` gives it the review (the result, the author,
the round; never a claim token), `submit_review` rejects it with feedback (the author's
rework shows the rejected result and the feedback) or approves it; the Lead sees the
results it reviews in `board_summary` and decides them with `review_task`. Bad input is
an isError result that writes nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import corral

from .mcpkit import Agent, bridge_agent
from .test_mcp_questions import cursor, events_after, eventually


def _reviews(events: list[dict[str, Any]], task_id: str) -> list[tuple[bool, str, int, str]]:
    return [
        (e["approve"], e["reviewer"], e["round"], e["feedback"]["text"])
        for e in events
        if e["kind"] == "review_decided" and e["task_id"] == task_id
    ]


async def _lead_review(lead: Agent, task_id: str) -> dict[str, Any] | None:
    summary = await lead.ok("board_summary")
    return next((r for r in summary["reviews_waiting"] if r["task_id"] == task_id), None)


@pytest.mark.timeout(40)
@pytest.mark.parametrize("transport", ["session", "idle"])
def test_a_teammate_reviews_rejects_with_feedback_and_approves_the_rework(
    board, secrets, mint, monkeypatch, transport
) -> None:
    monkeypatch.setenv("CORRAL_TRANSPORT", transport)  # the verdict as a Session op, or the unary call
    author_name, author_token = mint("author", roles=[f"write-{transport}"])
    critic_name, critic_token = mint("critic", roles=[f"critic-{transport}"])
    task_id = f"{author_name}-essay"
    policy = {"reviewer_role": f"critic-{transport}", "max_rounds": 3}

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, board.token, secrets) as lead,
            bridge_agent(board.address, author_token, secrets) as author,
            bridge_agent(board.address, critic_token, secrets) as critic,
        ):
            start = await cursor(lead)
            spec = {"id": task_id, "required_role": f"write-{transport}", "review": policy}
            await lead.ok("create_tasks", tasks=[spec])
            work = await author.ok("next_item", wait_seconds=5)
            assert work["kind"] == "claim" and "rejected_result" not in work["claim"]
            assert work["claim"]["task"]["review"] == policy and work["claim"]["task"]["review_rounds"] == 0
            done = await author.ok("complete_task", task_id=task_id, result="draft one")
            assert done["state"] == "IN_REVIEW"

            # The reviewer gets the review: the result labelled as its author's, the author, the round.
            item = await critic.ok("next_item", wait_seconds=5)
            assert item["kind"] == "review", item
            review = item["review"]
            assert (review["task_id"], review["author"], review["round"]) == (task_id, author_name, 1)
            assert review["result"] == {**review["result"], "from": author_name, "role": "teammate"}
            assert review["result"]["text"] == "draft one"
            assert "submit_review" in item["hint"]
            assert not {key for key in review if "token" in key}
            status = await critic.ok("my_status")
            assert [(c["task_id"], c["kind"]) for c in status["held_claims"]] == [(task_id, "review")]
            wrong = await critic.error("complete_task", task_id=task_id, result="looks fine")
            assert wrong.startswith("INVALID_ARGUMENT:") and "submit_review" in wrong, wrong

            rejected = await critic.ok("submit_review", task_id=task_id, approve=False, feedback="Cite a source.")
            assert (rejected["task_id"], rejected["state"], rejected["approved"]) == (task_id, "PENDING", False)
            assert (await critic.ok("my_status"))["held_claims"] == []

            # The rework shows the rejected result and the reviewer's feedback.
            rework = await author.ok("next_item", wait_seconds=5)
            assert rework["kind"] == "claim" and rework["claim"]["task_id"] == task_id, rework
            claim = rework["claim"]
            assert claim["rejected_result"]["text"] == "draft one"
            previous = claim["previous_attempt"]
            assert (previous["outcome"], previous["owner"]) == ("REJECTED", critic_name)
            assert previous["feedback"] == {**previous["feedback"], "from": critic_name, "text": "Cite a source."}
            assert claim["attempt"] == 1  # a rejection uses no attempt
            assert claim["task"]["review_rounds"] == 1
            await author.ok("complete_task", task_id=task_id, result="draft two, with a source")

            again = await critic.ok("next_item", wait_seconds=5)
            assert again["kind"] == "review" and again["review"]["round"] == 2
            assert again["review"]["result"]["text"] == "draft two, with a source"
            approved = await critic.ok("submit_review", task_id=task_id, approve=True, feedback="Good.")
            assert (approved["state"], approved["approved"]) == ("COMPLETED", True)

            events = await events_after(lead, start)
            assert _reviews(events, task_id) == [
                (False, critic_name, 1, "Cite a source."),
                (True, critic_name, 2, "Good."),
            ]
            shown = (await author.ok("get_task", task_id=task_id))["task"]
            assert shown["state"] == "COMPLETED" and shown["result"]["text"] == "draft two, with a source"
            verdicts = [(a["owner"], a.get("verdict"), a["outcome"]) for a in shown["attempts"] if "verdict" in a]
            assert verdicts == [(critic_name, "reject", "REJECTED"), (critic_name, "approve", "COMPLETED")]

    asyncio.run(scenario())
    assert board.get_task(task_id).state is corral.TaskState.COMPLETED


@pytest.mark.timeout(40)
def test_the_lead_sees_the_results_it_reviews_in_board_summary_and_decides_them(board, secrets, mint) -> None:
    author_name, author_token = mint("author", roles=["lead-reviewed"])
    task_id, by_critic = f"{author_name}-plan", f"{author_name}-by-critic"

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, board.token, secrets) as lead,
            bridge_agent(board.address, author_token, secrets) as author,
        ):
            start = await cursor(lead)
            await lead.ok(
                "create_tasks",
                tasks=[
                    {"id": task_id, "required_role": "lead-reviewed", "review": {"max_rounds": 2}},
                    {
                        "id": by_critic,
                        "required_role": "lead-reviewed",
                        "priority": -1,
                        "review": {"reviewer_role": "nobody-reviews"},
                    },
                ],
            )
            for expected in (task_id, by_critic):
                work = await author.ok("next_item", wait_seconds=5)
                assert work["claim"]["task_id"] == expected, work
                await author.ok("complete_task", task_id=expected, result=f"result of {expected}")

            # Only the result whose reviewer is the Lead waits on it.
            waiting = await eventually(lambda: _lead_review(lead, task_id), "the review waiting for the lead")
            assert waiting["round"] == 1 and waiting["result"]["text"] == f"result of {task_id}"
            summary = await lead.ok("board_summary")
            assert by_critic not in [r["task_id"] for r in summary["reviews_waiting"]]
            assert summary["reviews_waiting_total"] == len(summary["reviews_waiting"]) >= 1
            assert summary["tasks_by_state"]["IN_REVIEW"] >= 2

            rejected = await lead.ok("review_task", task_id=task_id, approve=False, feedback="Add a rollback step.")
            assert (rejected["state"], rejected["review_rounds"]) == ("PENDING", 1)
            assert await _lead_review(lead, task_id) is None
            rework = await author.ok("next_item", wait_seconds=5)
            previous = rework["claim"]["previous_attempt"]
            assert previous["outcome"] == "REJECTED"
            assert previous["feedback"] == {**previous["feedback"], "from": "lead", "role": "lead"}
            assert previous["feedback"]["text"] == "Add a rollback step."
            assert rework["claim"]["rejected_result"]["text"] == f"result of {task_id}"
            await author.ok("complete_task", task_id=task_id, result="with a rollback step")
            again = await eventually(lambda: _lead_review(lead, task_id), "the rework waiting for the lead")
            assert again["round"] == 2 and again["result"]["text"] == "with a rollback step"
            approved = await lead.ok("review_task", task_id=task_id, approve=True)
            assert approved["state"] == "COMPLETED"
            # The Lead may decide a review a reviewer role was to give.
            other = await lead.ok("review_task", task_id=by_critic, approve=True, feedback="Fine by me.")
            assert other["state"] == "COMPLETED"
            assert _reviews(await events_after(lead, start), task_id) == [
                (False, "lead", 1, "Add a rollback step."),
                (True, "lead", 2, ""),
            ]

    asyncio.run(scenario())
    assert board.get_task(task_id).state is corral.TaskState.COMPLETED


@pytest.mark.timeout(40)
def test_bad_reviews_are_refused_and_write_nothing(board, secrets, mint) -> None:
    author_name, author_token = mint("author", roles=["bad-review-author"])
    critic_name, critic_token = mint("critic", roles=["bad-reviewer"])
    reviewed, held, pending = f"{author_name}-reviewed", f"{author_name}-held", f"{author_name}-pending"

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, board.token, secrets) as lead,
            bridge_agent(board.address, author_token, secrets) as author,
            bridge_agent(board.address, critic_token, secrets) as critic,
        ):
            policy = {"reviewer_role": "bad-reviewer"}
            await lead.ok(
                "create_tasks", tasks=[{"id": reviewed, "required_role": "bad-review-author", "review": policy}]
            )
            await author.ok("next_item", wait_seconds=5)
            await author.ok("complete_task", task_id=reviewed, result="to judge")
            assert (await critic.ok("next_item", wait_seconds=5))["kind"] == "review"
            await lead.ok(
                "create_tasks",
                tasks=[
                    {"id": held, "required_role": "bad-review-author", "review": policy},
                    {"id": pending, "required_role": "nobody-takes-it", "review": {}},
                ],
            )
            assert (await author.ok("next_item", wait_seconds=5))["claim"]["task_id"] == held  # IN_PROGRESS
            start = await cursor(lead)
            too_long = "é" * 40_000  # within the schema's 65,536 characters, but 80,000 bytes
            cases: list[tuple[Agent, str, dict[str, Any], str, str]] = [
                (critic, "submit_review", {"task_id": reviewed, "approve": False}, "INVALID_ARGUMENT:", "feedback"),
                (
                    critic,
                    "submit_review",
                    {"task_id": reviewed, "approve": False, "feedback": " \n "},
                    "INVALID_ARGUMENT:",
                    "feedback",
                ),
                (
                    critic,
                    "submit_review",
                    {"task_id": reviewed, "approve": True, "feedback": too_long},
                    "INVALID_ARGUMENT:",
                    "64 KiB",
                ),
                (
                    critic,
                    "submit_review",
                    {"task_id": reviewed, "approve": False, "feedback": "x" * 70_000},
                    "INVALID_ARGUMENT:",
                    "feedback",
                ),
                (critic, "submit_review", {"task_id": reviewed}, "INVALID_ARGUMENT:", "approve: missing"),
                (critic, "submit_review", {"task_id": "", "approve": True}, "INVALID_ARGUMENT:", "task_id"),
                (
                    critic,
                    "submit_review",
                    {"task_id": reviewed, "approve": True, "claim_token": "guess"},
                    "INVALID",
                    "claim_token",
                ),
                (critic, "submit_review", {"task_id": held, "approve": True}, "NOT_HELD:", held),
                (critic, "submit_review", {"task_id": f"{author_name}-none", "approve": True}, "NOT_HELD:", "none"),
                # A work claim the bridge holds is no review.
                (author, "submit_review", {"task_id": held, "approve": True}, "NOT_HELD:", held),
                (critic, "complete_task", {"task_id": reviewed, "result": "ok"}, "INVALID_ARGUMENT:", "submit_review"),
                (lead, "submit_review", {"task_id": reviewed, "approve": True}, "PERMISSION_DENIED:", "submit_review"),
                (critic, "review_task", {"task_id": reviewed, "approve": True}, "PERMISSION_DENIED:", "review_task"),
                (lead, "review_task", {"task_id": reviewed, "approve": False}, "INVALID_ARGUMENT:", "feedback"),
                (
                    lead,
                    "review_task",
                    {"task_id": reviewed, "approve": False, "feedback": too_long},
                    "INVALID_ARGUMENT:",
                    "64 KiB",
                ),
                (lead, "review_task", {"task_id": reviewed, "approve": "yes"}, "INVALID_ARGUMENT:", "approve"),
                (lead, "review_task", {"task_id": f"{author_name}-never", "approve": True}, "NOT_FOUND:", ""),
                # Not IN_REVIEW: held by its author, or PENDING.
                (lead, "review_task", {"task_id": held, "approve": True}, "FAILED_PRECONDITION:", held),
                (lead, "review_task", {"task_id": pending, "approve": True}, "FAILED_PRECONDITION:", pending),
            ]
            for agent, tool, arguments, reason, mentions in cases:
                text = await agent.error(tool, **arguments)
                assert text.startswith(reason) and mentions in text, (tool, arguments, text)
            assert await events_after(lead, start) == []  # nothing was written
            status = await critic.ok("my_status")
            assert [(c["task_id"], c["kind"]) for c in status["held_claims"]] == [(reviewed, "review")]
            approved = await critic.ok("submit_review", task_id=reviewed, approve=True)
            assert approved["state"] == "COMPLETED"
            await author.ok("release_task", task_id=held)

    asyncio.run(scenario())
    assert board.get_task(reviewed).state is corral.TaskState.COMPLETED
    assert board.get_task(pending).attempts == ()
