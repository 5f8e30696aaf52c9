"""Fault injection with real processes: workers, a beat, agents in process groups of their own (so `kill -9`
takes a whole worker with its pool), and a PostgreSQL and Redis of a test's own to restart."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

import psycopg2
import psycopg2.extras
import redis

from shared.core import tasks
from shared.core.db import one, transaction
from tests.support.agent_role import agent_url
from tests.support.stack import ROOT, Stack, free_port, http
from tests.support.tlskit import PG_BIN, PG_USER, as_postgres, redis_server_binary
from tests.support.wait import job_finished, wait_until

T = TypeVar("T")
BIN = Path(sys.executable).parent
# Rows per unique key of layer_benchmarks beyond the first: the duplicates a fault could cause.
DUPLICATES = """
SELECT COALESCE(sum(n - 1), 0) AS n FROM (
    SELECT count(*) AS n FROM layer_benchmarks
    GROUP BY signature_id, machine_type, batch_size, precision, environment_id) g"""
WAITING_ON = """
SELECT count(*) AS n FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND query ILIKE %s"""


def until(what: str, check: Callable[[], T | None], timeout: float = 120, log: Callable[[], str] = str) -> T:
    """Poll check() until it returns something truthy; fail saying what was awaited (not a timing assertion)."""
    return wait_until(check, timeout, what, interval=0.2, log=log)


class FaultStack(Stack):
    """The Stack, plus any number of workers, one beat and agents, each killable as a whole process group."""

    def __init__(self, env: dict[str, str], logs: Path, **settings: str) -> None:
        super().__init__(env, logs)
        # A killed agent stops counting as busy soon; short retries keep the tests quick.
        quick = {"AGENT_HEARTBEAT_S": "1", "AGENT_ALIVE_AFTER_S": "4", "AGENT_DB_RETRY_S": "1"}
        quick |= {"RECONCILE_AFTER_S": "3", "BENCH_TIME_CAP_S": "0.05"}
        self.env |= quick | settings
        self.groups: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, name: str, command: list[str] | None = None, **extra_env: str) -> None:
        """Start worker*, beat or agent* (or the command given, by that name) in a session of its own."""
        if command is not None:
            pass
        elif name.startswith("worker"):
            command = [str(BIN / "celery"), "-A", "worker.app", "worker", "-Q", "jobs", "--concurrency", "2"]
            command += tasks.WORKER_FLAGS
            command += ["--loglevel", "INFO", "-n", f"{name}@%h"]
        elif name == "beat":
            command = [str(BIN / "celery"), "-A", "worker.app", "beat", "--loglevel", "INFO"]
            command += ["--schedule", str(self.logs / "beat-schedule")]
        else:
            command = [sys.executable, "-m", "gpu_agent"]
        env = {**self.env, **extra_env}
        if name.startswith("agent"):
            env["DATABASE_URL"] = agent_url(env["DATABASE_URL"])
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        self.groups[name] = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Signal a whole process group (a worker's pool children too) and reap its leader."""
        proc = self.groups.pop(name)
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def revive(self) -> list[str]:
        """Start again the processes that exited, as a supervisor (compose restart policy, systemd) would."""
        gone = [name for name, proc in self.groups.items() if proc.poll() is not None]
        for name in gone:
            self.groups.pop(name)
            self.spawn(name)
        return gone

    def close(self) -> None:
        """Stop everything this stack started."""
        for name in list(self.groups):
            self.kill(name, signal.SIGKILL)
        for name in list(self.procs):
            self.stop(name, signal.SIGKILL)

    def logs_of(self, *names: str) -> str:
        """The named processes' logs, for failure messages."""
        return "\n".join(f"--- {n}\n{self.log(n)[-2500:]}" for n in names if (self.logs / f"{n}.log").exists())

    def submit(self, body: dict[str, Any]) -> str:
        """POST a job; its id."""
        r = http.post(f"{self.url}/v1/jobs", json=body)
        assert r.status_code == 202, r.text
        return str(r.json()["id"])

    def job(self, job_id: str) -> dict[str, Any]:
        """GET a job."""
        r = http.get(f"{self.url}/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        return dict(r.json())

    def finished(self, job_id: str, timeout: float = 180) -> dict[str, Any]:
        """Poll a job until it ends."""
        return job_finished(lambda: self.job(job_id), job_id, timeout,
                            lambda: self.logs_of("worker", "worker2", "beat", "agent", "agent2"))  # fmt: skip


def duplicates(url: str | None = None) -> int:
    """Measurements stored twice under layer_benchmarks' unique key (the key makes this 0 unless it is lost)."""
    with transaction(url) as cur:
        cur.execute(DUPLICATES)
        return int(one(cur)["n"])


@contextmanager
def lock_table(table: str, url: str | None = None) -> Iterator[Callable[[], int]]:
    """Hold a lock that blocks every read and write of a table; yields a count of sessions waiting on it."""
    conn = psycopg2.connect(url or os.environ["DATABASE_URL"])
    try:
        with conn.cursor() as cur:
            cur.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")

        def waiting() -> int:
            with transaction(url) as cur:
                cur.execute(WAITING_ON, (f"%{table}%",))
                return int(one(cur)["n"])

        yield waiting
    finally:
        conn.rollback()
        conn.close()


class OwnRedis:
    """A redis-server of the test's own, without persistence, to restart."""

    def __init__(self, directory: Path) -> None:
        self.port, self.directory = free_port(), directory
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Its URL (database 0)."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start it and wait until it answers."""
        command = [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--dir", str(self.directory)]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        until("redis-server to answer", lambda: _pings(self.url), 30)

    def stop(self) -> None:
        """Kill it: what it held in memory is gone."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def _pings(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url).ping())
    except redis.ConnectionError:
        return False


class OwnPostgres:
    """A PostgreSQL cluster of the test's own (trust auth on 127.0.0.1), to stop and start mid-job."""

    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="traincast-faults-pg-"))
        self.data, self.port = self.base / "data", free_port()
        if os.geteuid() == 0:
            shutil.chown(self.base, PG_USER, PG_USER)
        initdb = [str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
        subprocess.run(as_postgres(initdb), check=True, capture_output=True, timeout=120)
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {self.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.base}'\n"
                "fsync = off\nmax_connections = 60\n"
            )

    @property
    def admin_url(self) -> str:
        """The superuser's URL to its postgres database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        """Start the server and wait until it takes connections."""
        command = [str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.base / "log"), "-w", "-t", "60"]
        subprocess.run(as_postgres([*command, "start"]), check=True, capture_output=True, timeout=90)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (fast: sessions are ended, as a restart ends them)."""
        command = [str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop"]
        subprocess.run(as_postgres(command), capture_output=True, timeout=90)

    def remove(self) -> None:
        """Stop it and delete its files."""
        self.stop("immediate")
        shutil.rmtree(self.base, ignore_errors=True)


def copy_api_keys(from_url: str, to_url: str) -> None:
    """Give another database this run's API keys (the shared http client sends the admin one)."""
    with psycopg2.connect(from_url) as src, src.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
        cur.execute("SELECT to_regclass('api_keys') IS NOT NULL AS present")
        if not one(cur)["present"]:
            return
        cur.execute("SELECT * FROM api_keys")
        rows = cur.fetchall()
    with psycopg2.connect(to_url) as dst, dst.cursor() as cur:
        for row in rows:
            columns = list(row)
            cur.execute(
                f"INSERT INTO api_keys ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})",
                [row[c] for c in columns],
            )
    dst.close()
    src.close()
