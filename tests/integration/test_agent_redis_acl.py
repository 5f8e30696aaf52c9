"""Real processes under their own Redis ACL users (shared/core/redis_acl.py's rules): those grants suffice, nothing
else."""

import secrets
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

from shared.core import redis_acl, tasks
from shared.core.db import one, transaction
from shared.measurements import layers
from tests.support.stack import Stack, http, queued_tasks
from tests.support.wait import job_finished, wait_until

# The agent's user as tests run it: shared/core/redis_acl.py's rules for agents, narrowed to the local type
# (docs/FLEET.md's line grants every type's keys; docker-compose.yml's grants its agents' types).
AGENT_TYPES = ["local"]
SELECT_ROWS = "SELECT count(*) AS n FROM layer_benchmarks WHERE signature_id = %s"
AGENT_UNACKED = "unacked.bench.local:messages"
# Other consumers' in-flight messages: the workers' (kombu's default keys) and other machine types'
# (local.xl's keys begin with local's queue name: the ':' after the type keeps them apart).
OTHERS_IN_FLIGHT = [
    *(("HGETALL", "unacked"), ("HDEL", "unacked", "1"), ("ZRANGE", "unacked_index", "0", "-1")),
    *(("SET", "unacked_mutex", "1"), ("HGETALL", "unacked.bench.g5.xlarge:messages")),
    *(("HDEL", "unacked.bench.local.xl:messages", "1"), ("ZREM", "unacked.bench.local.xl:index", "1")),
]


@contextmanager
def redis_user(redis_url: str, rules: list[str]) -> Iterator[tuple[str, str]]:
    """A Redis ACL user with these rules (the server is shared: a name of its own); yields (name, its URL)."""
    admin = redis.Redis.from_url(redis_url)
    name, password = f"traincast-agent-test-{secrets.token_hex(4)}", secrets.token_hex(16)
    admin.execute_command("ACL", "SETUSER", name, "on", f">{password}", *rules)
    parts = urlsplit(redis_url)
    try:
        yield name, urlunsplit(parts._replace(netloc=f"{name}:{password}@{parts.netloc}"))
    finally:
        admin.execute_command("ACL", "DELUSER", name)


def agent_rules(redis_url: str) -> list[str]:
    """The agent's rules for the local type, with the broadcast channels of the URL's db."""
    return redis_acl.rules("agent", db=int(urlsplit(redis_url).path.lstrip("/") or 0), machine_types=AGENT_TYPES)


@pytest.fixture
def acl_user(service_env: dict[str, str]) -> Iterator[tuple[str, str]]:
    """The agent's Redis ACL user for this test; yields (name, password)."""
    with redis_user(service_env["REDIS_URL"], agent_rules(service_env["REDIS_URL"])) as (name, url):
        yield name, urlsplit(url).password or ""


def denials(admin: redis.Redis, user: str) -> list[str]:
    """What the ACL refused this user, from the server's ACL log."""
    entries: list[dict[str, object]] = admin.acl_log(128)  # type: ignore[assignment]
    return [f"{e.get('reason')} {e.get('object')}" for e in entries if _text(e.get("username")) == user]


def test_agent_runs_as_its_redis_acl_user(
    service_env: dict[str, str], clean_db: None, acl_user: tuple[str, str], tmp_path: Path
) -> None:
    """Consume bench.local, store rows, send to jobs, stop cleanly: with no ACL denial and no password in the log."""
    name, password = acl_user
    parts = urlsplit(service_env["REDIS_URL"])
    agent_redis = urlunsplit(parts._replace(netloc=f"{name}:{password}@{parts.netloc}"))
    admin = redis.Redis.from_url(service_env["REDIS_URL"])
    stack = Stack({**service_env, "REDIS_URL": agent_redis}, tmp_path)
    sig_id = layers.register_builtin(name="resnet18", image_size=32)[0][0]
    item = {"signature_id": sig_id, **layers.specs(signature_ids=[sig_id])[sig_id], "batch_sizes": [1, 2]}
    tasks.send(
        tasks.BENCH_LAYERS, queue=tasks.bench_queue("local"), machine_type="local", precision="fp32", items=[item]
    )
    stack.start("agent")
    try:
        wait_until(
            lambda: tasks.ADVANCE_JOBS in queued_tasks("jobs"), 120, "the agent's advance_jobs", 0.2,
            lambda: f"{denials(admin, name)}\n{stack.log('agent')[-3000:]}",
        )  # fmt: skip
        with transaction() as cur:
            cur.execute(SELECT_ROWS, (sig_id,))
            assert one(cur)["n"] == 2
        assert stack.stop("agent") == 0
    finally:
        for proc in list(stack.procs):
            stack.stop(proc, signal.SIGKILL)
    assert denials(admin, name) == []
    assert password not in stack.log("agent") and f"{name}:**@" in stack.log("agent")  # masked, not absent

    agent = redis.Redis.from_url(agent_redis)
    others = (("LRANGE", "jobs", "0", "-1"), ("RPOP", "bench.local.xl"), ("GET", "other"), *OTHERS_IN_FLIGHT)
    for command in (("KEYS", "*"), ("SCAN", "0"), *others):
        with pytest.raises(redis.exceptions.NoPermissionError):
            agent.execute_command(*command)
    with pytest.raises(redis.exceptions.NoPermissionError):
        agent.execute_command("FLUSHDB")
    with pytest.raises(redis.exceptions.NoPermissionError):  # another run's database claim, in db 0
        redis.Redis.from_url(urlunsplit(urlsplit(agent_redis)._replace(path="/0"))).get("traincast:test-db-claim:1")


def run_job_as_users(
    service_env: dict[str, str], urls: dict[str, str], tmp_path: Path, refused: Callable[[], object]
) -> None:
    """A job over HTTP to the end with the API, a worker and a local agent, each on urls[kind] (its own user).

    refused() says what the ACL denied, in the message should the job not finish.
    """
    stacks: dict[str, Stack] = {}
    try:
        for kind, url in urls.items():
            stacks[kind] = Stack({**service_env, "REDIS_URL": url}, tmp_path / kind)
            stacks[kind].logs.mkdir()
            stacks[kind].start(kind)
        api = stacks["api"]
        api.wait_ready()
        body = {"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [1, 2], "image_size": 32}
        job_id = http.post(f"{api.url}/v1/jobs", json=body).json()["id"]

        def logs() -> str:
            tails = [f"{kind}: {stack.log(kind)[-1500:]}" for kind, stack in stacks.items()]
            return "\n".join([str(refused()), *tails])

        job = job_finished(lambda: http.get(f"{api.url}/v1/jobs/{job_id}").json(), job_id, 240, logs)
        assert job["status"] == "succeeded", job
    finally:
        for stack in stacks.values():
            for proc in list(stack.procs):
                stack.stop(proc)


def test_api_worker_and_agent_run_as_their_redis_acl_users(
    service_env: dict[str, str], clean_db: None, tmp_path: Path
) -> None:
    """A job over HTTP to the end, each process under its own user: no ACL denial; the API's user cannot consume."""
    admin = redis.Redis.from_url(service_env["REDIS_URL"])
    parts = urlsplit(service_env["REDIS_URL"])
    db = int(parts.path.lstrip("/") or 0)
    urls: dict[str, str] = {}
    users: list[str] = []
    try:
        for kind in ("api", "worker", "agent"):
            name, password = f"traincast-{kind}-test-{secrets.token_hex(4)}", secrets.token_hex(16)
            rules = redis_acl.rules(kind, db=db, machine_types=AGENT_TYPES if kind == "agent" else None)
            admin.execute_command("ACL", "SETUSER", name, "on", f">{password}", *rules)
            users.append(name)
            urls[kind] = urlunsplit(parts._replace(netloc=f"{name}:{password}@{parts.netloc}"))
        run_job_as_users(service_env, urls, tmp_path, lambda: {name: denials(admin, name) for name in users})
        assert {name: denials(admin, name) for name in users} == dict.fromkeys(users, [])
        as_api = redis.Redis.from_url(urls["api"])
        for command in (("RPOP", "jobs"), ("LRANGE", "jobs", "0", "-1"), ("HGETALL", "unacked"), ("KEYS", "*")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                as_api.execute_command(*command)
        # The workers' in-flight messages and the agents' are apart: neither user reaches the other's.
        for kind, other in [*(("agent", c) for c in OTHERS_IN_FLIGHT), ("worker", ("HGETALL", AGENT_UNACKED))]:
            with pytest.raises(redis.exceptions.NoPermissionError):
                redis.Redis.from_url(urls[kind]).execute_command(*other)
    finally:
        for name in users:
            admin.execute_command("ACL", "DELUSER", name)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
