"""Real PostgreSQL and Redis for the tests: testcontainers with a Docker engine, else local servers, else (none
answering, or TRAINCAST_EMBEDDED=1) the embedded ones from the pip wheels, data in .run/ (shared/core/embedded.py).

Each run gets its own database and its own Redis database number, so runs never collide.
"""

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg2
import psycopg2.sql
import redis

from shared.core import embedded

CLAIM_TTL_S = 3 * 3600


def server_urls() -> tuple[str, str]:
    """Admin URLs of the servers the tests use when no Docker engine is there."""
    return (
        os.environ.get("TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
        os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379"),
    )


def chosen_urls() -> tuple[embedded.Choice, embedded.Choice]:
    """server_urls(), or the embedded servers in .run/ where those do not answer (started if need be)."""
    return embedded.use(*server_urls(), Path(__file__).resolve().parents[2] / ".run")


def _docker_available() -> bool:
    try:
        import docker

        docker.from_env(timeout=2).ping()
        return True
    except Exception:
        return False


@contextmanager
def servers() -> Iterator[tuple[str, str]]:
    """Admin URLs of a PostgreSQL and a Redis server for this run."""
    forced = os.environ.get(embedded.FORCE_VAR) == "1"
    if os.environ.get("TEST_DATABASE_URL") is None and not forced and _docker_available():
        from testcontainers.postgres import PostgresContainer
        from testcontainers.redis import RedisContainer

        with PostgresContainer("postgres:15", driver=None) as pg, RedisContainer("redis:7") as rd:
            host, port = rd.get_container_host_ip(), rd.get_exposed_port(6379)
            yield pg.get_connection_url(), f"redis://{host}:{port}"
        return
    pg_choice, rd_choice = chosen_urls()
    yield pg_choice.url, rd_choice.url


@contextmanager
def fresh_database(admin_url: str) -> Iterator[str]:
    """A new, empty database on the server, dropped afterwards."""
    name = f"traincast_test_{uuid.uuid4().hex[:12]}"
    conn = psycopg2.connect(admin_url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(psycopg2.sql.SQL("CREATE DATABASE {}").format(psycopg2.sql.Identifier(name)))
    try:
        yield urlunsplit(urlsplit(admin_url)._replace(path=f"/{name}"))
    finally:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            cur.execute(psycopg2.sql.SQL("DROP DATABASE IF EXISTS {}").format(psycopg2.sql.Identifier(name)))
        conn.close()


@contextmanager
def fresh_redis_db(server_url: str) -> Iterator[str]:
    """A Redis database number no other run holds (claimed in db 0), emptied before and after."""
    admin = redis.Redis.from_url(f"{server_url.rstrip('/')}/0")
    token = uuid.uuid4().hex
    for number in range(1, 16):
        if admin.set(f"traincast:test-db-claim:{number}", token, nx=True, ex=CLAIM_TTL_S):
            break
    else:
        raise RuntimeError("all Redis databases 1-15 are claimed by other test runs")
    url = f"{server_url.rstrip('/')}/{number}"
    db = redis.Redis.from_url(url)
    db.flushdb()
    try:
        yield url
    finally:
        with suppress(redis.RedisError):
            db.flushdb()
            if admin.get(f"traincast:test-db-claim:{number}") == token.encode():
                admin.delete(f"traincast:test-db-claim:{number}")
