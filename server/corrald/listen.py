"""Where the daemon listens: a Unix socket (the default) or TCP, which needs TLS off loopback."""

from __future__ import annotations

import ipaddress
import os
import pathlib
import ssl

import grpc

from .config import ConfigError

UNIX_PATH_MAX = 107  # sun_path holds 108 bytes including the terminating NUL


def _is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(
    server: grpc.aio.Server,
    listen: str | None,
    tls_cert: pathlib.Path | None,
    tls_key: pathlib.Path | None,
    socket_default: pathlib.Path,
) -> str:
    """Adds the listening port to `server` and returns the address clients use."""
    listen = listen or f"unix:{socket_default}"
    credentials = None
    if tls_cert or tls_key:
        if not (tls_cert and tls_key):
            raise ConfigError("--tls-cert and --tls-key go together")
        credentials = grpc.ssl_server_credentials([(tls_key.read_bytes(), tls_cert.read_bytes())])
    if listen.startswith("unix:"):
        path = pathlib.Path(listen.removeprefix("unix:")).absolute()
        if len(os.fsencode(path)) > UNIX_PATH_MAX:
            raise ConfigError(
                f"socket path {path} is longer than {UNIX_PATH_MAX} bytes (a Unix socket limit); "
                "use a shorter --state-dir or --listen unix:PATH"
            )
        if path.exists() or path.is_symlink():
            path.unlink()  # stale socket of a dead daemon: we hold the state lock
        address = f"unix:{path}"
        if _add_port(server, address, None) == 0:
            raise ConfigError(f"cannot listen on {address}")
        os.chmod(path, 0o600)
        return address
    host, _, port = listen.rpartition(":")
    if not port.isdigit():
        raise ConfigError(f"--listen must be unix:PATH or HOST:PORT, not {listen!r}")
    if credentials is None and not _is_loopback(host):
        raise ConfigError(f"listening on non-loopback {host!r} requires --tls-cert and --tls-key")
    bound = _add_port(server, listen, credentials)
    if bound == 0:
        raise ConfigError(f"cannot listen on {listen} (in use?)")
    return f"{host}:{bound}"


def _add_port(server: grpc.aio.Server, address: str, credentials: grpc.ServerCredentials | None) -> int:
    """The bound port, or 0: grpcio reports a failed bind by raising or by returning 0."""
    try:
        if credentials is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, credentials)
    except RuntimeError:
        return 0


def web_address(
    spec: str, tls_cert: pathlib.Path | None, tls_key: pathlib.Path | None
) -> tuple[str, int, ssl.SSLContext | None]:
    """`--web HOST:PORT` (or `:PORT`, or `PORT`: host 127.0.0.1) as host, port and the TLS
    context of `--tls-cert/--tls-key`; a non-loopback host without them is refused."""
    host, _, port = spec.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"--web must be HOST:PORT, not {spec!r}")
    context = None
    if tls_cert or tls_key:
        if not (tls_cert and tls_key):
            raise ConfigError("--tls-cert and --tls-key go together")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(tls_cert, tls_key)
    if context is None and not _is_loopback(host):
        raise ConfigError(f"--web on non-loopback {host!r} requires --tls-cert and --tls-key")
    return host, int(port), context
