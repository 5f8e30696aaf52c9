"""A real agent under its own Redis ACL user: it works with only the keys and channels below, nothing else."""

import secrets
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

from shared import layers, tasks
from shared.db import transaction
from tests.conftest import Stack, http, queued_tasks

# What a Celery 5 worker (kombu's Redis transport) consuming bench.local and sending to jobs
# touches. docs/FLEET.md has the production line; keep the two alike.
ACL_RULES = [
    "resetkeys",
    "resetchannels",
    "-@all",
    # Commands kombu and Celery use; no KEYS, SCAN, FLUSH*, CONFIG, DEBUG, CLIENT KILL …
    "+@connection",
    "+select",
    "+@transaction",
    "+@list",
    "+@hash",
    "+@set",
    "+@sortedset",
    "+@string",
    "+@pubsub",
    "+del",
    "+exists",
    "+expire",
    "+pexpire",
    "+time",
    # kombu 5.7 keeps the binding tables of expiring queues (Celery's reply queues) with Lua scripts.
    "+evalsha",
    "+eval",
    "+script|load",
    "+script|exists",
    "-@dangerous",
    # Its queue and kombu's priority variants (the name, \x06\x16, the priority), and the jobs queue to
    # send to: write only. Not `~bench.local*`, which would grant the queue of a type local.xl too.
    "~bench.local",
    "~bench.local[^-A-Za-z0-9._+]*",
    "%W~jobs",
    # A selector: declaring jobs when sending reads its length (and its priority lists') and nothing else.
    "(~jobs* +llen)",
    # Exchange binding tables (with kombu's deadlines and permanent sets), its machine type's own
    # table of unacknowledged messages with its index and lock (shared/tasks.py agent_unacked_keys;
    # not the workers' `unacked`), and the reply lists of Celery's worker handshake (mingle) and
    # remote control.
    "~_kombu.binding*",
    "~unacked.bench.local:*",
    "~*.reply.celery.pidbox*",
    # Its own remote-control queue (the --hostname gpu_agent/__main__.py gives it) and the
    # event queues Celery's gossip declares: their sizes are read when declared.
    "~agent-local@*.celery.pidbox*",
    "~celeryev.*",
]


def channel_rules(db: int) -> list[str]:
    """Broadcast channels: remote control and events, under kombu's fanout prefix /<db>.

    PSUBSCRIBE patterns must equal an ACL channel pattern literally, so the db number is spelt out.
    """
    return [f"&/{db}.celery.pidbox", f"&/{db}.celeryev/worker.*"]


# The API's and the workers' users, as docs/FLEET.md gives them (keep the two alike). The API sends to
# jobs and keeps per-key token buckets (api/ratelimit.py: a Lua script of TIME, HMGET, HSET, EXPIRE).
API_RULES = [
    *("resetkeys", "resetchannels", "-@all", "+@connection", "+select", "+@transaction", "+@list", "+@set"),
    *("+hmget", "+hset", "+expire", "+time", "+eval", "+evalsha", "+script|load", "-@dangerous"),
    *("%W~jobs", "(~jobs* +llen)", "~_kombu.binding*", "~traincast:rate:*"),
]
# Workers consume jobs, send to (and take back queued work from) bench.*, and run beat, remote control and events.
WORKER_RULES = [
    *ACL_RULES[: ACL_RULES.index("~bench.local")],
    *("~jobs*", "~bench.*", "~_kombu.binding*", "~unacked", "~unacked_index", "~unacked_mutex"),
    *("~*.reply.celery.pidbox*", "~*@*.celery.pidbox*", "~celeryev.*"),
]
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
    """ACL_RULES with the broadcast channels of the URL's db."""
    return [*ACL_RULES, *channel_rules(int(urlsplit(redis_url).path.lstrip("/") or 0))]


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
        deadline = time.monotonic() + 120
        while tasks.ADVANCE_JOBS not in queued_tasks("jobs"):
            assert time.monotonic() < deadline, f"{denials(admin, name)}\n{stack.log('agent')[-3000:]}"
            time.sleep(0.2)
        with transaction() as cur:
            cur.execute(SELECT_ROWS, (sig_id,))
            assert cur.fetchone()["n"] == 2
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


def test_api_worker_and_agent_run_as_their_redis_acl_users(
    service_env: dict[str, str], clean_db: None, tmp_path: Path
) -> None:
    """A job over HTTP to the end, each process under its own user: no ACL denial; the API's user cannot consume."""
    admin = redis.Redis.from_url(service_env["REDIS_URL"])
    parts = urlsplit(service_env["REDIS_URL"])
    db = int(parts.path.lstrip("/") or 0)
    urls: dict[str, str] = {}
    users: list[str] = []
    stacks: dict[str, Stack] = {}
    try:
        for kind, rules in (("api", API_RULES), ("worker", WORKER_RULES), ("agent", ACL_RULES)):
            name, password = f"traincast-{kind}-test-{secrets.token_hex(4)}", secrets.token_hex(16)
            channels = [] if kind == "api" else channel_rules(db)
            admin.execute_command("ACL", "SETUSER", name, "on", f">{password}", *rules, *channels)
            users.append(name)
            urls[kind] = urlunsplit(parts._replace(netloc=f"{name}:{password}@{parts.netloc}"))
        try:
            for kind, url in urls.items():
                stacks[kind] = Stack({**service_env, "REDIS_URL": url}, tmp_path / kind)
                stacks[kind].logs.mkdir()
                stacks[kind].start(kind)
            api = stacks["api"]
            api.wait_ready()
            body = {"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [1, 2], "image_size": 32}
            job_id = http.post(f"{api.url}/v1/jobs", json=body).json()["id"]
            deadline = time.monotonic() + 240
            while (job := http.get(f"{api.url}/v1/jobs/{job_id}").json())["status"] not in ("succeeded", "failed"):
                refused = {name: denials(admin, name) for name in users}
                assert time.monotonic() < deadline, f"{job}\n{refused}\n{stacks['worker'].log('worker')[-3000:]}"
                time.sleep(0.3)
            assert job["status"] == "succeeded", job
        finally:
            for stack in stacks.values():
                for proc in list(stack.procs):
                    stack.stop(proc)
        assert {name: denials(admin, name) for name in users} == dict.fromkeys(users, [])
        as_api = redis.Redis.from_url(urls["api"])
        for command in (("RPOP", "jobs"), ("LRANGE", "jobs", "0", "-1"), ("HGETALL", "unacked"), ("KEYS", "*")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                as_api.execute_command(*command)
        # The workers' in-flight messages and the agents' are apart: neither user reaches the other's.
        for kind, command in [*(("agent", c) for c in OTHERS_IN_FLIGHT), ("worker", ("HGETALL", AGENT_UNACKED))]:
            with pytest.raises(redis.exceptions.NoPermissionError):
                redis.Redis.from_url(urls[kind]).execute_command(*command)
    finally:
        for name in users:
            admin.execute_command("ACL", "DELUSER", name)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
