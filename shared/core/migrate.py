"""Apply migrations/*.sql in order, once each, under an advisory lock, then seed the machine catalog from data/:
`python -m shared.core.migrate`."""

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg2
import psycopg2.extensions
import psycopg2.extras
import psycopg2.sql

from shared import machine_types
from shared.core.db import connect
from shared.core.errors import ServiceUnavailable
from shared.core.settings import get_settings

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
# Any fixed number: every migrating process takes the same lock, so only one applies at a time. It is taken in the
# cluster's postgres database, not the migrated one: roles are cluster-wide, and a migration that creates one while
# another database's migration creates it too can fail (the loser's transaction still sees no role) however its SQL
# guards the CREATE. Two processes creating the same database would race the same way.
LOCK_KEY = 7_246_001
TAKE_LOCK = "SELECT pg_advisory_lock(%s)"

CREATE_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""
SELECT_APPLIED = "SELECT version FROM schema_migrations"
INSERT_APPLIED = "INSERT INTO schema_migrations (version) VALUES (%s)"
DATABASE_EXISTS = "SELECT 1 FROM pg_database WHERE datname = %s"


@contextmanager
def _cluster_lock(url: str) -> Iterator[psycopg2.extensions.cursor]:
    """Hold the migration lock of url's cluster for the block; yield a cursor on its postgres database (autocommit)."""
    admin_url = urlunsplit(urlsplit(url)._replace(path="/postgres"))
    conn = connect(admin_url)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(TAKE_LOCK, (LOCK_KEY,))
            yield cur
    finally:
        conn.close()  # a session's advisory lock ends with the session


def _create_if_missing(admin: psycopg2.extensions.cursor, url: str) -> None:
    """CREATE DATABASE for url's database unless the cluster has it (the caller holds the cluster lock)."""
    name = urlsplit(url).path.lstrip("/")
    admin.execute(DATABASE_EXISTS, (name,))
    if admin.fetchone() is None:
        admin.execute(psycopg2.sql.SQL("CREATE DATABASE {}").format(psycopg2.sql.Identifier(name)))


def ensure_database(url: str) -> None:
    """Create the database named in url if it does not exist yet."""
    with _cluster_lock(url) as admin:
        _create_if_missing(admin, url)


def migrate(url: str | None = None) -> list[str]:
    """Apply pending migrations; return the versions applied now."""
    url = url or get_settings().database_url
    applied_now: list[str] = []
    with _cluster_lock(url) as admin:
        _create_if_missing(admin, url)
        conn = connect(url)
        try:
            with conn.cursor() as cur:
                cur.execute(CREATE_LEDGER)
                conn.commit()
                cur.execute(SELECT_APPLIED)
                done = {row[0] for row in cur.fetchall()}
                for path in sorted(MIGRATIONS_DIR.glob("*.sql")):
                    version = path.stem
                    if version in done:
                        continue
                    cur.execute(path.read_text())
                    cur.execute(INSERT_APPLIED, (version,))
                    conn.commit()
                    applied_now.append(version)
            with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as dict_cur:
                # Rows, not schema: new catalog entries from data/ (existing rows keep their prices).
                machine_types.seed_catalog(dict_cur)
                conn.commit()
        finally:
            conn.close()
    return applied_now


def main() -> int:
    """Command-line entry: migrate and say what was applied."""
    try:
        applied = migrate()
    except ServiceUnavailable as exc:
        print(f"error: {exc.detail}. {START_HINT}", file=sys.stderr)
        return 1
    print(f"migrations applied: {', '.join(applied) if applied else 'none (up to date)'}")
    return 0


START_HINT = (
    "Start PostgreSQL and Redis (`docker compose up -d postgres redis`) "
    "or point DATABASE_URL / REDIS_URL at running servers; `make up` starts embedded ones where none answers on "
    "127.0.0.1 (TRAINCAST_EMBEDDED=1: always)"
)

if __name__ == "__main__":
    sys.exit(main())
