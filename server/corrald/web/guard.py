"""What every request passes before a handler sees it, and the headers every answer carries.

In order: the URL and the headers within their sizes (414, 431), the Host among
the allowed names against DNS rebinding (421), and the method: the board is
read-only, so anything but GET and HEAD is 405 except the login routes and,
with `--web-actions`, the actions. The answer headers (CSP and friends) are set
in `on_response_prepare`, so streams and errors carry them too.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable

from aiohttp import web

from .config import HEADER_BYTES_MAX, URL_BYTES_MAX

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; object-src 'none'; frame-ancestors 'none'; base-uri 'none'"
)
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
LOGIN_POSTS = frozenset({"/login", "/login/ticket", "/logout"})
ACTIONS_PREFIX = "/api/actions/"


def json_error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


def is_count(text: str) -> bool:
    """`text` is a non-negative integer of at most 18 digits (it fits an int64)."""
    return text.isascii() and text.isdigit() and len(text) <= 18


def _host_name(host_header: str) -> str:
    """The name in a Host header, without its port (`[::1]:80` -> `::1`)."""
    if host_header.startswith("["):
        return host_header[1:].partition("]")[0].lower()
    return host_header.rpartition(":")[0].lower() if host_header.count(":") == 1 else host_header.lower()


def allowed_hosts(configured: str) -> frozenset[str]:
    names = set(LOOPBACK_NAMES)
    if configured:
        names.add(configured.strip("[]").lower())
    try:
        if ipaddress.ip_address(configured.strip("[]")).is_unspecified:
            names.discard(configured.strip("[]").lower())  # 0.0.0.0 is no name a browser should send
    except ValueError:
        pass
    return frozenset(names)


def guard(hosts: frozenset[str], actions: bool) -> Callable:
    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if len(request.raw_path) > URL_BYTES_MAX:
            return json_error(414, f"URL longer than {URL_BYTES_MAX} bytes")
        if sum(len(name) + len(value) + 4 for name, value in request.raw_headers) > HEADER_BYTES_MAX:
            return json_error(431, f"headers larger than {HEADER_BYTES_MAX} bytes")
        if _host_name(request.headers.get("Host", "")) not in hosts:
            return json_error(421, "this board does not answer for that host name")
        if request.method not in ("GET", "HEAD"):
            allowed = request.method == "POST" and (
                request.path in LOGIN_POSTS or (actions and request.path.startswith(ACTIONS_PREFIX))
            )
            if not allowed:
                return json_error(405, "the board is read-only here", {"Allow": "GET, HEAD"})
        return await handler(request)

    return check


async def set_answer_headers(request: web.Request, response: web.StreamResponse) -> None:
    headers = response.headers
    # An answer that set a stricter policy of its own keeps it (an artifact's download).
    headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
    headers["X-Content-Type-Options"] = "nosniff"
    headers["Referrer-Policy"] = "no-referrer"
    headers["X-Frame-Options"] = "DENY"
    if request.path.startswith("/api/") or request.path.startswith("/login"):
        headers["Cache-Control"] = "no-store"


def same_origin(request: web.Request) -> bool:
    """The request's Origin is this board's own (scheme, host and port as it was reached)."""
    origin = request.headers.get("Origin")
    return origin is not None and origin == f"{request.scheme}://{request.headers.get('Host', '')}"
