"""`POST /api/actions/{name}` with `--web-actions`: the Lead's writes from the page.

Each action builds the RPC's request and calls the LeadService method the RPC
calls, so a page's approve is the CLI's approve: same checks, same errors.
The guard refuses these routes without `--web-actions` (405); here a request
must come from a lead session, from this board's own origin, and carry the
session's CSRF token in `X-Corral-CSRF` (403 otherwise).
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from google.protobuf import duration_pb2

from corral.v1 import corral_pb2 as pb

from .. import errors
from ..credentials import Identity
from ..service.lead import LeadServicer
from .config import BODY_BYTES_MAX
from .guard import json_error, same_origin
from .sessions import Session

CSRF_HEADER = "X-Corral-CSRF"

_STATUS_OF: tuple[tuple[type[errors.CorralError], int], ...] = (
    (errors.InvalidArgument, 400),
    (errors.NotFound, 404),
    (errors.AlreadyExists, 409),
    (errors.ClaimError, 409),
    (errors.FailedPrecondition, 409),
    (errors.PermissionDenied, 403),
    (errors.Unauthenticated, 401),
    (errors.Overloaded, 503),
    (errors.Unavailable, 503),
)


def http_status(error: errors.CorralError) -> int:
    for kind, status in _STATUS_OF:
        if isinstance(error, kind):
            return status
    return 500


def _text(body: dict[str, Any], key: str) -> str:
    value = body.get(key, "")
    if not isinstance(value, str):
        raise errors.InvalidArgument(key, "must be a string")
    return value


# The largest value of the requests' int64 fields: JSON's integers have no bound, and
# protobuf refuses a larger one with a ValueError, which is no answer for a caller.
_INT64_MAX = 2**63 - 1


def _ids(body: dict[str, Any], key: str) -> list[str]:
    value = body.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise errors.InvalidArgument(key, "must be a list of task ids")
    return value


def _state(task: pb.Task) -> str:
    return pb.TaskState.Name(task.state).removeprefix("TASK_STATE_")


def _count(body: dict[str, Any], key: str) -> int:
    value = body.get(key, 0)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _INT64_MAX:
        raise errors.InvalidArgument(key, f"must be an integer from 0 to {_INT64_MAX}")
    return value


class Actions:
    def __init__(self, lead: LeadServicer) -> None:
        self._lead = lead
        self._by_name: dict[str, Callable[[dict[str, Any], Identity], Awaitable[dict[str, object]]]] = {
            "decide-plan": self._decide_plan,
            "cancel-task": self._cancel_task,
            "revoke-claim": self._revoke_claim,
            "answer-question": self._answer_question,
            "review-task": self._review_task,
            "decide-proposals": self._decide_proposals,
            "set-budget": self._set_budget,
            "request-shutdown": self._request_shutdown,
        }

    @property
    def names(self) -> list[str]:
        return sorted(self._by_name)

    async def serve(self, request: web.Request, session: Session) -> web.Response:
        if not same_origin(request):
            return json_error(403, "actions are taken from this board's own page only")
        sent = request.headers.get(CSRF_HEADER, "")
        if not sent or not hmac.compare_digest(sent, session.csrf):
            return json_error(403, f"missing or wrong {CSRF_HEADER} header")
        if not session.identity.is_lead:
            return json_error(403, "only the lead may act on the board")
        action = self._by_name.get(request.match_info["name"])
        if action is None:
            return json_error(404, "no such action")
        if request.content_length is not None and request.content_length > BODY_BYTES_MAX:
            return json_error(413, f"body larger than {BODY_BYTES_MAX} bytes")
        try:
            body = await request.json()
        except ValueError:
            return json_error(400, "the body must be a JSON object")
        if not isinstance(body, dict):
            return json_error(400, "the body must be a JSON object")
        try:
            return web.json_response(await action(body, session.identity))
        except errors.CorralError as error:
            return json_error(http_status(error), error.message)

    async def _decide_plan(self, body: dict[str, Any], identity: Identity) -> dict[str, object]:
        approve = body.get("approve")
        if not isinstance(approve, bool):
            raise errors.InvalidArgument("approve", "must be true or false")
        plan_id, feedback = _text(body, "plan_id"), _text(body, "feedback")
        request = pb.DecidePlanRequest(plan_id=plan_id, approve=approve, feedback=feedback)
        reply = await self._lead.DecidePlan(request, None, identity)
        return {"seq": reply.seq}

    async def _cancel_task(self, body: dict[str, Any], identity: Identity) -> dict[str, object]:
        reply = await self._lead.CancelTasks(pb.CancelTasksRequest(ids=[_text(body, "task_id")]), None, identity)
        return {"canceled": [task.id for task in reply.tasks]}

    async def _revoke_claim(self, body: dict[str, Any], identity: Identity) -> dict[str, object]:
        request = pb.RevokeClaimRequest(task_id=_text(body, "task_id"), reason=_text(body, "reason"))
        reply = await self._lead.RevokeClaim(request, None, identity)
        return {"task_id": reply.task.id}

    async def _answer_question(self, body: dict[str, Any], identity: Identity) -> dict[str, object]:
        request = pb.AnswerQuestionRequest(task_id=_text(body, "task_id"), answer=_text(body, "answer"))
        reply = await self._lead.AnswerQuestion(request, None, identity)
        return {"task_id": reply.task.id, "state": _state(reply.task)}

    async def _review_task(self, body: dict[str, Any], identity: Identity) -> dict[str, object]:
        approve = body.get("approve")
        if not isinstance(approve, bool):
            raise errors.InvalidArgument("approve", "must be true or false")
        request = pb.ReviewTaskRequest(
            task_id=_text(body, "task_id"), approve=approve, feedback=_text(body, "feedback")
        )
        reply = await self._lead.ReviewTask(request, None, identity)
        return {"task_id": reply.task.id, "state": _state(reply.task)}

    async def _decide_proposals(self, body: dict[str, Any], identity: Identity) -> dict[str, object]:
        approve = body.get("approve")
        if not isinstance(approve, bool):
            raise errors.InvalidArgument("approve", "must be true or false")
        request = pb.DecideProposalsRequest(
            task_ids=_ids(body, "task_ids"), approve=approve, feedback=_text(body, "feedback")
        )
        reply = await self._lead.DecideProposals(request, None, identity)
        # The named tasks first, then (rejecting) dependents canceled with them and split tasks freed.
        return {"tasks": [{"task_id": t.id, "state": _state(t)} for t in reply.tasks], "omitted": reply.omitted_count}

    async def _set_budget(self, body: dict[str, Any], identity: Identity) -> dict[str, object]:
        request = pb.SetBudgetRequest(
            teammate=_text(body, "teammate"),
            max_cost_micros=_count(body, "max_cost_micros"),
            max_tokens=_count(body, "max_tokens"),
        )
        reply = await self._lead.SetBudget(request, None, identity)
        return {"max_cost_micros": reply.budget.max_cost_micros, "max_tokens": reply.budget.max_tokens}

    async def _request_shutdown(self, body: dict[str, Any], identity: Identity) -> dict[str, object]:
        request = pb.RequestShutdownRequest(
            name=_text(body, "teammate"), reason=_text(body, "reason"), grace=duration_pb2.Duration(seconds=60)
        )
        reply = await self._lead.RequestShutdown(request, None, identity)
        return {"request_id": reply.request_id}
