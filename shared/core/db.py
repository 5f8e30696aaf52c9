"""PostgreSQL access: transactions committed or rolled back as a unit, on connections pooled per process."""

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import date
from decimal import Decimal
from typing import Any

import psycopg2
import psycopg2.extensions
import psycopg2.extras

from shared.core.errors import ServiceUnavailable
from shared.core.secrets import redact_url
from shared.core.settings import get_settings

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


# Idle connections a process keeps per URL; more may be open at once (each thread borrows its own), the extra
# ones are closed when returned. Small: every process of the service (and of each test run) keeps its own.
POOL_IDLE_MAX = 4
# A connection idle this long is pinged before it is lent, so one the server dropped meanwhile (a restart, an
# idle timeout) is replaced instead of failing the caller's first statement.
POOL_PING_AFTER_S = 1.0


class Pool:
    """Idle connections to one URL, owned by the process that made them.

    psycopg2.pool keeps only `minconn` connections idle (opened eagerly) and raises when `maxconn` are lent;
    this one opens lazily, never refuses, and keeps up to POOL_IDLE_MAX of those given back.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.pid = os.getpid()
        self._idle: list[tuple[psycopg2.extensions.connection, float]] = []
        self._lock = threading.Lock()

    def borrow(self) -> psycopg2.extensions.connection:
        """An idle connection that answers, else a new one (ServiceUnavailable if the server is unreachable)."""
        while True:
            with self._lock:
                if not self._idle:
                    break
                conn, since = self._idle.pop()
            if conn.closed:
                continue
            if time.monotonic() - since < POOL_PING_AFTER_S or _answers(conn):
                return conn
            _discard(conn)
        return connect(self.url)

    def give_back(self, conn: psycopg2.extensions.connection) -> None:
        """Keep a connection that is open and outside any transaction; close any other."""
        usable = not conn.closed and conn.info.transaction_status == psycopg2.extensions.TRANSACTION_STATUS_IDLE
        if usable and os.getpid() == self.pid:
            with self._lock:
                if len(self._idle) < POOL_IDLE_MAX:
                    self._idle.append((conn, time.monotonic()))
                    return
        _discard(conn)

    def close(self) -> None:
        """Close the idle connections (lent ones are closed when given back)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn, _since in idle:
            _discard(conn)

    def idle(self) -> int:
        """How many connections wait to be lent."""
        with self._lock:
            return len(self._idle)


_pools: dict[tuple[int, str], Pool] = {}
_pools_lock = threading.Lock()


def pool(url: str | None = None) -> Pool:
    """This process's pool for a URL (default DATABASE_URL).

    Keyed by process id: a Celery prefork child (or any fork) never lends its parent's connections, whose
    sockets it shares; it makes its own pool and leaves the parent's untouched (closing them would end the
    parent's sessions).
    """
    dsn = url or get_settings().database_url
    pid = os.getpid()
    with _pools_lock:
        found = _pools.get((pid, dsn))
        if found is None:
            for key in [k for k in _pools if k[0] != pid]:
                del _pools[key]  # inherited from a parent: forgotten, never closed here
            found = _pools[(pid, dsn)] = Pool(dsn)
        return found


def close_pools() -> None:
    """Close this process's idle pooled connections (at shutdown, or before a database is dropped)."""
    pid = os.getpid()
    with _pools_lock:
        mine = [p for k, p in _pools.items() if k[0] == pid]
    for p in mine:
        p.close()


@contextmanager
def transaction(url: str | None = None) -> Iterator[psycopg2.extras.RealDictCursor]:
    """A cursor returning dict rows inside one transaction, committed on success, on a pooled connection."""
    owner = pool(url)
    conn = owner.borrow()
    try:
        with conn, conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            yield cur
    finally:
        # Kept only if open and outside a transaction: a connection that broke is closed, never lent again.
        owner.give_back(conn)


def _answers(conn: psycopg2.extensions.connection) -> bool:
    """Whether a pooled connection still reaches its server (one round trip)."""
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
        conn.rollback()
        return True
    except psycopg2.Error:
        return False


def _discard(conn: psycopg2.extensions.connection) -> None:
    with suppress(psycopg2.Error):
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


def rows_of(cur: psycopg2.extras.RealDictCursor, sql: str, params: Any) -> list[dict[str, Any]]:
    """Every row a query returns, as plain JSON values."""
    cur.execute(sql, params)
    return [jsonable(r) for r in cur.fetchall()]


def insert_new(
    cur: psycopg2.extras.RealDictCursor, sql: str, columns: tuple[str, ...], rows: list[dict[str, Any]]
) -> int:
    """Insert rows' columns with an `INSERT … VALUES %s ON CONFLICT DO NOTHING RETURNING 1`; how many were new."""
    if not rows:
        return 0
    template = "(" + ", ".join(f"%({c})s" for c in columns) + ")"
    adapted = [{k: Json(v) if isinstance(v, dict) else v for k, v in r.items()} for r in rows]
    return len(psycopg2.extras.execute_values(cur, sql, adapted, template=template, page_size=1000, fetch=True))
