"""Channel construction and credentials, shared by the sync and async clients."""

from __future__ import annotations

import logging
import os
import time

import grpc
import grpc.aio

from corral._errors import CorralError, Unavailable

_log = logging.getLogger("corral.connect")

ADDRESS_ENV = "CORRAL_ADDRESS"
TOKEN_ENV = "CORRAL_TOKEN"

# Results and payloads may be 1 MiB each and a page of tasks holds many of
# them; 32 MiB leaves room without letting a bug allocate without bound.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024

# Keepalive pings notice a daemon whose host died or whose network dropped
# (a local daemon that exits closes the socket, which is noticed at once).
# `http2.max_pings_without_data` is deliberately left at its default of 2: a
# server with default settings counts more frequent pings on a silent stream
# as abuse and answers GOAWAY "too_many_pings", which would break every Idle
# stream that waits longer than a minute.
#
# Each client gets its own subchannels: gRPC otherwise shares them process-
# wide per address, so a fresh client to a restarted daemon inherits the old
# connection's failure and backoff and fails its first calls. Reconnect
# backoff is capped at 5 s (gRPC's default cap is 2 min) so a teammate finds
# a restarted daemon promptly; the SDK's own retries sit on top of this.
CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 0),
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 5_000),
)

# How long `Lead.connect`, `Teammate.connect` and `run_teammate` keep trying to reach
# the daemon before raising Unavailable.
DEFAULT_CONNECT_TIMEOUT = 60.0

# Unary calls get a deadline so a wedged daemon cannot hang a caller forever.
DEFAULT_RPC_TIMEOUT = 30.0


def bearer_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying `token` as the bearer credential."""
    return (("authorization", f"Bearer {token}"),)


def open_channel(address: str, *, root_certificates: bytes | None = None) -> grpc.Channel:
    """A sync channel to `address` (`unix:/path` or `host:port`); TLS when a CA is given."""
    if root_certificates is not None:
        credentials = grpc.ssl_channel_credentials(root_certificates)
        return grpc.secure_channel(address, credentials, options=CHANNEL_OPTIONS)
    return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)


def open_aio_channel(address: str, *, root_certificates: bytes | None = None) -> grpc.aio.Channel:
    """A `grpc.aio` channel to `address`; TLS when a CA is given."""
    if root_certificates is not None:
        credentials = grpc.ssl_channel_credentials(root_certificates)
        return grpc.aio.secure_channel(address, credentials, options=CHANNEL_OPTIONS)
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)


def resolve_credentials(address: str | None, token: str | None) -> tuple[str, str]:
    """The address and token to use, falling back to CORRAL_ADDRESS / CORRAL_TOKEN."""
    address = address or os.environ.get(ADDRESS_ENV, "")
    token = token or os.environ.get(TOKEN_ENV, "")
    missing = [name for name, value in ((ADDRESS_ENV, address), (TOKEN_ENV, token)) if not value]
    if missing:
        raise CorralError(
            f"no daemon to connect to: pass address= and token=, or set {' and '.join(missing)} "
            "(the Lead gets both from Lead.teammate_env)"
        )
    return address, token.strip()


def teammate_env(address: str, token: str) -> dict[str, str]:
    """The environment variables a teammate process needs to connect."""
    return {ADDRESS_ENV: address, TOKEN_ENV: token}


def unreachable_warning(address: str, budget: float) -> None:
    """Log, once per outage, that the daemon cannot be reached and for how long we try."""
    _log.warning("cannot reach corrald at %s: retrying for %g s", address, budget)


def unreachable_error(address: str, budget: float, detail: str = "") -> Unavailable:
    """The Unavailable raised once the retry budget is spent: it names the address."""
    why = f": {detail}" if detail else ""
    return Unavailable(
        f"cannot reach corrald at {address}: gave up after {budget:g} s{why}", code=grpc.StatusCode.UNAVAILABLE
    )


# A call that every daemon answers at once once connected, whatever the credential:
# any answer (even UNAUTHENTICATED or UNIMPLEMENTED) proves the daemon is reachable.
_PROBE = "/grpc.health.v1.Health/Check"
_UNREACHED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
# A first attempt that has no answer by then (a host that drops packets) is a failure too.
FIRST_PROBE_TIMEOUT = 5.0


async def async_reach(channel: grpc.aio.Channel, address: str, token: str, budget: float) -> None:
    """Wait until the daemon at `channel` answers: warn at the first failed connection,
    raise Unavailable naming the address after `budget` seconds. A budget of 0 does not
    wait (the first call finds out)."""
    if budget <= 0:
        return
    probe: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(_PROBE)
    deadline = time.monotonic() + budget
    try:  # the first attempt fails fast when nothing listens there
        await probe(b"", timeout=min(budget, FIRST_PROBE_TIMEOUT), metadata=bearer_metadata(token))
        return
    except grpc.aio.AioRpcError as error:
        if error.code() not in _UNREACHED:
            return
    unreachable_warning(address, budget)
    try:
        await probe(
            b"", timeout=max(deadline - time.monotonic(), 0.0), metadata=bearer_metadata(token), wait_for_ready=True
        )
    except grpc.aio.AioRpcError as error:
        if error.code() in _UNREACHED:
            raise unreachable_error(address, budget) from None


def reach(channel: grpc.Channel, address: str, token: str, budget: float) -> None:
    """`async_reach` for a sync channel."""
    if budget <= 0:
        return
    probe: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(_PROBE)
    deadline = time.monotonic() + budget
    try:
        probe(b"", timeout=min(budget, FIRST_PROBE_TIMEOUT), metadata=bearer_metadata(token))
        return
    except grpc.RpcError as error:
        if error.code() not in _UNREACHED:
            return
    unreachable_warning(address, budget)
    try:
        probe(b"", timeout=max(deadline - time.monotonic(), 0.0), metadata=bearer_metadata(token), wait_for_ready=True)
    except grpc.RpcError as error:
        if error.code() in _UNREACHED:
            raise unreachable_error(address, budget) from None
