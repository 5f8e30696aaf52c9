"""The agent's PostgreSQL role: its own code paths work under it, and nothing else does."""

import logging
import time
from collections.abc import Iterator
from typing import Any

import psycopg2
import psycopg2.errors
import pytest

from gpu_agent import environment, lifecycle, store
from gpu_agent.timing import Timing
from gpu_agent.windows import Outcome
from shared.core.db import Json, one, transaction
from shared.core.settings import get_settings
from shared.training import TrainConfig
from tests.support.agent_role import AGENT_LOGIN, agent_url
from tests.support.wait import wait_until

GRANTED_TABLES = {
    "environments",
    "input_rates",
    "allreduce_timings",
    "layer_benchmarks",
    "op_benchmarks",
    "step_measurements",
    "step_failures",
    "agents",
    "layer_failures",
    "op_failures",
    "agent_logins",
}
TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")
PUBLIC_TABLES = "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
HAS_TABLE_PRIVILEGE = "SELECT has_table_privilege(%s, %s, %s) AS granted"
COLUMN_GRANTS = """
SELECT DISTINCT table_name FROM information_schema.column_privileges
WHERE grantee = 'traincast_agent' AND table_schema = 'public'"""
NEW_SIGNATURE = "INSERT INTO conv_signatures (hash, spec) VALUES (%s, %s) RETURNING id"
NEW_CNN = """
INSERT INTO cnns (name, source, definition) VALUES ('role-test-cnn', 'json', '{"image_size": 32}')
ON CONFLICT DO NOTHING"""
AGENT_ROW = "SELECT * FROM agents WHERE id = %s"
# Each must fail as the agent: secrets and other tables unreadable, nothing it stored rewritable.
DENIED = [
    "SELECT id FROM jobs",
    "SELECT params FROM predictor_models",
    "SELECT graph FROM cnns",
    "SELECT spec FROM conv_signatures",
    "SELECT name FROM machine_types",
    "SELECT version FROM schema_migrations",
    "SELECT forward_ms FROM layer_benchmarks",
    "SELECT details FROM environments",
    "SELECT host FROM agents",
    "INSERT INTO agent_logins (role, machine_type) VALUES (current_user, 'g5.xlarge')",
    "DELETE FROM agent_logins",
    "INSERT INTO jobs (id, request, request_hash) VALUES (gen_random_uuid(), '{}', 'x')",
    "UPDATE jobs SET status = 'failed'",
    "UPDATE layer_benchmarks SET forward_ms = 0",
    "UPDATE environments SET details = '{}'",
    "UPDATE agents SET machine_type = 'local'",
    "UPDATE machine_types SET price_usd_per_hour = 0",
    "DELETE FROM agents",
    "DELETE FROM layer_benchmarks",
    "TRUNCATE step_measurements",
    "SELECT setval('layer_benchmarks_id_seq', 1)",
    "CREATE TABLE public.agent_made (x int)",
]


def timing(ms: float) -> Timing:
    """A made-up timing: these tests check storage rights, not measurement."""
    return Timing(ms, ms, ms, 0.0, 0.0, 3, 3, 3, 0.0, 1, 0, True)


@pytest.fixture
def as_agent(service_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """This process's agent code connects as the agent's login role; yields its URL."""
    url = agent_url(service_env["DATABASE_URL"])
    monkeypatch.setenv("DATABASE_URL", url)
    get_settings.cache_clear()
    environment.environment_id.cache_clear()  # its cached id was stored as the owner
    yield url
    get_settings.cache_clear()


def test_the_agent_stores_measurements_and_keeps_its_row(
    as_agent: str, service_env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Registration, heartbeats, status, stop, environment, layer and step rows: all as the agent role."""
    owner = service_env["DATABASE_URL"]
    assert get_settings().database_url == as_agent
    with transaction() as cur:
        cur.execute("SELECT current_user AS me")
        assert one(cur)["me"] == AGENT_LOGIN
    with transaction(owner) as cur:  # what a worker planned: a signature and a CNN
        cur.execute(NEW_SIGNATURE, (f"role-test-{time.time_ns()}", Json({"kernel": [3, 3]})))
        sig_id = one(cur)["id"]
        cur.execute(NEW_CNN)

    env_id = environment.environment_id("cpu")
    environment.environment_id.cache_clear()
    assert environment.environment_id("cpu") == env_id  # the stored environment is found again

    caplog.set_level(logging.WARNING, logger=lifecycle.__name__)
    me = lifecycle.start(machine_type="local", device="cpu", environment_id=env_id, interval_s=0.2)
    try:
        first = _agent_row(owner, me.id)
        wait_until(lambda: _agent_row(owner, me.id)["heartbeat_at"] > first["heartbeat_at"], 10, "a heartbeat", 0.05)
        lifecycle.set_work({"task": "role-test"})
        lifecycle.record_error("role-test: boom")
    finally:
        lifecycle.stop()
    row = _agent_row(owner, me.id)
    assert row["current_work"] is None and row["stopped_at"] is not None  # stop clears the work
    assert row["last_error"] == "role-test: boom"
    # Status writes swallow their errors (a heartbeat must not fail a measurement): look for them.
    assert not [r for r in caplog.records if "status write failed" in r.getMessage()]

    layer = {"signature_id": sig_id, "machine_type": "local", "precision": "fp32", "environment_id": env_id}
    phases = {p: timing(1.5) for p in ("forward", "backward_data", "backward_weight")}
    store.save_layer(**layer, batch_size=2, outcome=Outcome(timings=phases, window=(2, 4)))
    store.save_layer(**layer, batch_size=4, outcome=Outcome(oom=True, reason="out of memory"))
    store.save_layer(**layer, batch_size=2, outcome=Outcome(timings=phases))  # redelivered: nothing new
    assert store.layer_batch_sizes_done(**layer) == {2, 4}
    store.save_layer_failure(**layer, batch_sizes=[8], error="RuntimeError: role-test")
    with transaction(owner) as cur:
        cur.execute("SELECT error FROM layer_failures WHERE signature_id = %s", (sig_id,))
        assert one(cur)["error"] == "RuntimeError: role-test"

    step: dict[str, Any] = {"cnn": "role-test-cnn", "machine_type": "local", "image_size": 32, "config": TrainConfig()}
    step |= {"environment_id": env_id}
    measured = Outcome(timings={"step": timing(9.0)}, info={"peak_memory_bytes": 2**20})
    store.save_step(**step, batch_size=8, outcome=measured)
    store.save_step(**step, batch_size=1, outcome=Outcome(reason="Expected more than 1 value per channel"))
    assert store.step_batch_sizes_done(**step) == {1, 8}
    with transaction(owner) as cur:
        cur.execute("SELECT peak_memory_bytes FROM step_measurements WHERE cnn_name = 'role-test-cnn'")
        assert one(cur)["peak_memory_bytes"] == 2**20


def test_the_agent_role_is_denied_everything_else(as_agent: str) -> None:
    """Other tables, other columns, rewriting stored rows, creating objects: permission denied."""
    conn = psycopg2.connect(as_agent)
    try:
        for sql in DENIED:
            with pytest.raises(psycopg2.errors.InsufficientPrivilege, match="permission denied"), conn.cursor() as cur:
                cur.execute(sql)
            conn.rollback()
    finally:
        conn.close()


def test_the_agent_role_has_column_grants_on_its_tables_only() -> None:
    """No table-wide privilege anywhere; column grants only on the tables the agent writes."""
    with transaction() as cur:
        cur.execute(PUBLIC_TABLES)
        tables = [r["tablename"] for r in cur.fetchall()]
        assert set(tables) >= GRANTED_TABLES and "jobs" in tables
        for table in tables:
            for privilege in TABLE_PRIVILEGES:
                cur.execute(HAS_TABLE_PRIVILEGE, ("traincast_agent", f"public.{table}", privilege))
                assert not one(cur)["granted"], f"{privilege} on {table}"
        cur.execute(COLUMN_GRANTS)
        assert {r["table_name"] for r in cur.fetchall()} == GRANTED_TABLES


def _agent_row(owner_url: str, agent_id: Any) -> dict[str, Any]:
    with transaction(owner_url) as cur:
        cur.execute(AGENT_ROW, (agent_id,))
        return one(cur)
