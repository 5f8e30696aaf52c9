"""redis-server with exactly docker-compose.yml's arguments: each kind's user works, and only as far as it may."""

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis

from fleet import store
from shared.core import redis_acl
from tests.integration.test_agent_redis_acl import denials, run_job_as_users
from tests.support.stack import free_port
from tests.support.tlskit import redis_server_binary
from tests.unit.test_compose import COMPOSE, KIND_OF, TEST_ENV, argv_of, env_of

SERVICES = COMPOSE["services"]
# A type compose's agents do not run as: its queue and in-flight messages are no agent's here.
OTHER_TYPE = "p4d.24xlarge"
GPU_TYPE = "g5.xlarge"  # GPU_MACHINE_TYPE's default
# (service, command, allowed): what each kind needs, and what it must not do.
CASES = [
    *[("agent", c, True) for c in (("LPOP", "bench.local"), ("LPOP", f"bench.{GPU_TYPE}"), ("LLEN", "jobs"))],
    *[("agent", c, True) for c in (("HGETALL", "unacked.bench.local:messages"), ("LPUSH", "jobs", "m"))],
    *[("agent", ("HGETALL", k), False) for k in ("unacked", f"unacked.bench.{OTHER_TYPE}:messages")],
    *[("agent", c, False) for c in (("HDEL", "unacked", "1"), ("ZRANGE", "unacked_index", "0", "-1"))],
    *[("agent", c, False) for c in (("RPOP", "jobs"), ("LRANGE", "jobs", "0", "-1"), ("LPOP", f"bench.{OTHER_TYPE}"))],
    *[("agent", c, False) for c in (("KEYS", "*"), ("FLUSHALL",), ("GET", "traincast:rate:k"))],
    *[("api", c, True) for c in (("LPUSH", "jobs", "m"), ("LLEN", "jobs"), ("HSET", "traincast:rate:k", "at", "1"))],
    *[("api", c, False) for c in (("RPOP", "jobs"), ("BRPOP", "jobs", "1"), ("LRANGE", "jobs", "0", "-1"))],
    *[("api", c, False) for c in (("HGETALL", "unacked"), ("LPOP", "bench.local"), ("KEYS", "*"))],
    *[("worker", c, True) for c in (("RPOP", "jobs"), ("HGETALL", "unacked"), ("LPUSH", f"bench.{OTHER_TYPE}", "m"))],
    *[("worker", c, False) for c in (("HGETALL", "unacked.bench.local:messages"), ("GET", "traincast:rate:k"))],
    *[("worker", c, False) for c in (("FLUSHDB",), ("KEYS", "*"), ("CONFIG", "GET", "*"))],
    *[("fleet", c, True) for c in (("LLEN", f"bench.{GPU_TYPE}"), ("LLEN", f"bench.{OTHER_TYPE}"))],
    *[("fleet", c, False) for c in (("RPOP", f"bench.{GPU_TYPE}"), ("LLEN", "jobs"), ("HGETALL", "unacked"))],
]


@pytest.fixture
def compose_redis(tmp_path: Path) -> Iterator[int]:
    """redis-server with compose's command (test passwords) on a free loopback port, data in tmp; yields the port."""
    argv = argv_of(SERVICES["redis"])
    assert argv[0] == "redis-server"
    port = free_port()
    # Only where it listens and keeps its files differ from the container's (port 6379, /data).
    command = [redis_server_binary(), *argv[1:]]
    command += ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path)]
    log = (tmp_path / "redis.log").open("wb")
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not _answers(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start: {(tmp_path / 'redis.log').read_text()[-3000:]}")
            time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def _answers(port: int) -> bool:
    try:
        redis.Redis(port=port, password=TEST_ENV["REDIS_PASSWORD"]).ping()
        return True
    except redis.ConnectionError:
        return False


def url_of(service: str, port: int) -> str:
    """The service's compose REDIS_URL, pointed at this port instead of redis:6379."""
    parts = urlsplit(env_of(SERVICES[service])["REDIS_URL"])
    return parts._replace(netloc=f"{parts.netloc.rsplit('@', 1)[0]}@127.0.0.1:{port}").geturl()


def test_each_user_logs_in_with_its_own_password_only(compose_redis: int) -> None:
    """Every service's URL logs in as its user; another kind's password, or none, is refused; the healthcheck passes."""
    for service in [*KIND_OF, "migrate"]:
        url = url_of(service, compose_redis)
        assert redis.Redis.from_url(url).ping(), service
        for variable in ("REDIS_PASSWORD", *redis_acl.PASSWORD_VARIABLES.values()):
            if TEST_ENV[variable] != urlsplit(url).password:
                wrong = url.replace(f":{urlsplit(url).password}@", f":{TEST_ENV[variable]}@")
                with pytest.raises(redis.exceptions.AuthenticationError):
                    redis.Redis.from_url(wrong).ping()
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis(port=compose_redis).ping()
    check = SERVICES["redis"]["healthcheck"]["test"]
    assert check[0] == "CMD-SHELL"
    shell = check[1].replace("redis-cli", f"redis-cli -p {compose_redis}")
    env = {**os.environ, **env_of(SERVICES["redis"])}
    assert subprocess.run(["sh", "-c", shell], env=env, timeout=30).returncode == 0
    env.pop("REDISCLI_AUTH")
    assert subprocess.run(["sh", "-c", shell], env=env, timeout=30).returncode != 0


@pytest.mark.parametrize(
    ("service", "command", "allowed"), CASES, ids=[f"{s} {' '.join(c)[:36]} {'ok' if a else 'no'}" for s, c, a in CASES]
)
def test_each_user_may_do_what_its_kind_needs_and_no_more(
    compose_redis: int, service: str, command: tuple[str, ...], allowed: bool
) -> None:
    """The agent cannot reach the workers' in-flight messages nor consume jobs; the API cannot consume jobs; …"""
    client = redis.Redis.from_url(url_of(service, compose_redis))
    if allowed:
        client.execute_command(*command)
    else:
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.execute_command(*command)


def test_the_fleet_controller_counts_queued_tasks_as_its_user(compose_redis: int) -> None:
    """fleet/store.py queued() works under the fleet's user (read only: it cannot take the tasks)."""
    worker = redis.Redis.from_url(url_of("worker", compose_redis))
    worker.lpush(f"bench.{GPU_TYPE}", "a", "b")
    worker.lpush(f"bench.{GPU_TYPE}\x06\x163", "c")
    fleet = redis.Redis.from_url(url_of("fleet", compose_redis))
    assert store.queued(fleet, GPU_TYPE) == 3
    with pytest.raises(redis.exceptions.NoPermissionError):
        fleet.lpop(f"bench.{GPU_TYPE}")


def test_a_job_runs_to_the_end_on_composes_redis(
    service_env: dict[str, str], clean_db: None, compose_redis: int, tmp_path: Path
) -> None:
    """The real API, worker (with beat) and local agent on their compose users: the job succeeds, nothing refused."""
    admin = redis.Redis.from_url(url_of("migrate", compose_redis))
    users = [redis_acl.USERS[kind] for kind in ("api", "worker", "agent")]
    urls = {kind: url_of(kind, compose_redis) for kind in ("api", "worker", "agent")}
    run_job_as_users(service_env, urls, tmp_path, lambda: {name: denials(admin, name) for name in users})
    assert {name: denials(admin, name) for name in users} == dict.fromkeys(users, [])
    assert admin.hlen("unacked.bench.local:messages") == 0 and admin.hlen("unacked") == 0
