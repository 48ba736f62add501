"""Which wire a teammate client speaks: the Session stream, or Idle plus unary calls.

Unset, CORRAL_TRANSPORT means "auto": the client opens a Session stream and,
when the daemon answers UNIMPLEMENTED (one older than the Session RPC), uses
Idle and unary calls from then on. `session` insists on the Session stream
(UNIMPLEMENTED is an error); `idle` never tries it.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping

import grpc

from corral._errors import CorralError

__all__ = [
    "TRANSPORT_ENV",
    "SessionUnsupported",
    "Transport",
    "session_required_error",
    "transport_from_env",
]

TRANSPORT_ENV = "CORRAL_TRANSPORT"


class Transport(enum.Enum):
    AUTO = ""
    SESSION = "session"
    IDLE = "idle"


def transport_from_env(environ: Mapping[str, str] | None = None) -> Transport:
    """The transport CORRAL_TRANSPORT asks for; raises CorralError for a value it cannot be."""
    value = (os.environ if environ is None else environ).get(TRANSPORT_ENV, "")
    try:
        return Transport(value)
    except ValueError:
        raise CorralError(
            f"{TRANSPORT_ENV}={value!r} is not a transport: set it to 'session' or 'idle', "
            "or leave it unset to use the Session stream where the daemon offers it"
        ) from None


def session_required_error() -> CorralError:
    """What `CORRAL_TRANSPORT=session` meets on a daemon without the Session RPC."""
    return CorralError(
        f"the daemon does not offer the Session stream, and {TRANSPORT_ENV}=session forbids "
        "falling back to Idle: unset it (or set it to 'idle') for this daemon",
        code=grpc.StatusCode.UNIMPLEMENTED,
    )


class SessionUnsupported(CorralError):
    """Internal: the daemon answered the Session stream UNIMPLEMENTED; use Idle."""

    def __init__(self) -> None:
        super().__init__("the daemon does not offer the Session stream", code=grpc.StatusCode.UNIMPLEMENTED)
