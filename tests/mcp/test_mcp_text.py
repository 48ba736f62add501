"""The bridge's text rules without a daemon: labels, the byte budget, base64, and the
reason-first wording of every domain error."""

from __future__ import annotations

import base64
import datetime

import pytest

import corral
from corral.mcp_bridge.errors import failure_from_error
from corral.mcp_bridge.rendering import RESULT_TEXT_MAX_BYTES, TextBudget, render_text


def test_text_is_labelled_and_cut_to_the_budget_on_a_character_boundary() -> None:
    budget = TextBudget(total=10)
    label = budget.labelled("héllo wörld!", source="ann", role="teammate")
    assert (label["from"], label["role"], label["encoding"]) == ("ann", "teammate", "utf-8")
    assert label["truncated"] is True and len(label["text"].encode()) <= 10
    assert label["next_offset"] == len(label["text"].encode()) and label["size"] == len("héllo wörld!".encode())
    assert budget.truncated and budget.left >= 0
    rest = TextBudget().labelled("héllo wörld!", source="ann", role="teammate", offset=label["next_offset"])
    assert label["text"] + rest["text"] == "héllo wörld!" and "truncated" not in rest


def test_bytes_that_are_not_utf8_come_as_base64() -> None:
    raw = bytes(range(256)) * 4
    label = TextBudget(total=400).labelled(raw, source="lead", role="lead")
    assert label["encoding"] == "base64" and label["truncated"] is True
    kept = base64.b64decode(label["data"])
    assert raw.startswith(kept) and len(label["data"]) <= 400


def test_the_text_rendering_never_exceeds_the_cap() -> None:
    text = render_text("summary", {"blob": "y" * (RESULT_TEXT_MAX_BYTES * 2)})
    assert len(text.encode()) <= RESULT_TEXT_MAX_BYTES and text.startswith("summary\n")


@pytest.mark.parametrize(
    ("error", "starts"),
    [
        (corral.LeaseExpired("x"), "LEASE_EXPIRED: task 't': the lease ended"),
        (corral.ClaimTokenMismatch("x"), "CLAIM_TOKEN_MISMATCH: task 't'"),
        (corral.TaskCanceled("x"), "TASK_CANCELED: task 't'"),
        (corral.ClaimRevoked("x"), "CLAIM_REVOKED: task 't'"),
        (corral.PermissionDenied("only the lead"), "PERMISSION_DENIED: only the lead"),
        (corral.Overloaded("busy", retry_after=datetime.timedelta(seconds=2)), "OVERLOADED: retry after 2 s"),
        (corral.Unavailable("down"), "UNAVAILABLE: the daemon cannot be reached"),
        (corral.Unauthenticated("revoked"), "UNAUTHENTICATED:"),
        (corral.NotFound("no task"), "NOT_FOUND: no task"),
        (
            corral.InvalidArgument("bad", field_violations=[corral.FieldViolation("tasks[0].id", "empty")]),
            "INVALID_ARGUMENT: task 't': tasks[0].id: empty",
        ),
    ],
)
def test_domain_errors_put_the_reason_first_then_what_to_do(error: corral.CorralError, starts: str) -> None:
    failure = failure_from_error(error, task_id="t")
    assert str(failure).startswith(starts), str(failure)
    if isinstance(error, corral.LeaseExpired):
        assert str(failure).endswith("do not complete it; call next_item")
