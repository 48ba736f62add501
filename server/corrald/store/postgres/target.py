"""Which PostgreSQL board a daemon serves: the DSN, the schema, and their checks.

A board is one schema of one database. The DSN may carry a password; it is kept
here and never shown: every message that could repeat it goes through `scrub`.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re

from ...config import ConfigError

DEFAULT_SCHEMA = "corral"
DEFAULT_CONNECT_TIMEOUT_S = 30.0
# How long a transaction may stop making progress before it loses the board's write lock
# (docs/postgres.md, "When a daemon stops"): the server ends a session idle inside a
# transaction after this long, a writer waits this long for the lock before it tries
# again, and a round trip unanswered for twice this long has its connection cut.
DEFAULT_STALL_TIMEOUT_S = 5.0
DEFAULT_WRITERS = 4  # writer threads, each with a connection (writer.py)
MAX_WRITERS = 64
SCHEMES = ("postgresql://", "postgres://")
# A schema name corrald creates and quotes nowhere: lower case, as PostgreSQL folds it.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_SECURE_SSLMODES = frozenset({"require", "verify-full"})
_URI_PASSWORD = re.compile(r"(postgres(?:ql)?://[^:/@\s]*:)[^@\s]*@")
_KEYWORD_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def is_postgres(store: str) -> bool:
    """Whether a `--store` value names a PostgreSQL board (the alternative is the SQLite default)."""
    return store.startswith(SCHEMES)


def scrub(text: str) -> str:
    """`text` with any password of a DSN in it replaced by ***."""
    return _KEYWORD_PASSWORD.sub(r"\1***", _URI_PASSWORD.sub(r"\1***@", text))


@dataclasses.dataclass(frozen=True)
class PgTarget:
    """A checked DSN and schema: `PgTarget.parse` refuses what a daemon must not use."""

    dsn: str = dataclasses.field(repr=False)
    schema: str = DEFAULT_SCHEMA
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S

    @classmethod
    def parse(
        cls,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
        allow_insecure: bool = False,
    ) -> PgTarget:
        from psycopg import conninfo  # noqa: PLC0415 (the SQLite path imports nothing of psycopg)

        if not is_postgres(dsn):
            raise ConfigError("--store: a PostgreSQL DSN starts with postgresql://")
        try:
            params = conninfo.conninfo_to_dict(dsn)
        except Exception as error:  # psycopg raises ProgrammingError for a malformed DSN
            raise ConfigError(f"--store: malformed PostgreSQL DSN: {scrub(str(error)).strip()}") from None
        if not params.get("dbname"):
            raise ConfigError("--store: the DSN must name a database (postgresql://USER@HOST[:PORT]/DB)")
        if not _SCHEMA_NAME.fullmatch(schema):
            raise ConfigError(f"--pg-schema: {schema!r} is not a plain lower-case name (a-z, 0-9, _; 63 at most)")
        if not connect_timeout_s > 0:
            raise ConfigError("--pg-connect-timeout must be more than 0 seconds")
        if not 0.1 <= stall_timeout_s <= 3600:
            raise ConfigError("--pg-stall-timeout must be from 0.1 to 3600 seconds")
        hosts = [host for host in str(params.get("host") or "").split(",") if host]
        remote = [host for host in hosts if not _is_local(host)]
        if remote and params.get("sslmode") not in _SECURE_SSLMODES and not allow_insecure:
            raise ConfigError(
                f"--store: host {remote[0]} is not loopback: add sslmode=require or sslmode=verify-full to the DSN"
                " (or pass --pg-allow-insecure)"
            )
        return cls(dsn, schema, connect_timeout_s, stall_timeout_s)

    def shown(self) -> str:
        """The DSN as logs and errors may show it: without its password."""
        from psycopg import conninfo  # noqa: PLC0415

        params = conninfo.conninfo_to_dict(self.dsn)
        if "password" in params:
            params["password"] = "***"
        return conninfo.make_conninfo("", **params) + f" schema={self.schema}"


def _is_local(host: str) -> bool:
    """A Unix socket directory or a loopback name or address."""
    if host.startswith("/") or host.startswith("@") or host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
