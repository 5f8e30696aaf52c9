"""The real processes (API, worker, agent, fleet) as a Stack, and the HTTP client and helpers the tests share."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis

from api import server
from shared.core import tasks
from shared.core.settings import get_settings
from tests.support.agent_role import agent_url

ROOT = Path(__file__).resolve().parents[2]
# One client for the tests' HTTP calls; a loaded 2-core box can answer slowly. service_env
# (tests/integration/conftest.py) gives it this run's admin key as a default Authorization header, so every call is
# an admin's unless a test sends another key.
http = httpx.Client(timeout=30)
# The tests poll fast; their own rate limit is tested with keys of their own (tests/integration/test_keys.py).
ADMIN_RATE_PER_S = 10_000.0


def admin_key() -> str:
    """This run's admin API key (made by tests/integration/conftest.py's service_env)."""
    return os.environ["TRAINCAST_API_KEY"]


def bearer(key: str) -> dict[str, str]:
    """The Authorization header of an API key."""
    return {"Authorization": f"Bearer {key}"}


def broker() -> redis.Redis:
    """This run's Redis database."""
    return redis.Redis.from_url(get_settings().redis_url)


def queued_tasks(queue: str) -> list[str]:
    """Names of the tasks waiting in a Celery queue."""
    import json

    return [json.loads(m)["headers"]["task"] for m in broker().lrange(queue, 0, -1)]


def settled(machine_type: str) -> bool:
    """No message waits in the type's bench queue and none is delivered but unacknowledged: none can come again."""
    from shared.core import tasks

    # kombu's Redis transport keeps delivered, unacknowledged messages in a hash (the agent's own, per machine type)
    # until they are acknowledged or restored to the queue.
    unacked = tasks.agent_unacked_keys(machine_type)["unacked_key"]
    return not broker().llen(tasks.bench_queue(machine_type)) and not broker().hlen(unacked)


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def at_once(count: int, send: Callable[[int], httpx.Response]) -> list[httpx.Response]:
    """`send(i)` for i in range(count), each in its own thread, all released together."""
    start, answers = threading.Barrier(count), [httpx.Response(0)] * count

    def one(i: int) -> None:
        start.wait()
        answers[i] = send(i)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return answers


class Stack:
    """The API, a worker and a local agent as real processes."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **env, "RECONCILE_AFTER_S": "5", "RECONCILE_EVERY_S": "2"}
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, **extra_env: str) -> None:
        """Start one of api, worker, agent, fleet (with settings of its own, if given)."""
        bindir = Path(sys.executable).parent
        commands = {
            "api": server.command(str(bindir / "uvicorn"), host="127.0.0.1", port=self.port),
            "worker": [
                str(bindir / "celery"),
                "-A",
                "worker.app",
                "worker",
                "-B",
                "-Q",
                "jobs",
                *tasks.WORKER_FLAGS,
                "--concurrency",
                "2",
                "--loglevel",
                "INFO",
                "--schedule",
                str(self.logs / "beat-schedule"),
            ],
            "agent": [sys.executable, "-m", "gpu_agent"],
            "fleet": [sys.executable, "-m", "fleet"],
        }
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        env = {**self.env, **extra_env}
        if name == "agent":
            # The agent logs in with only the grants of its role (migrations/0007_agent_role.sql), as in
            # production, so every end-to-end test proves those grants suffice (tests/support/agent_role.py).
            env = {**env, "DATABASE_URL": agent_url(env["DATABASE_URL"])}
        self.procs[name] = subprocess.Popen(commands[name], cwd=ROOT, env=env, stdout=log, stderr=log)

    def stop(self, name: str, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        """Stop one process and return its exit code."""
        proc = self.procs.pop(name)
        proc.send_signal(sig)
        return _reaped(proc, time.monotonic() + timeout)

    def stop_all(self, timeout: float = 60) -> None:
        """Stop every process: all told at once, so their shutdowns overlap instead of queueing."""
        procs = [self.procs.pop(name) for name in list(self.procs)]
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in procs:
            _reaped(proc, deadline)

    def wait_ready(self, timeout: float = 60) -> None:
        """Wait until the API answers /readyz."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"API not ready; log: {(self.logs / 'api.log').read_text()[-2000:]}")

    def log(self, name: str) -> str:
        """What a process has printed so far."""
        return (self.logs / f"{name}.log").read_text(errors="replace")


def _reaped(proc: subprocess.Popen[bytes], deadline: float) -> int:
    """A signalled process's exit code once it has gone; killed if still there at the deadline."""
    try:
        return proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def running(
    env: dict[str, str], tmp: pytest.TempPathFactory, label: str, processes: tuple[str, ...]
) -> Iterator[Stack]:
    """A Stack of these processes, ready, and stopped afterwards."""
    stack = Stack(env, tmp.mktemp(label))
    for name in processes:
        stack.start(name)
    stack.wait_ready()
    yield stack
    stack.stop_all()
