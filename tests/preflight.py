"""Before the tests: say in one line how to start PostgreSQL and Redis if they cannot be reached."""

import sys

from tests.services import server_urls


def main() -> int:
    """Exit 1 with one line when a service is unreachable."""
    import psycopg2
    import redis

    db_url, redis_url = server_urls()
    hint = "start them (`docker compose up -d postgres redis`) or set TEST_DATABASE_URL / TEST_REDIS_URL"
    try:
        psycopg2.connect(db_url, connect_timeout=5).close()
    except psycopg2.OperationalError as exc:
        print(
            f"error: PostgreSQL at {db_url} is unreachable ({str(exc).strip().splitlines()[0]}); {hint}",
            file=sys.stderr,
        )
        return 1
    try:
        redis.Redis.from_url(redis_url, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        print(f"error: Redis at {redis_url} is unreachable ({exc}); {hint}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
