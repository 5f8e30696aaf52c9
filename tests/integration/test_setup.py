"""Set-up paths: migrations apply once under concurrency, and missing services are one clear line."""

import os
import subprocess
import sys
import threading

from shared.core.db import connect
from shared.core.migrate import MIGRATIONS_DIR, migrate
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
