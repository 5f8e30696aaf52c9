"""Fault injection with real processes (docs/RELIABILITY.md): every job ends, none is lost, nothing is measured twice.

Faults are placed without timing: a worker is killed while PostgreSQL shows it waiting on a lock the test
holds on a table only that step touches (cnn_workloads while planning, predictor_models while assembling).
"""

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg2
import pytest

from shared.core.db import one, transaction
from shared.core.migrate import migrate
from tests.support.faultkit import (
    FaultStack,
    OwnPostgres,
    OwnRedis,
    copy_api_keys,
    duplicates,
    lock_table,
    until,
)
from tests.support.stack import broker, free_port, http

JOB = {"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [1], "image_size": 32, "epochs": 2}
BUSY_AGENTS = "SELECT count(*) AS n FROM agents WHERE current_work IS NOT NULL AND stopped_at IS NULL"


@pytest.fixture(scope="module")
def api(service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultStack]:
    """The API, on this run's database and Redis db, for the module."""
    fault = FaultStack(service_env, tmp_path_factory.mktemp("faults"), BENCH_STUCK_AFTER_S="3")
    fault.start("api")
    fault.wait_ready()
    yield fault
    fault.close()


@pytest.fixture
def stack(api: FaultStack, clean_db: None) -> Iterator[FaultStack]:
    """The API with empty tables and queues; a test spawns the rest, which is killed after it."""
    for name in ("worker", "worker2", "beat", "agent", "agent2"):
        (api.logs / f"{name}.log").unlink(missing_ok=True)
    yield api
    for name in list(api.groups):
        api.kill(name)


def measurements(url: str | None = None) -> int:
    """Layer benchmark rows stored."""
    with transaction(url) as cur:
        cur.execute("SELECT count(*) AS n FROM layer_benchmarks")
        return int(one(cur)["n"])


def busy_agents() -> int:
    """Agents that say they are measuring now."""
    with transaction() as cur:
        cur.execute(BUSY_AGENTS)
        return int(one(cur)["n"])


def test_worker_killed_while_planning(stack: FaultStack) -> None:
    """kill -9 of the whole worker while it plans: the reconciler plans the job again and it succeeds."""
    stack.spawn("beat")
    stack.spawn("worker")
    with lock_table("cnn_workloads") as waiting:
        job_id = stack.submit(JOB)
        until("the worker to be planning", waiting, log=lambda: stack.logs_of("worker"))
        stack.kill("worker")
    assert stack.job(job_id)["status"] == "queued"
    stack.spawn("worker")
    stack.spawn("agent")
    assert stack.finished(job_id)["status"] == "succeeded"
    assert duplicates() == 0


def test_worker_killed_while_assembling(stack: FaultStack) -> None:
    """kill -9 of the whole worker while it assembles a result: the reconciler finishes the job."""
    stack.spawn("beat")
    stack.spawn("worker")
    job_id = stack.submit(JOB)
    until("the job to wait for benchmarks", lambda: stack.job(job_id)["status"] == "running")
    with lock_table("predictor_models") as waiting:
        stack.spawn("agent")
        until("the worker to be assembling", waiting, 240, lambda: stack.logs_of("worker", "agent"))
        stack.kill("worker")
    assert stack.job(job_id)["status"] == "running"
    stack.spawn("worker")
    assert stack.finished(job_id)["status"] == "succeeded"
    assert duplicates() == 0


def test_agent_killed_mid_benchmark(stack: FaultStack) -> None:
    """kill -9 of the agent while it measures: its unacknowledged task is re-sent once it is not alive."""
    stack.spawn("beat")
    stack.spawn("worker")
    stack.spawn("agent")
    job_id = stack.submit(JOB)
    until("the agent to be measuring", busy_agents, log=lambda: stack.logs_of("agent"))
    stack.kill("agent")
    stack.spawn("agent2")
    assert stack.finished(job_id)["status"] == "succeeded"
    assert duplicates() == 0


def test_cancel_during_planning(stack: FaultStack) -> None:
    """A cancel while the worker plans is not undone, and no benchmark work is left queued for it."""
    stack.spawn("worker")
    with lock_table("cnn_workloads") as waiting:
        job_id = stack.submit(JOB)
        until("the worker to be planning", waiting, log=lambda: stack.logs_of("worker"))
        assert http.post(f"{stack.url}/v1/jobs/{job_id}/cancel").status_code == 200
    until("planning to end", lambda: "worker.plan_job" in stack.log("worker") and "succeeded in" in stack.log("worker"))
    job = stack.job(job_id)
    assert job["status"] == "canceled" and job.get("result") is None
    assert broker().llen("bench.local") == 0


def test_hung_agent_task(stack: FaultStack) -> None:
    """An agent hung inside a measurement (heartbeat still going): its work is re-sent to another agent."""
    stack.spawn("beat")
    stack.spawn("worker")
    stack.spawn("agent", command=[sys.executable, "-m", "tests.support.hanging_agent"])
    job_id = stack.submit(JOB)
    until("the agent to hang in a measurement", busy_agents, log=lambda: stack.logs_of("agent"))
    stack.spawn("agent2")
    assert stack.finished(job_id)["status"] == "succeeded"
    assert busy_agents() >= 1  # the hung one is still there, still "measuring"
    assert duplicates() == 0


def test_two_workers_and_one_beat(stack: FaultStack) -> None:
    """Two workers share the jobs; each job is assembled once; one beat schedules the reconciler."""
    stack.spawn("beat")
    stack.spawn("worker")
    stack.spawn("worker2")
    stack.spawn("agent")
    ids = [stack.submit({**JOB, "epochs": n}) for n in (2, 3, 4)]
    assert [stack.finished(i)["status"] for i in ids] == ["succeeded"] * 3
    assert duplicates() == 0
    assert "beat: Starting" in stack.log("beat")
    assert "beat: Starting" not in stack.log("worker") + stack.log("worker2")


@pytest.fixture
def own_servers(service_env: dict[str, str], tmp_path: Path) -> Iterator[tuple[OwnPostgres, OwnRedis, str]]:
    """A PostgreSQL and a Redis of this test's own (migrated database, this run's API keys), to restart."""
    pg, rd = OwnPostgres(), OwnRedis(tmp_path)
    try:
        pg.start()
        rd.start()
        conn = psycopg2.connect(pg.admin_url)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE traincast")
        conn.close()
        db_url = pg.admin_url.rsplit("/", 1)[0] + "/traincast"
        migrate(db_url)
        copy_api_keys(service_env["DATABASE_URL"], db_url)
        yield pg, rd, db_url
    finally:
        rd.stop()
        pg.remove()


def own_stack(service_env: dict[str, str], tmp_path: Path, db_url: str, redis_url: str) -> FaultStack:
    """The API, a beat, a worker and an agent on the test's own servers."""
    stack = FaultStack({**service_env, "DATABASE_URL": db_url, "REDIS_URL": redis_url}, tmp_path)
    stack.start("api")
    stack.wait_ready()
    for name in ("beat", "worker"):
        stack.spawn(name)
    return stack


def test_redis_restarted_with_jobs_in_flight(
    service_env: dict[str, str], tmp_path: Path, own_servers: tuple[OwnPostgres, OwnRedis, str]
) -> None:
    """Redis without persistence restarted while two jobs wait: their queued work is lost, re-sent, done."""
    _pg, rd, db_url = own_servers
    stack = own_stack(service_env, tmp_path, db_url, rd.url)
    try:
        ids = [stack.submit({**JOB, "epochs": n}) for n in (2, 3)]
        until("both jobs to be planned", lambda: all(stack.job(i)["status"] == "running" for i in ids))
        rd.stop()
        until("the worker to see Redis gone", lambda: "Connection to broker lost" in stack.log("worker"))
        rd.start()
        stack.spawn("agent")
        # Celery 5.7 / kombu 5.7 may exit on the lost connection ("Unrecoverable error: AttributeError ...
        # 'hostname'"); a supervisor restarts it, as compose's restart policy does.
        worker = stack.groups["worker"]
        until(
            "the worker to reconnect or exit",
            lambda: worker.poll() is not None or stack.log("worker").count("Connected to redis") >= 2,
        )
        assert set(stack.revive()) <= {"worker", "beat"}
        finished = [stack.finished(i) for i in ids]
        assert [f["status"] for f in finished] == ["succeeded"] * 2, (finished, stack.logs_of("worker"))
        assert duplicates(db_url) == 0
    finally:
        stack.close()


def test_postgres_restarted_mid_job(
    service_env: dict[str, str], tmp_path: Path, own_servers: tuple[OwnPostgres, OwnRedis, str]
) -> None:
    """PostgreSQL stopped while the agent measures: the API answers 503 with Retry-After (never 500); the job
    then finishes with nothing measured twice."""
    pg, rd, db_url = own_servers
    stack = own_stack(service_env, tmp_path, db_url, rd.url)
    try:
        stack.spawn("agent")
        job_id = stack.submit({**JOB, "batch_sizes": [1, 2]})
        until("a first measurement", lambda: measurements(db_url) > 0, log=lambda: stack.logs_of("agent"))
        pg.stop()
        answers = [http.get(f"{stack.url}/v1/jobs/{job_id}") for _ in range(3)]
        answers.append(http.post(f"{stack.url}/v1/jobs", json=JOB))
        assert [r.status_code for r in answers] == [503] * 4, [r.text for r in answers]
        pg.start()
        assert stack.finished(job_id)["status"] == "succeeded"
        assert duplicates(db_url) == 0
    finally:
        stack.close()


def test_postgres_down_answers_503_with_retry_after(service_env: dict[str, str], tmp_path: Path) -> None:
    """With PostgreSQL unreachable the API says when to come back."""
    dead = f"postgresql://postgres@127.0.0.1:{free_port()}/traincast"
    stack = FaultStack({**service_env, "DATABASE_URL": dead}, tmp_path)
    try:
        stack.start("api")
        r = until("the API to answer", lambda: _get(f"{stack.url}/v1/jobs"), log=lambda: stack.log("api"))
        assert r.status_code == 503
        assert int(r.headers.get("Retry-After", "0")) > 0
    finally:
        stack.close()


def _get(url: str) -> httpx.Response | None:
    try:
        return http.get(url)
    except httpx.TransportError:
        return None
