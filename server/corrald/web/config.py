"""The web board's settings, frozen."""

from __future__ import annotations

import dataclasses
import ssl

# At most this many open event streams; one more is answered 503 with Retry-After.
FEED_CLIENTS_MAX = 64
# Of those, viewers together hold at most FEED_CLIENTS_MAX - FEED_LEAD_RESERVED (503
# past it) and each viewer at most FEED_PER_VIEWER (429 past it): no viewer, nor all
# of them, can keep the lead's board from streaming. The lead may use any free slot.
FEED_LEAD_RESERVED = 16
FEED_PER_VIEWER = 8
# The graph draws at most this many tasks; past it, the frontier (see store/overview.py).
GRAPH_NODES_MAX = 2000
SESSION_TTL_S = 12 * 3600
# Web sessions: the lead's own at most SESSIONS_LEAD_MAX, each viewer's at most
# SESSIONS_PER_VIEWER (a login past its own bound ends that identity's oldest session,
# never another's), all viewers' together at most SESSIONS_MAX - SESSIONS_LEAD_MAX
# (a viewer's login past it is refused, 503).
SESSIONS_MAX = 1024
SESSIONS_LEAD_MAX = 256
SESSIONS_PER_VIEWER = 32
LOGIN_FAILURES_PER_MINUTE = 5
TICKET_TTL_S = 120
URL_BYTES_MAX = 4096
HEADER_BYTES_MAX = 16 * 1024
BODY_BYTES_MAX = 64 * 1024


@dataclasses.dataclass(frozen=True)
class WebConfig:
    host: str = "127.0.0.1"
    port: int = 0
    actions: bool = False
    ssl_context: ssl.SSLContext | None = None
    graph_nodes_max: int = GRAPH_NODES_MAX
    feed_clients_max: int = FEED_CLIENTS_MAX
    feed_lead_reserved: int = FEED_LEAD_RESERVED
    feed_per_viewer: int = FEED_PER_VIEWER
    # Beat sent as an SSE comment so proxies and the browser keep the stream open.
    heartbeat_s: float = 15.0

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"
