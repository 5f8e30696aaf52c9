"""PostgreSQL access: one connection per call site, committed or rolled back as a unit."""

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


def connect(url: str | None = None) -> psycopg2.extensions.connection:
    """Open a connection, turning an unreachable server into ServiceUnavailable."""
    dsn = url or get_settings().database_url
    try:
        return psycopg2.connect(dsn, connect_timeout=5)
    except psycopg2.OperationalError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        raise ServiceUnavailable(f"PostgreSQL at {_redact(dsn)} is unreachable: {first_line}") from exc


@contextmanager
def transaction(url: str | None = None) -> Iterator[psycopg2.extras.RealDictCursor]:
    """A cursor returning dict rows inside one transaction, committed on success."""
    conn = connect(url)
    try:
        with conn, conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            yield cur
    finally:
        conn.close()


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
