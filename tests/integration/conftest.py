"""Integration fixtures: a database and Redis database of this run's own, and the real processes."""

import os
from collections.abc import Iterator

import pytest

from shared.core import tasks
from shared.core.db import transaction
from shared.core.settings import get_settings
from tests.support.services import fresh_database, fresh_redis_db, servers
from tests.support.stack import ADMIN_RATE_PER_S, Stack, broker, http, running

# The files whose tests took longest together (a fresh clone's run, 2026-11-29: test_faults.py 189 s, the rest
# 62-32 s, the median file 12 s) go first: a worker takes a whole file at a time (--dist loadfile), so one started
# last would keep a worker busy long after the other had run out of files (longest first ends them together).
LONGEST_FIRST = (
    "test_faults.py", "test_web.py", "test_embedded.py", "test_agent_measure.py", "test_bundles.py",
    "test_input_pipeline.py", "test_gpu_run.py", "test_end_to_end.py", "test_fleet_e2e.py", "test_fleet_boot.py",
    "test_compose_redis_server.py", "test_up.py",
)  # fmt: skip
TRUNCATE = """
TRUNCATE jobs, predictor_models, step_measurements, layer_benchmarks, op_benchmarks, cnn_ops, op_signatures,
         cnn_layers, conv_signatures, cnns, fleet_instances, fleet_targets, fleet_events,
         reference_conv_times, input_rates, allreduce_timings CASCADE"""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The LONGEST_FIRST files' tests first, in that order; every file's tests stay together and in their order."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="session", autouse=True)
def service_env() -> Iterator[dict[str, str]]:
    """Point every Traincast setting of this process at this run's own database and Redis db."""
    with servers() as (admin_db, redis_server), fresh_database(admin_db) as db_url, fresh_redis_db(redis_server) as r:
        # Tests send wrong keys on purpose, all from 127.0.0.1: failed authentication is throttled in a test of its own.
        env = {"DATABASE_URL": db_url, "REDIS_URL": r, "BENCH_TIME_CAP_S": "0.2", "API_AUTH_FAILURES_PER_MIN": "1e6"}
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
