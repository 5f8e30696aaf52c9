"""Apply migrations/*.sql in order, once each, under an advisory lock, then seed the machine catalog from data/:
`python -m shared.core.migrate`."""

import sys
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
# Any fixed number: every migrating process takes the same lock, so only one applies at a time.
LOCK_KEY = 7_246_001

CREATE_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""
SELECT_APPLIED = "SELECT version FROM schema_migrations"
INSERT_APPLIED = "INSERT INTO schema_migrations (version) VALUES (%s)"
DATABASE_EXISTS = "SELECT 1 FROM pg_database WHERE datname = %s"


def ensure_database(url: str) -> None:
    """Create the database named in url if it does not exist yet."""
    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin_url = urlunsplit(parts._replace(path="/postgres"))
    conn = connect(admin_url)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(DATABASE_EXISTS, (name,))
            if cur.fetchone() is None:
                cur.execute(psycopg2.sql.SQL("CREATE DATABASE {}").format(psycopg2.sql.Identifier(name)))
    finally:
        conn.close()


def migrate(url: str | None = None) -> list[str]:
    """Apply pending migrations; return the versions applied now."""
    url = url or get_settings().database_url
    ensure_database(url)
    conn = connect(url)
    applied_now: list[str] = []
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
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
        with conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))
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
