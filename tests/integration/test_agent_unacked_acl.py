"""Agents' in-flight messages under their machine type's own Redis keys: nobody else's are theirs to read or drop."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from shared.core import tasks
from tests.integration.test_agent_redis_acl import agent_rules, denials, redis_user
from tests.support.agentkit import BATCH_SIZES, SLOW_AGENT, send_first_conv
from tests.support.agentkit import stored_layers as stored
from tests.support.stack import ROOT, Stack, queued_tasks
from tests.support.wait import wait_until

# Pairs of machine types whose names begin alike: one's ACL pattern must not reach the other's keys.
PAIRS = [("g5", "g5.xlarge"), ("g5.xlarge", "g5"), ("p4d", "p4de"), ("local", "local+1"), ("a-b", "a")]
WORKERS_KEYS = ["unacked", "unacked_index", "unacked_mutex"]


@pytest.mark.parametrize(("mine", "other"), PAIRS)
def test_a_types_pattern_grants_its_keys_and_no_others(service_env: dict[str, str], mine: str, other: str) -> None:
    """`~unacked.bench.<type>:*` reaches the three keys of that type's agents, not another type's nor the workers'."""
    rules = ["resetkeys", "-@all", "+@connection", "+@hash", "+@sortedset", "+set", "+del"]
    with redis_user(service_env["REDIS_URL"], [*rules, f"~{tasks.agent_unacked_pattern(mine)}"]) as (_, url):
        client = redis.Redis.from_url(url)
        own = tasks.agent_unacked_keys(mine)
        assert sorted(own) == ["unacked_index_key", "unacked_key", "unacked_mutex_key"]
        client.hset(own["unacked_key"], "1", "message")
        client.zadd(own["unacked_index_key"], {"1": time.time()})
        client.set(own["unacked_mutex_key"], "token")
        assert client.delete(*own.values()) == 3
        for key in [*tasks.agent_unacked_keys(other).values(), *WORKERS_KEYS]:
            for command in (("HGETALL", key), ("DEL", key)):
                with pytest.raises(redis.exceptions.NoPermissionError):
                    client.execute_command(*command)


@pytest.mark.parametrize("name", ["g5:messages", "g5*", "g5[x]", ""])
def test_an_agent_refuses_a_machine_type_its_keys_cannot_keep_apart(service_env: dict[str, str], name: str) -> None:
    """AGENT_MACHINE_TYPE with ':' or a glob character (or none): exit 2 with a one-line message, before connecting."""
    nobody = "redis://127.0.0.1:1/0"  # nothing listens there: it must stop before connecting
    env = {**os.environ, **service_env, "AGENT_MACHINE_TYPE": name, "REDIS_URL": nobody}
    done = subprocess.run(
        [sys.executable, "-m", "gpu_agent"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr == f"error: AGENT_MACHINE_TYPE={name!r} is not a machine type name\n"
    with pytest.raises(ValueError, match="not a machine type name"):
        tasks.agent_unacked_keys(name)


@pytest.fixture
def agents(service_env: dict[str, str], tmp_path: Path) -> Iterator[tuple[Stack, str, str]]:
    """Slow local agents under one ACL user (ACL_RULES): yields the stack, the user's name and its Redis URL."""
    with redis_user(service_env["REDIS_URL"], agent_rules(service_env["REDIS_URL"])) as (name, url):
        stack = Stack({**service_env, "REDIS_URL": url}, tmp_path)
        stack.env.update(SLOW_AGENT)
        try:
            yield stack, name, url
        finally:
            for proc in list(stack.procs):
                stack.stop(proc, signal.SIGKILL)


def test_killed_agents_message_is_restored_to_its_queue_by_the_next_agent(
    service_env: dict[str, str], clean_db: None, agents: tuple[Stack, str, str]
) -> None:
    """kill -9 mid-task: the message waits in local's own keys; the next local agent puts it back on bench.local."""
    stack, name, _ = agents
    admin = redis.Redis.from_url(service_env["REDIS_URL"])
    own = tasks.agent_unacked_keys("local")
    stack.start("agent")
    send_first_conv()
    wait_until(lambda: len(stored()) >= 2, 90, "two stored layer rows", log=lambda: stack.log("agent"))
    assert stack.stop("agent", signal.SIGKILL) == -signal.SIGKILL
    before = stored()
    tags = admin.hkeys(own["unacked_key"])
    assert len(tags) == 1 and queued_tasks("bench.local") == []  # in flight, in local's keys only
    assert not admin.hexists("unacked", tags[0]) and admin.zscore("unacked_index", tags[0]) is None
    taken_at = admin.zscore(own["unacked_index_key"], tags[0])
    assert taken_at is not None

    stack.env["VISIBILITY_TIMEOUT_S"] = "2"  # the next agent restores it at start, once this old
    time.sleep(max(0.0, taken_at + 2.5 - time.time()))
    stack.start("agent")
    wait_until(
        lambda: len(stored()) >= len(BATCH_SIZES), 120, "every batch size stored",
        log=lambda: f"{denials(admin, name)}\n{stack.log('agent')[-3000:]}",
    )  # fmt: skip
    final = stored()  # the second agent consumes only bench.local: the message came back there
    assert final[: len(before)] == before and sorted(r["batch_size"] for r in final) == BATCH_SIZES
    wait_until(  # acknowledged after storing
        lambda: not (admin.hlen(own["unacked_key"]) or admin.zcard(own["unacked_index_key"])), 30,
        "local's unacked keys to empty", log=lambda: stack.log("agent"),
    )  # fmt: skip
    assert stack.stop("agent") == 0
    assert denials(admin, name) == []
