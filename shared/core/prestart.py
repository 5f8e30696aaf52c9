"""Before the stack starts: wait for PostgreSQL and Redis, then migrate. `python -m shared.core.prestart`."""

import sys
import time

import redis

from shared.core import migrate, secrets, tasks
from shared.core.db import connect
from shared.core.errors import ServiceUnavailable
from shared.core.secrets import redact_url
from shared.core.settings import get_settings


def wait_for_services(timeout_s: float) -> None:
    """Return once both services answer; raise ServiceUnavailable with the last reason after timeout_s."""
    settings = get_settings()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            migrate.ensure_database(settings.database_url)
            connect().close()
            try:
                tasks.redis_client(socket_connect_timeout=2).ping()
            except redis.RedisError as exc:
                raise ServiceUnavailable(f"Redis at {redact_url(settings.redis_url)} is unreachable: {exc}") from exc
            return
        except ServiceUnavailable:
            if time.monotonic() >= deadline:
                raise
            time.sleep(1)


def main() -> int:
    """Wait (up to WAIT seconds, default 10), migrate, and say so in one line on failure."""
    timeout = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    try:
        # Before any setting is read: DATABASE_URL / REDIS_URL may come from SSM.
        secrets.load_from_environment()
        wait_for_services(timeout)
    except ServiceUnavailable as exc:
        print(f"error: {exc.detail}. {migrate.START_HINT}.", file=sys.stderr)
        return 1
    return migrate.main()


if __name__ == "__main__":
    sys.exit(main())
