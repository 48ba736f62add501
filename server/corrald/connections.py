"""How many connections the daemon holds, and how long one may stay silent.

gRPC Python shows the daemon calls, never connections: a connection that sends
nothing is invisible to it, and no hook lets it refuse one by its peer. So the
bounds live in gRPC core's channel arguments, sized here from the limit on open
files, which is raised as far as the system allows first (server/DESIGN.md,
"Connections and the calls gRPC core answers itself").
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger("corrald")

# Files the daemon keeps besides connections: the database, its WAL and index
# for every SQLite connection, the lock, logs, the metrics socket, the event
# loop's own descriptors. A daemon at rest holds about 40.
OWN_FILES_RESERVE = 128
# A connection that has not sent the HTTP/2 preface by then is closed; one
# with no call in flight for IDLE_CONNECTION_MS is sent GOAWAY and closed (a
# gRPC client reconnects on its next call without failing it).
HANDSHAKE_TIMEOUT_MS = 3_000
IDLE_CONNECTION_MS = 5_000


def raise_open_files_limit() -> int:
    """Raises the soft limit on open files to the hard limit; returns the limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == hard:
        log.info("open files limit is %s", "unlimited" if soft == resource.RLIM_INFINITY else soft)
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as error:
        log.warning("open files limit stays at %d: raising it to %d failed: %s", soft, hard, error)
        return soft
    log.info("open files limit raised from %d to %d", soft, hard)
    return hard


def connection_options(open_files_limit: int) -> tuple[tuple[str, int], ...]:
    """gRPC core's bounds on connections for a daemon that may hold `open_files_limit` files."""
    if open_files_limit == resource.RLIM_INFINITY:
        open_files_limit = 1 << 20
    return (
        ("grpc.server_handshake_timeout_ms", HANDSHAKE_TIMEOUT_MS),
        ("grpc.max_connection_idle_ms", IDLE_CONNECTION_MS),
        # Past it core closes a new connection at once, so the daemon's own
        # files never meet EMFILE however many connections arrive.
        ("grpc.max_allowed_incoming_connections", max(16, open_files_limit - OWN_FILES_RESERVE)),
    )
