"""The start-up check against this run's PostgreSQL with an unreachable Redis (its database case: tests/unit)."""

import os
import subprocess
import sys

from shared.core import secrets

PASSWORD = "s3cr3t-Pa55"


def test_an_unreachable_redis_does_not_print_the_password() -> None:
    """With PostgreSQL answering, the Redis error names the server, never its password."""
    env = {**os.environ, "REDIS_URL": f"redis://agent:{PASSWORD}@127.0.0.1:9/0"}
    env.pop(secrets.SSM_PATH_VAR, None)
    out = subprocess.run(
        [sys.executable, "-m", "shared.core.prestart", "0"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 1 and "Redis" in out.stderr and "unreachable" in out.stderr
    assert PASSWORD not in out.stderr + out.stdout and "agent:***@127.0.0.1:9" in out.stderr
