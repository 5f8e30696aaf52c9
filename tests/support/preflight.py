"""Before the tests: start the embedded servers where none answers (one line each), else say how to start them."""

import sys

from shared.core.embedded_servers import StartError
from tests.support.services import chosen_urls


def main() -> int:
    """Exit 1 with one line when a service is unreachable."""
    import psycopg2
    import redis

    try:
        pg, rd = chosen_urls()
    except StartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for line in (pg.line, rd.line):
        if line:
            print(f"tests: {line}")
    hint = (
        "start them (`docker compose up -d postgres redis`), set TEST_DATABASE_URL / TEST_REDIS_URL, "
        "or set TRAINCAST_EMBEDDED=1 to use the embedded ones"
    )
    try:
        psycopg2.connect(pg.url, connect_timeout=5).close()
    except psycopg2.OperationalError as exc:
        print(
            f"error: PostgreSQL at {pg.url} is unreachable ({str(exc).strip().splitlines()[0]}); {hint}",
            file=sys.stderr,
        )
        return 1
    try:
        redis.Redis.from_url(rd.url, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        print(f"error: Redis at {rd.url} is unreachable ({exc}); {hint}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
