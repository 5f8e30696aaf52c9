"""Integration fixtures: a database and Redis database of this run's own, and the real processes."""

import os
from collections.abc import Iterator

import pytest

from shared.core import tasks
from shared.core.db import transaction
from shared.core.settings import get_settings
from tests.support.services import fresh_database, fresh_redis_db, servers
from tests.support.stack import ADMIN_RATE_PER_S, Stack, broker, http, running

TRUNCATE = """
TRUNCATE jobs, predictor_models, step_measurements, layer_benchmarks, op_benchmarks, cnn_ops, op_signatures,
         cnn_layers, conv_signatures, cnns, fleet_instances, fleet_targets, fleet_events,
         reference_conv_times, input_rates, allreduce_timings CASCADE"""


@pytest.fixture(scope="session", autouse=True)
def service_env() -> Iterator[dict[str, str]]:
    """Point every Traincast setting of this process at this run's own database and Redis db."""
    with servers() as (admin_db, redis_server), fresh_database(admin_db) as db_url, fresh_redis_db(redis_server) as r:
        # Tests send wrong keys on purpose, all from 127.0.0.1: failed authentication is throttled in a test of its own.
        # No warm-up in the workers tests start (tests/integration/test_warmup.py starts one that does).
        env = {
            "DATABASE_URL": db_url, "REDIS_URL": r, "BENCH_TIME_CAP_S": "0.2", "API_AUTH_FAILURES_PER_MIN": "1e6",
            "WARM_ON_START": "0",
        }  # fmt: skip
        os.environ.update(env)
        get_settings.cache_clear()
        tasks.reset_client()
        from shared.core.migrate import migrate

        migrate(db_url)
        from shared import keys

        # Per-key job and benchmark budgets are tested with keys of their own (tests/integration/test_key_limits.py).
        _row, admin_key = keys.create(
            name="tests-admin",
            scope="admin",
            rate_per_s=ADMIN_RATE_PER_S,
            max_unfinished_jobs=100_000,
            bench_seconds_per_day=1e9,
        )
        # In os.environ, so the Stack's processes, the CLI run as a subprocess and in-process all use it.
        os.environ["TRAINCAST_API_KEY"] = admin_key
        http.headers["Authorization"] = f"Bearer {admin_key}"
        yield {**env, "TRAINCAST_API_KEY": admin_key}


def clean() -> None:
    """Empty the data tables (machine catalog and environments stay: agents cache their id) and the queues."""
    with transaction() as cur:
        cur.execute(TRUNCATE)
    broker().flushdb()


@pytest.fixture(scope="module", autouse=True)
def fresh_tables(service_env: dict[str, str]) -> None:
    """Each test file starts from empty data tables and queues, whichever file its pytest-xdist worker ran before."""
    clean()


@pytest.fixture
def clean_db() -> Iterator[None]:
    """A test that starts from empty data tables and queues."""
    clean()
    yield


def started(
    env: dict[str, str], tmp: pytest.TempPathFactory, label: str, processes: tuple[str, ...]
) -> Iterator[Stack]:
    """A module's Stack, started on empty tables: nothing another module left (models, jobs, queued work)."""
    clean()
    yield from running(env, tmp, label, processes)


@pytest.fixture(scope="module")
def api_only(service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Just the HTTP server (no worker or agent)."""
    yield from started(service_env, tmp_path_factory, "api", ("api",))


@pytest.fixture(scope="module")
def no_agent(service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The API and a worker; no benchmark agent anywhere."""
    yield from started(service_env, tmp_path_factory, "no-agent", ("api", "worker"))


@pytest.fixture(scope="module")
def full_stack(service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """API, worker and local agent."""
    yield from started(service_env, tmp_path_factory, "stack", ("api", "worker", "agent"))
