"""The web board's aiohttp application and its site, on the daemon's own event loop.

Routes: the page (`/`, `/login`), the login posts, the snapshot and detail reads
under `/api`, the event stream, the drawer's output stream and artifact downloads,
and with `--web-actions` the actions. Pages without a session redirect to
`/login`; `/api` without one answers 401.
"""

from __future__ import annotations

import logging
import pathlib
import shlex
import time
from typing import Any

from aiohttp import web

from .. import errors
from ..board import Board
from ..credentials import Identity
from ..service import convert
from ..service.lead import LeadServicer
from ..wake import WakeHub
from . import shapes
from .actions import Actions, http_status
from .artifacts import download
from .config import BODY_BYTES_MAX, TICKET_TTL_S, WebConfig
from .feed import Feed
from .guard import allowed_hosts, guard, is_count, json_error, same_origin, set_answer_headers
from .output import OutputStreams
from .recent import HISTORY_PAGE_MAX
from .sessions import LoginLimiter, Session, Sessions, Tickets

log = logging.getLogger("corrald.web")

STATIC = pathlib.Path(__file__).resolve().parent / "static"
COOKIE = "corral_session"
TABLE_PAGE_MAX = 1000
SHUTDOWN_GRACE_S = 1.0  # for answers in flight when the daemon stops; streams are ended first
# aiohttp's own parser limits sit above the guard's, so an oversized URL or header
# reaches the guard and gets 414 or 431 rather than the parser's bare 400.
PARSER_LINE_BYTES_MAX = 32 * 1024


class WebBoard:
    def __init__(
        self,
        config: WebConfig,
        board: Board,
        hub: WakeHub,
        lead: LeadServicer,
        sessions_file: pathlib.Path | None = None,
        state_dir: pathlib.Path | None = None,
    ) -> None:
        self.config = config
        # Named in the answer to a spent login link: where a new one comes from.
        self._state_dir = state_dir
        self._board = board
        self.sessions = Sessions(path=sessions_file, still_valid=board.credentials.still_valid)
        self.tickets = Tickets()
        self.limiter = LoginLimiter()
        self.outputs = OutputStreams(board, hub, config)
        self.feed = Feed(board, hub, config, self.outputs.streams)
        self._hub = hub
        self._actions = Actions(lead)
        self._runner: web.AppRunner | None = None
        self.url: str | None = None
        board.viewer_removed.append(self._revoked)

    def _revoked(self, identity: Identity) -> None:
        self.sessions.revoke(identity)
        self.feed.end_for(identity)
        self.outputs.end_for(identity)

    # ------------------------------------------------------------ life

    def application(self) -> web.Application:
        app = web.Application(
            middlewares=[guard(allowed_hosts(self.config.host), self.config.actions)], client_max_size=BODY_BYTES_MAX
        )
        app.on_response_prepare.append(set_answer_headers)
        app.router.add_get("/", self._index)
        app.router.add_get("/login", self._login_page)
        app.router.add_post("/login", self._login)
        app.router.add_post("/login/ticket", self._mint_ticket)
        app.router.add_post("/logout", self._logout)
        app.router.add_get("/api/board", self._snapshot)
        app.router.add_get("/api/tasks", self._task_page)
        app.router.add_get("/api/tasks/{task_id}", self._task_detail)
        app.router.add_get("/api/tasks/{task_id}/output", self._output)
        # An artifact's name is a relative path: its `/`s are the route's too.
        app.router.add_get("/api/tasks/{task_id}/artifacts/{name:.+}", self._artifact)
        app.router.add_get("/api/events", self._events)
        app.router.add_get("/api/history", self._history)
        app.router.add_post("/api/actions/{name}", self._act)
        app.router.add_static("/static", STATIC, follow_symlinks=False, show_index=False)
        app.router.add_get("/favicon.ico", _no_icon)
        return app

    async def start(self) -> str:
        self._runner = web.AppRunner(
            self.application(),
            access_log=None,
            shutdown_timeout=SHUTDOWN_GRACE_S,
            max_line_size=PARSER_LINE_BYTES_MAX,
            max_field_size=PARSER_LINE_BYTES_MAX,
            # A board that closed its stream frees its place at once, not at the next write.
            handler_cancellation=True,
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port, ssl_context=self.config.ssl_context)
        await site.start()
        port = self._runner.addresses[0][1]
        host = self.config.host
        shown = f"[{host}]" if ":" in host else host
        self.url = f"{self.config.scheme}://{shown}:{port}"
        return self.url

    async def stop(self) -> None:
        """Ends every event stream, then the site (open requests get a short grace)."""
        self.outputs.end_for(None)
        await self.feed.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # ------------------------------------------------------------ sessions

    def _session(self, request: web.Request) -> Session | None:
        return self.sessions.find(request.cookies.get(COOKIE))

    def _api_session(self, request: web.Request) -> Session | web.Response:
        session = self._session(request)
        if session is None:
            return json_error(401, "log in first (missing, expired or revoked session)")
        return session

    async def _index(self, request: web.Request) -> web.StreamResponse:
        if self._session(request) is None:
            raise web.HTTPFound("/login")
        return web.FileResponse(STATIC / "index.html")

    async def _login_page(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html")

    async def _login(self, request: web.Request) -> web.Response:
        if request.headers.get("Origin") is not None and not same_origin(request):
            return json_error(403, "log in from this board's own page")
        peer = request.remote or ""
        wait_s = self.limiter.retry_after_s(peer)
        body = await _json_body(request)
        token, ticket = body.get("token"), body.get("ticket")
        identity: Identity | None = None
        if isinstance(token, str) and token:
            identity = self._board.credentials.authenticate(token, read_store=wait_s is None)
            if identity is not None and not (identity.is_lead or identity.is_viewer):
                identity = None  # a teammate's credential is for its work, not for the board
        elif isinstance(ticket, str) and ticket:
            identity = self.tickets.redeem(ticket)
        if identity is None:
            if wait_s is not None:
                return _too_many_failures(wait_s)
            self.limiter.failed(peer)
            log.info("refused a web login from %s", peer)
            if isinstance(ticket, str) and ticket and not (isinstance(token, str) and token):
                return json_error(401, self._spent_link())
            return json_error(401, "that token is not a lead or viewer credential of this board")
        session = self.sessions.open(identity)
        if session is None:
            return json_error(
                503,
                "every web session viewers may hold is taken (they end when they expire or their viewers"
                " log out or are removed); the lead's own are kept apart",
            )
        response = web.json_response({"ok": True})
        response.set_cookie(
            COOKIE,
            session.id,
            max_age=int(session.expires_at - time.time()),
            path="/",
            httponly=True,
            samesite="Strict",
            secure=self.config.ssl_context is not None,
        )
        log.info("web login of %s from %s", identity.name, peer)
        return response

    def _spent_link(self) -> str:
        where = shlex.quote(str(self._state_dir)) if self._state_dir is not None else "DIR"
        return (
            f"this login link was already used or has expired (a link opens one session, within"
            f" {TICKET_TTL_S // 60} minutes); get a new one with: corral web --state-dir {where}"
        )

    async def _mint_ticket(self, request: web.Request) -> web.Response:
        """A one-time login link's ticket, for a caller holding the lead's bearer credential."""
        peer = request.remote or ""
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        # Only the lead's credential mints, and the daemon holds it in memory: no read.
        given = token.strip() if scheme.lower() == "bearer" else ""
        identity = self._board.credentials.authenticate(given, read_store=False) if given else None
        if identity is None or not identity.is_lead:
            wait_s = self.limiter.retry_after_s(peer)
            if wait_s is not None:
                return _too_many_failures(wait_s)
            self.limiter.failed(peer)
            return json_error(401, "a login ticket needs the lead's credential")
        return web.json_response({"ticket": self.tickets.mint(identity)})

    async def _logout(self, request: web.Request) -> web.Response:
        session = self._session(request)
        if session is not None:
            if not same_origin(request):
                return json_error(403, "log out from this board's own page")
            self.sessions.close(request.cookies.get(COOKIE, ""))  # a restored session knows only its digest
        response = web.json_response({"ok": True})
        response.del_cookie(COOKIE, path="/")
        return response

    # ------------------------------------------------------------ reads

    async def _snapshot(self, request: web.Request) -> web.Response:
        session = self._api_session(request)
        if isinstance(session, web.Response):
            return session
        overview = await self._board.overview(self.config.graph_nodes_max)
        view = overview.picture
        return web.json_response(
            {
                "seq": view.seq,
                "task_count": view.task_count,
                "frontier": view.frontier,
                "graph_nodes_max": self.config.graph_nodes_max,
                "tasks": view.tasks,
                "problems": view.problems,
                "claims": view.claims,
                "plans": view.plans,
                "teammates": [shapes.teammate(t, view.last_activity_ms.get(t.name)) for t in view.teammates],
                "stats": shapes.stats(
                    overview.stats, self._hub.open_streams, self.feed.client_count, len(self.outputs.streams)
                ),
                "now_ms": self._board.clock.now_ms(),
                "session": {
                    "name": session.identity.name,
                    "lead": session.identity.is_lead,
                    "actions": self.config.actions and session.identity.is_lead,
                    "csrf": session.csrf,
                },
            }
        )

    async def _task_page(self, request: web.Request) -> web.Response:
        session = self._api_session(request)
        if isinstance(session, web.Response):
            return session
        after, limit = request.query.get("after", "0"), request.query.get("limit", "100")
        if not (is_count(after) and is_count(limit)) or not 0 < int(limit) <= TABLE_PAGE_MAX:
            return json_error(400, f"after must be a non-negative integer and limit within [1, {TABLE_PAGE_MAX}]")
        rows = await self._board.task_rows(int(after), int(limit) + 1)
        more = len(rows) > int(limit)
        rows = rows[: int(limit)]
        return web.json_response({"tasks": rows, "next_after": rows[-1]["seq"] if more else None})

    async def _task_detail(self, request: web.Request) -> web.Response:
        session = self._api_session(request)
        if isinstance(session, web.Response):
            return session
        try:
            record, attempts, waiting = await self._board.task_history(request.match_info["task_id"])
        except errors.CorralError as error:
            return json_error(http_status(error), error.message)
        message = convert.task(record, waiting)
        detail: dict[str, Any] = shapes.task(message)
        detail.update(
            artifacts=[shapes.artifact(artifact) for artifact in message.artifacts],
            description=shapes.preview(record.description),
            payload=shapes.preview(record.payload),
            result=shapes.preview(record.result),
            question=shapes.preview(record.question),
            review=shapes.review_policy(record.review),
            waiting_for=shapes.waiting_for(message),
            review_rounds=record.review_rounds,
            proposed_by=record.proposed_by,
            discovered_from=record.discovered_from,
            attempts=[
                {
                    "attempt": a.attempt,
                    "owner": a.owner,
                    "fence": a.fence,
                    "claim_ms": a.claim_ms,
                    "end_ms": a.end_ms,
                    "outcome": a.outcome.name if a.outcome is not None else None,
                    "error": a.error[: shapes.ERROR_CHARS],
                    "review_round": a.review_round,
                    "feedback": shapes.cut(a.feedback, shapes.EVENT_TEXT_CHARS),
                }
                for a in attempts
            ],
            fence=attempts[-1].fence if attempts and attempts[-1].end_ms is None else None,
        )
        return web.json_response(detail)

    async def _events(self, request: web.Request) -> web.StreamResponse:
        session = self._api_session(request)
        if isinstance(session, web.Response):
            return session
        return await self.feed.serve(request, session.identity)

    async def _output(self, request: web.Request) -> web.StreamResponse:
        """The task's live output, for its drawer (see `output`)."""
        session = self._api_session(request)
        if isinstance(session, web.Response):
            return session
        return await self.outputs.serve(request, session.identity)

    async def _artifact(self, request: web.Request) -> web.StreamResponse:
        """A task's artifact, as a download (see `artifacts`)."""
        session = self._api_session(request)
        if isinstance(session, web.Response):
            return session
        return await download(self._board, request)

    async def _history(self, request: web.Request) -> web.Response:
        """`?before=SEQ&limit=N`: the events before SEQ (default: all so far), newest first, for
        the Events panel of a page opened after them; `older` asks for the page before."""
        session = self._api_session(request)
        if isinstance(session, web.Response):
            return session
        end = await self._board.last_event_seq() + 1
        before, limit = request.query.get("before", str(end)), request.query.get("limit", "100")
        if not (is_count(before) and is_count(limit)) or not 0 < int(limit) <= HISTORY_PAGE_MAX:
            return json_error(400, f"before must be a non-negative integer and limit within [1, {HISTORY_PAGE_MAX}]")
        if int(before) > end:
            return json_error(400, "before is beyond the end of the event log")
        events, older = await self.feed.history(int(before), int(limit))
        # The events are JSON already (shaped once, as the stream sends them).
        text = '{"events": [' + ", ".join(shaped for _, shaped in events) + '], "older": ' + _json_int(older) + "}"
        return web.Response(text=text, content_type="application/json")

    async def _act(self, request: web.Request) -> web.Response:
        session = self._api_session(request)
        if isinstance(session, web.Response):
            return session
        return await self._actions.serve(request, session)


def _too_many_failures(wait_s: int) -> web.Response:
    return json_error(429, "too many failed logins from this address; try again later", {"Retry-After": str(wait_s)})


async def _no_icon(request: web.Request) -> web.Response:
    return web.Response(status=204)


def _json_int(value: int | None) -> str:
    return "null" if value is None else str(value)


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
