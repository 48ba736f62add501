"""Round trips that never end: a connection whose server stopped answering is cut.

TCP keepalives find a peer whose host is gone, but not one that still acknowledges
every packet and never replies: a paused server VM, a proxy or NAT that stopped
forwarding, a partition that drops only one direction. A psycopg call then waits
forever, and a writer thread waiting so never answers its callers. Each
`PgConnection` notes when its current round trip began; one thread per process
looks every quarter of a second and shuts the socket of any round trip older than
its connection's bound, so the call fails at once with a lost connection, which
the writer and the readers already handle (reconnect; a COMMIT in doubt is looked
up, store/postgres/storage.py). Shutting the socket, not closing it, leaves the file
descriptor to psycopg, which closes it as it marks the connection broken.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import weakref
from typing import Protocol

log = logging.getLogger("corrald.store")

_LOOK_EVERY_S = 0.25


class Watched(Protocol):
    reply_bound_s: float | None
    waiting_since: float | None  # time.monotonic() when the round trip in flight began

    def fileno(self) -> int: ...

    def severed(self) -> None:
        """Told, on the watchdog's thread, that its socket was cut."""


class _Watchdog:
    def __init__(self) -> None:
        self._watched: weakref.WeakSet[Watched] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.cut = 0  # connections cut, in this process

    def watch(self, conn: Watched) -> None:
        with self._lock:
            self._watched.add(conn)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="corral-pg-watchdog", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(_LOOK_EVERY_S)
            now = time.monotonic()
            with self._lock:
                watched = list(self._watched)
            for conn in watched:
                since, bound = conn.waiting_since, conn.reply_bound_s
                if since is not None and bound is not None and now - since > bound:
                    self._sever(conn, now - since)

    def _sever(self, conn: Watched, waited_s: float) -> None:
        conn.waiting_since = None  # once
        try:
            # A duplicate of the descriptor: shutting it down ends the socket for both,
            # closing it leaves psycopg's own.
            with socket.fromfd(conn.fileno(), socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        except (OSError, ValueError) as error:  # closed meanwhile: nothing left to cut
            log.debug("no socket to cut: %s", error)
            return
        self.cut += 1
        log.warning("no reply from PostgreSQL for %.1f s: the connection is cut and replaced", waited_s)
        try:
            conn.severed()
        except Exception:  # a broken listener must not stop the watchdog
            log.exception("a cut connection's listener failed")


WATCHDOG = _Watchdog()
