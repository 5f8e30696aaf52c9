"""Set-up paths: migrations apply once under concurrency, and missing services are one clear line."""

import os
import subprocess
import sys
import threading

from shared.db import transaction
from shared.migrate import MIGRATIONS_DIR, migrate
from shared.settings import get_settings


def test_migrations_apply_once_even_concurrently() -> None:
    """Re-running migrate applies nothing; concurrent runs wait on the lock instead of failing."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            assert migrate(get_settings().database_url) == []
        except BaseException as exc:  # collected and re-raised in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with transaction() as cur:
        cur.execute("SELECT version FROM schema_migrations ORDER BY version")
        assert [r["version"] for r in cur.fetchall()] == sorted(p.stem for p in MIGRATIONS_DIR.glob("*.sql"))


def test_unreachable_services_are_one_line() -> None:
    """make up's prestart step names the unreachable service and how to start it, no traceback."""
    for broken in (
        {"DATABASE_URL": "postgresql://postgres@127.0.0.1:9/traincast"},
        {"REDIS_URL": "redis://127.0.0.1:9/0"},
    ):
        env = {**os.environ, **broken}
        out = subprocess.run(
            [sys.executable, "-m", "shared.prestart", "0"], env=env, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 1
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
        assert "unreachable" in out.stderr and "docker compose up -d postgres redis" in out.stderr
