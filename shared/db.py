"""PostgreSQL access: one connection per call site, committed or rolled back as a unit."""

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from decimal import Decimal
from typing import Any

import psycopg2
import psycopg2.extensions
import psycopg2.extras

from shared.errors import ServiceUnavailable
from shared.secrets import redact_url
from shared.settings import get_settings

psycopg2.extras.register_uuid()
log = logging.getLogger(__name__)

# Only this mode checks both that the certificate chains to the CA and that it names the host.
VERIFIED_SSLMODE = "verify-full"
_LOCAL_HOSTS = {"", "localhost", "127.0.0.1", "::1"}
_warned: set[str] = set()


def connect(url: str | None = None) -> psycopg2.extensions.connection:
    """Open a connection, turning an unreachable server into ServiceUnavailable."""
    dsn = url or get_settings().database_url
    try:
        return psycopg2.connect(dsn, connect_timeout=5, **tls_options(dsn))
    except psycopg2.OperationalError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        raise ServiceUnavailable(f"PostgreSQL at {_redact(dsn)} is unreachable: {first_line}") from exc


Cursor = psycopg2.extras.RealDictCursor


@contextmanager
def transaction(url: str | None = None) -> Iterator[psycopg2.extras.RealDictCursor]:
    """A cursor returning dict rows inside one transaction, committed on success."""
    conn = connect(url)
    try:
        with conn, conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            yield cur
    finally:
        conn.close()


def tls_options(dsn: str) -> dict[str, Any]:
    """Connection keywords that add DATABASE_CA_FILE (and then verify-full) when the URL names no CA."""
    try:
        params = psycopg2.extensions.parse_dsn(dsn)
    except psycopg2.ProgrammingError:
        # libpq quotes the malformed part, which may be the password: say nothing of it.
        raise ServiceUnavailable(f"DATABASE_URL {_redact(dsn)} is not a valid connection string") from None
    extra: dict[str, Any] = {}
    ca_file = get_settings().database_ca_file
    if ca_file and "sslrootcert" not in params:
        extra["sslrootcert"] = ca_file
        # A CA given without a mode means verification was meant; libpq's default (prefer) verifies nothing.
        extra["sslmode"] = params.get("sslmode") or VERIFIED_SSLMODE
    _warn_unverified(params.get("host", ""), extra.get("sslmode") or params.get("sslmode") or "prefer")
    return extra


def _warn_unverified(host: str, sslmode: str) -> None:
    """Say once per host when a remote server's identity goes unchecked (local development is left quiet)."""
    if sslmode == VERIFIED_SSLMODE or host in _LOCAL_HOSTS or host.startswith("/") or host in _warned:
        return
    _warned.add(host)
    log.warning(
        "PostgreSQL at %s is used with sslmode=%s: its certificate and host name are not verified; "
        "set sslmode=%s and sslrootcert (or DATABASE_CA_FILE) in DATABASE_URL",
        host,
        sslmode,
        VERIFIED_SSLMODE,
    )


def Json(value: Any) -> psycopg2.extras.Json:  # noqa: N802 - mirrors psycopg2's adapter name
    """Adapt a value for a jsonb column."""
    return psycopg2.extras.Json(value)


def _redact(dsn: str) -> str:
    """Hide a password in a connection URL before it reaches a message or a log."""
    return redact_url(dsn)


def floats(row: Any) -> dict[str, Any]:
    """A row with its numeric (Decimal) columns as floats, which JSON and arithmetic want."""
    return {k: float(v) if isinstance(v, Decimal) else v for k, v in dict(row).items()}


def jsonable(row: Any) -> dict[str, Any]:
    """A row as plain JSON values: numerics as floats, dates and times as ISO 8601 text."""
    return {k: v.isoformat() if isinstance(v, date) else v for k, v in floats(row).items()}


def one(cur: psycopg2.extras.RealDictCursor) -> dict[str, Any]:
    """The single row a statement must have returned (RETURNING, count(*), …)."""
    row = cur.fetchone()
    if row is None:
        raise LookupError("statement returned no row")
    return dict(row)
