"""Set-up paths: migrations apply once under concurrency, and missing services are one clear line."""

import os
import subprocess
import sys
import threading

import psycopg2

from shared.core.db import connect
from shared.core.migrate import LOCK_KEY, MIGRATIONS_DIR, migrate
from tests.support.faultkit import OwnPostgres, until
from tests.support.services import fresh_database, server_urls

SELECT_VERSIONS = "SELECT version FROM schema_migrations ORDER BY version"


def test_migrations_apply_once_even_concurrently() -> None:
    """On an empty database, one of three concurrent runs applies every migration, the others wait on the lock."""
    every = sorted(p.stem for p in MIGRATIONS_DIR.glob("*.sql"))
    applied: list[list[str]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(3)

    with fresh_database(server_urls()[0]) as url:

        def run() -> None:
            try:
                start.wait()
                applied.append(migrate(url))
            except BaseException as exc:  # collected and re-raised in the test thread
                errors.append(exc)

        threads = [threading.Thread(target=run) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        # Without the lock two runs would apply the same files (and fail on the tables the first made).
        assert sorted(applied, key=len) == [[], [], every]
        assert migrate(url) == []
        conn = connect(url)
        try:
            with conn.cursor() as cur:
                cur.execute(SELECT_VERSIONS)
                assert [r[0] for r in cur.fetchall()] == every
        finally:
            conn.close()


WAITING_FOR_LOCK = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s AND NOT granted"
GROUP_ROLES = "SELECT count(*) FROM pg_roles WHERE rolname IN ('traincast_api', 'traincast_worker', 'traincast_agent')"


def test_databases_of_a_fresh_cluster_migrate_one_at_a_time() -> None:
    """Roles are cluster-wide: three new databases' migrations wait for one cluster lock, and all of them apply."""
    every = sorted(p.stem for p in MIGRATIONS_DIR.glob("*.sql"))
    pg = OwnPostgres()  # no Traincast role exists in it yet, as on a new host or CI machine
    pg.start()
    holder = None
    try:
        base = pg.admin_url.rsplit("/", 1)[0]
        urls = [f"{base}/fresh_{i}" for i in range(3)]
        holder = psycopg2.connect(pg.admin_url)
        holder.autocommit = True
        with holder.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
        applied: dict[str, list[str]] = {}
        errors: list[BaseException] = []

        def run(url: str) -> None:
            try:
                applied[url] = migrate(url)
            except BaseException as exc:  # collected and re-raised in the test thread
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(u,)) for u in urls]
        for t in threads:
            t.start()

        def waiting() -> bool:
            with holder.cursor() as cur:
                cur.execute(WAITING_FOR_LOCK, (LOCK_KEY,))
                row = cur.fetchone()
                assert row is not None
                return row[0] == 3

        # A lock per database let them run at once, and two creating the same role could fail.
        until("every migration to wait for the cluster's lock", waiting, 60)
        assert applied == {} and errors == []
        with holder.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))
        for t in threads:
            t.join(120)
        assert errors == []
        assert applied == {url: every for url in urls}
        with holder.cursor() as cur:
            cur.execute(GROUP_ROLES)
            row = cur.fetchone()
            assert row is not None and row[0] == 3
    finally:
        if holder is not None:
            holder.close()
        pg.remove()


def test_unreachable_services_are_one_line() -> None:
    """make up's prestart step names the unreachable service and how to start it, no traceback."""
    for broken in (
        {"DATABASE_URL": "postgresql://postgres@127.0.0.1:9/traincast"},
        {"REDIS_URL": "redis://127.0.0.1:9/0"},
    ):
        env = {**os.environ, **broken}
        out = subprocess.run(
            [sys.executable, "-m", "shared.core.prestart", "0"], env=env, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 1
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
        assert "unreachable" in out.stderr and "docker compose up -d postgres redis" in out.stderr
