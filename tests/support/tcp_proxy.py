"""A TCP proxy in front of PostgreSQL, for the faults a network gives a daemon: a reply that
never comes back, or a connection that stops forwarding without a reset (a partition, a
paused VM). It listens on 127.0.0.1 and forwards each connection to one upstream address:
(host, port), or the path of a server's Unix socket.

- `blackhole()`: every connection open now stops forwarding in both directions; bytes are
  read and thrown away, so the peers' writes succeed and their reads wait forever, as
  behind a silent partition. Connections made afterwards are forwarded as usual.
- `drop_commit_reply()`: the next COMMIT a client sends is forwarded, the server's reply
  to it is read and thrown away, and then that connection is closed: the client's
  transaction committed, and all it learns is that its connection was lost.
- `swallow_commit()`: the next COMMIT a client sends never reaches the server, and only
  the client's side of that connection is closed: the server still holds the transaction
  open, in progress, as a server does until it notices its client is gone.
- `refuse_new(True)`: connections made from now on are closed as soon as they are
  accepted (a server out of reach); `refuse_new(False)` forwards them again. Open
  connections are untouched.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

_CHUNK = 65536


class _Link:
    """One client connection and its upstream one, pumped by two threads."""

    def __init__(self, proxy: TcpProxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.silent = threading.Event()  # blackholed: read and discard
        self.commit_sent = threading.Event()  # this link carried the COMMIT whose reply is dropped
        self.closed = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._pump, args=(self.client, self.upstream, True), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.upstream, self.client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        try:
            while not self.closed.is_set():
                data = source.recv(_CHUNK)
                if not data and self.silent.is_set():
                    return  # a silent link passes on no close either: the other side waits on
                if not data:
                    break
                if self.silent.is_set():
                    continue
                if from_client and b"COMMIT" in data and self.proxy.take_commit_to_swallow():
                    with contextlib.suppress(OSError):
                        self.client.shutdown(socket.SHUT_RDWR)
                    self.client.close()
                    self.silent.set()  # the upstream stays open, and hears nothing more
                    return
                if from_client and b"COMMIT" in data and self.proxy.take_commit_to_drop():
                    self.commit_sent.set()
                    sink.sendall(data)
                    continue
                if not from_client and self.commit_sent.is_set():
                    # The COMMIT's reply: thrown away, and the client's connection cut.
                    break
                sink.sendall(data)
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class TcpProxy:
    """Forwards 127.0.0.1:`port` to `upstream` until `close`."""

    def __init__(self, upstream: tuple[str, int] | str) -> None:
        self.upstream = upstream
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._links: list[_Link] = []
        self._lock = threading.Lock()
        self._drop_commits = 0
        self.dropped_commits = 0
        self._swallow_commits = 0
        self._refusing = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True, name="tcp-proxy")

    def start(self) -> TcpProxy:
        self._thread.start()
        return self

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            if self._refusing.is_set():
                client.close()
                continue
            try:
                upstream = self._connect_upstream()
            except OSError:
                client.close()
                continue
            link = _Link(self, client, upstream)
            with self._lock:
                self._links = [open_link for open_link in self._links if not open_link.closed.is_set()]
                self._links.append(link)
            link.start()

    def _connect_upstream(self) -> socket.socket:
        if isinstance(self.upstream, str):
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.settimeout(5)
            upstream.connect(self.upstream)
        else:
            upstream = socket.create_connection(self.upstream, timeout=5)
        upstream.settimeout(None)
        return upstream

    def blackhole(self) -> int:
        """Stops forwarding on every connection open now; returns how many."""
        with self._lock:
            links = [link for link in self._links if not link.closed.is_set()]
        for link in links:
            link.silent.set()
        return len(links)

    def refuse_new(self, refusing: bool) -> None:
        if refusing:
            self._refusing.set()
        else:
            self._refusing.clear()

    def drop_commit_reply(self, count: int = 1) -> None:
        """The next `count` COMMITs reach the server; their replies never reach the client."""
        with self._lock:
            self._drop_commits += count

    def swallow_commit(self) -> None:
        """The next COMMIT never reaches the server; its client's connection is closed."""
        with self._lock:
            self._swallow_commits += 1

    def take_commit_to_swallow(self) -> bool:
        with self._lock:
            if self._swallow_commits <= 0:
                return False
            self._swallow_commits -= 1
            return True

    def take_commit_to_drop(self) -> bool:
        with self._lock:
            if self._drop_commits <= 0:
                return False
            self._drop_commits -= 1
            self.dropped_commits += 1
            return True

    def cut_all(self) -> None:
        """Closes every connection open now (a reset each side sees at once)."""
        with self._lock:
            links, self._links = self._links, []
        for link in links:
            link.close()

    def close(self) -> None:
        self._server.close()
        self.cut_all()


@contextlib.contextmanager
def proxy_in_front_of(dsn: str) -> Iterator[tuple[TcpProxy, str]]:
    """A proxy in front of the PostgreSQL server `dsn` names (TCP or a Unix socket), and
    `dsn` rewritten to go through it."""
    from psycopg import conninfo  # noqa: PLC0415 (only the PostgreSQL tests use this)

    params = conninfo.conninfo_to_dict(dsn)
    host, port = str(params.pop("host", "") or "127.0.0.1"), int(params.pop("port", None) or 5432)
    upstream: tuple[str, int] | str = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)
    proxy = TcpProxy(upstream).start()
    try:
        user, database = params.get("user") or "postgres", params.get("dbname") or "postgres"
        yield proxy, f"postgresql://{user}@127.0.0.1:{proxy.port}/{database}"
    finally:
        proxy.close()
