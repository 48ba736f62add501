"""Results along edges through a real daemon and the SDK, on both transports:
the claim of a task carries what its dependencies returned."""

from __future__ import annotations

import pytest

import corral

pytestmark = [pytest.mark.usefixtures("transport"), pytest.mark.timeout(30)]


def test_the_next_claim_carries_the_result_just_completed(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("draft"), corral.TaskSpec("review", depends_on=("draft",))])
    ann = lead.add_teammate("ann")
    with corral.Teammate.connect(lead.address, ann.token) as teammate:
        events = teammate.idle()
        try:
            draft = next(events)
            assert isinstance(draft, corral.Claim) and draft.dependency_results == {}
            draft.complete(b"the draft text")
            review = next(events)  # on Session, handed over with the completion's answer
            assert isinstance(review, corral.Claim) and review.task.id == "review"
            assert review.dependency_results == {"draft": b"the draft text"}
            assert review.dependency_results_omitted == ()
            review.complete(b"approved")
        finally:
            events.close()


def test_a_handler_reads_them_from_its_current_claim(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("a"), corral.TaskSpec("b"), corral.TaskSpec("sum", depends_on=("a", "b"))])
    ann = lead.add_teammate("ann")
    seen: dict[str, dict[str, bytes]] = {}

    def handler(task: corral.Task) -> bytes:
        claim = corral.current_claim()
        assert claim is not None
        seen[task.id] = dict(claim.dependency_results)
        return task.id.encode()

    summary = corral.run_teammate(handler, address=lead.address, token=ann.token, max_idle_polls=1, poll_interval=0.2)
    assert summary.completed == 3
    assert seen["sum"] == {"a": b"a", "b": b"b"}
