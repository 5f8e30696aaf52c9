"""Least privilege (migrations/0014_least_privilege.sql): an agent writes its machine types, a process its tables."""

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg2
import psycopg2.errors
import pytest

from fleet import store as fleet_store
from fleet.ec2 import LiveInstance
from gpu_agent import environment, store
from gpu_agent.windows import Outcome
from shared import agents, machine_types
from shared.core import logins
from shared.core.db import Json, one, transaction
from shared.core.settings import get_settings
from shared.training import TrainConfig
from tests.integration.test_agent_role import timing
from tests.integration.test_api_cnns import LAYERS, register
from tests.integration.test_reference_jobs import OWN_GPU
from tests.support.agent_role import AGENT_LOGIN, agent_url, as_user, login_role
from tests.support.stack import Stack, http
from tests.support.wait import job_finished

# A login of the agent's role mapped to `local` only (AGENT_LOGIN is mapped to every type the tests use).
LOCAL_ONLY = "traincast_agent_local_only"
# The logins `traincast db-logins` makes (shared/core/logins.py), here with no password: the cluster trusts 127.0.0.1.
LOGINS = {kind: login for kind, login in logins.LOGINS.items() if kind != "agent"}
OTHER = "g4dn.xlarge"
NEW_SIGNATURE = "INSERT INTO conv_signatures (hash, spec) VALUES (%s, %s) RETURNING id"
NEW_OP = "INSERT INTO op_signatures (hash, op, spec) VALUES (%s, 'relu', %s) RETURNING id"
OWNER_OP = """
INSERT INTO op_benchmarks (op_signature_id, machine_type, batch_size, variant, environment_id, oom)
VALUES (%s, %s, 16, 'fp32', %s, true)"""
NEW_CNN = """
INSERT INTO cnns (name, source, definition) VALUES ('lp-test-cnn', 'json', '{"image_size": 32}')
ON CONFLICT DO NOTHING"""
OWNER_LAYER = """
INSERT INTO layer_benchmarks (signature_id, machine_type, batch_size, precision, environment_id, oom)
VALUES (%s, %s, 16, 'fp32', %s, true)"""
AGENT_ON_INSTANCE = """
WITH e AS (INSERT INTO environments (hash, details) VALUES (%(hash)s, '{}') RETURNING id)
INSERT INTO agents (id, machine_type, host, pid, device, environment_id, started_at, instance_id)
SELECT gen_random_uuid(), %(machine_type)s, 'lp-host', 1, 'cuda', e.id, now(), %(instance)s FROM e"""
ROWS_OF = "SELECT count(*) AS n FROM {table} WHERE machine_type = %s"
RLS_TABLES = "SELECT relname, relforcerowsecurity FROM pg_class WHERE relrowsecurity AND relkind = 'r'"
# Roles that can read api_keys' hashes, other than superusers, predefined roles and those reading all data.
HASH_READERS = """
SELECT rolname FROM pg_roles
WHERE NOT rolsuper AND rolname NOT LIKE 'pg\\_%%' AND NOT pg_has_role(oid, 'pg_read_all_data', 'MEMBER')
  AND has_column_privilege(oid, 'public.api_keys', 'secret_sha256', 'SELECT')"""
MEMBERS_OF_API = "SELECT rolname FROM pg_roles WHERE pg_has_role(oid, 'traincast_api', 'MEMBER') AND NOT rolsuper"
# Each must fail for its role: a table its process never touches, or a write its process never makes.
DENIED = [
    ("api", "UPDATE layer_benchmarks SET forward_ms = 0"),
    # The API stores measurements only as new rows, for an admin's bundle import (migration 0033): never rewrites.
    ("api", "UPDATE step_measurements SET step_ms = 0"),
    ("api", "DELETE FROM op_benchmarks"),
    ("api", "SELECT params FROM predictor_models"),
    ("api", "UPDATE api_keys SET scope = 'admin'"),
    ("api", "UPDATE jobs SET result = '{}'"),
    ("api", "UPDATE cnns SET owner_key_id = NULL"),
    ("api", "DELETE FROM jobs"),
    ("api", "SELECT role FROM agent_logins"),
    ("api", "UPDATE environments SET details = '{}'"),  # an environment is written once, by its hash
    ("api", "SELECT version FROM schema_migrations"),
    ("worker", "SELECT secret_sha256 FROM api_keys"),
    ("worker", "SELECT name, scope FROM api_keys"),  # its one column there is bench_seconds_per_day (0028)
    ("worker", "UPDATE api_keys SET bench_seconds_per_day = 1e9"),
    ("worker", "INSERT INTO jobs (id, request, request_hash) VALUES (gen_random_uuid(), '{}', 'x')"),
    ("worker", "UPDATE layer_benchmarks SET forward_ms = 0"),
    ("worker", "DELETE FROM cnns"),
    ("worker", "UPDATE machine_types SET price_usd_per_hour = 0"),
    ("worker", "UPDATE agents SET machine_type = 'local'"),
    ("worker", "INSERT INTO fleet_targets (machine_type) VALUES ('local')"),
    ("worker", "INSERT INTO agent_logins (role, machine_type) VALUES (current_user, 'local')"),
    ("fleet", "SELECT id FROM api_keys"),
    ("fleet", "SELECT request FROM jobs"),
    ("fleet", "UPDATE jobs SET status = 'failed'"),
    ("fleet", "SELECT forward_ms FROM layer_benchmarks"),
    ("fleet", "SELECT host FROM agents"),
    ("fleet", "SELECT graph FROM cnns"),
    ("fleet", "UPDATE machine_types SET price_usd_per_hour = 0"),
    ("fleet", "DELETE FROM fleet_instances"),
    ("fleet", "SELECT details FROM environments"),
] + [(kind, "CREATE TABLE public.lp_made (x int)") for kind in ("api", "worker", "fleet")]


def role_url(owner_url: str, kind: str) -> str:
    """owner_url as a login in traincast_<kind>; creates that login if missing."""
    login_role(owner_url, LOGINS[kind], f"traincast_{kind}")
    return as_user(owner_url, LOGINS[kind])


@pytest.fixture
def local_agent(service_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """This process's agent code connects as an agent login mapped to `local` only; yields its URL."""
    url = agent_url(service_env["DATABASE_URL"], machine_types=("local",), login=LOCAL_ONLY)
    monkeypatch.setenv("DATABASE_URL", url)
    get_settings.cache_clear()
    environment.environment_id.cache_clear()  # its cached id was stored as the owner
    yield url
    get_settings.cache_clear()
    environment.environment_id.cache_clear()


def test_an_agent_stores_rows_only_for_its_machine_types(local_agent: str, service_env: dict[str, str]) -> None:
    """Mapped to local: layer, op, step, failure and agent rows of local are stored; of g4dn.xlarge refused."""
    owner = service_env["DATABASE_URL"]
    with transaction(owner) as cur:
        cur.execute(NEW_SIGNATURE, (f"lp-test-{time.time_ns()}", Json({"kernel": [3, 3]})))
        sig_id = one(cur)["id"]
        cur.execute(NEW_OP, (f"lp-test-{time.time_ns()}", Json({"op": "relu", "shape": [8], "args": {}})))
        op_id = one(cur)["id"]
        cur.execute(NEW_CNN)
    env_id = environment.environment_id("cpu")
    phases = {p: timing(1.5) for p in ("forward", "backward_data", "backward_weight")}
    step: dict[str, Any] = {"cnn": "lp-test-cnn", "image_size": 32, "config": TrainConfig()}
    step["environment_id"] = env_id
    host = f"lp-{uuid.uuid4().hex[:8]}"

    def writes(machine_type: str) -> list[Any]:
        layer = {"signature_id": sig_id, "machine_type": machine_type, "precision": "fp32", "environment_id": env_id}
        agent_row = {
            "id": uuid.uuid4(),
            "machine_type": machine_type,
            "host": host,
            "pid": 1,
            "device": "cpu",
            "env": env_id,
        }
        agent_row |= {"started_at": datetime.now(UTC), "instance": None, "description": None}
        op = {"signature_id": op_id, "machine_type": machine_type, "variant": "fp32", "environment_id": env_id}
        op_phases = {"forward": timing(0.2), "backward": timing(0.3)}
        return [
            lambda: store.save_layer(**layer, batch_size=2, outcome=Outcome(timings=phases)),
            lambda: store.save_op(**op, batch_size=2, outcome=Outcome(timings=op_phases)),
            lambda: store.save_layer_failure(**layer, batch_sizes=[8], error="RuntimeError: lp-test"),
            lambda: store.save_op_failure(**op, batch_sizes=[8], error="RuntimeError: lp-test"),
            lambda: store.save_step(
                **step, machine_type=machine_type, batch_size=8, outcome=Outcome(timings={"step": timing(9)})
            ),
            lambda: store.save_step(**step, machine_type=machine_type, batch_size=1, outcome=Outcome(reason="lp-test")),
            lambda: _as_agent(agents.UPSERT_AGENT, agent_row),
        ]

    for write in writes("local"):
        write()
    for write in writes(OTHER):
        with pytest.raises(psycopg2.errors.InsufficientPrivilege, match="row-level security"):
            write()
    tables: tuple[str, ...] = ("layer_benchmarks", "op_benchmarks", "layer_failures", "op_failures")
    tables += ("step_measurements", "step_failures", "agents")
    with transaction(owner) as cur:
        # Only this test's rows: other tests leave agents and measurements of these types behind.
        mine = {
            "layer_benchmarks": ("signature_id", sig_id),
            "layer_failures": ("signature_id", sig_id),
            "op_benchmarks": ("op_signature_id", op_id),
            "op_failures": ("op_signature_id", op_id),
            "step_measurements": ("cnn_name", "lp-test-cnn"),
            "step_failures": ("cnn_name", "lp-test-cnn"),
            "agents": ("host", host),
        }
        for table in tables:
            column, value = mine[table]
            sql = ROWS_OF.format(table=table) + f" AND environment_id = %s AND {column} = %s"
            cur.execute(sql, ("local", env_id, value))
            assert one(cur)["n"] >= 1, table
            cur.execute(sql, (OTHER, env_id, value))
            assert one(cur)["n"] == 0, table
        cur.execute(OWNER_LAYER, (sig_id, OTHER, env_id))  # another type's agent measured it
        cur.execute(OWNER_OP, (op_id, OTHER, env_id))
    layer = {"signature_id": sig_id, "precision": "fp32", "environment_id": env_id}
    assert store.layer_batch_sizes_done(**layer, machine_type="local") == {2}
    assert store.layer_batch_sizes_done(**layer, machine_type=OTHER) == set()  # another type's rows are not even read
    op = {"signature_id": op_id, "variant": "fp32", "environment_id": env_id}
    assert store.op_batch_sizes_done(**op, machine_type="local") == {2}
    assert store.op_batch_sizes_done(**op, machine_type=OTHER) == set()


def test_the_test_agent_login_is_mapped_to_the_types_the_tests_run(service_env: dict[str, str]) -> None:
    """The shared test login may write local and g4dn.xlarge (the end-to-end tests' agents) and nothing else."""
    agent_url(service_env["DATABASE_URL"])
    with transaction() as cur:
        cur.execute("SELECT machine_type FROM agent_logins WHERE role = %s", (AGENT_LOGIN,))
        assert {r["machine_type"] for r in cur.fetchall()} == {"local", OTHER}


def test_row_security_binds_every_role_but_the_owner() -> None:
    """RLS is on for the measurement tables, agents and agent_logins, and never forced on the owner."""
    with transaction() as cur:
        cur.execute(RLS_TABLES)
        rows = {r["relname"]: r["relforcerowsecurity"] for r in cur.fetchall()}
    tables = {"layer_benchmarks", "op_benchmarks", "step_measurements", "step_failures", "layer_failures", "agents"}
    tables |= {"op_failures", "agent_logins", "input_rates", "allreduce_timings"}
    assert rows == dict.fromkeys(tables, False)


def test_the_processes_run_as_their_roles(service_env: dict[str, str], clean_db: None, tmp_path: Path) -> None:
    """API and worker processes, each as its role's login, serve machines, CNNs, agents, fleet and a job to the end."""
    owner = service_env["DATABASE_URL"]
    stacks = {kind: Stack({**service_env, "DATABASE_URL": role_url(owner, kind)}, tmp_path / kind) for kind in LOGINS}
    stacks["agent"] = Stack(service_env, tmp_path / "agent")  # Stack runs its agent as AGENT_LOGIN
    for stack in stacks.values():
        stack.logs.mkdir()
    api = stacks["api"]
    try:
        api.start("api")
        stacks["worker"].start("worker")
        stacks["agent"].start("agent")
        api.wait_ready()

        machine_type = f"lp-gpu-{uuid.uuid4().hex[:6]}"
        assert http.post(f"{api.url}/v1/machines", json=OWN_GPU | {"name": machine_type}).status_code == 201
        assert machine_type in {m["name"] for m in http.get(f"{api.url}/v1/machines").json()["machines"]}
        cnn = f"lp-cnn-{uuid.uuid4().hex[:6]}"
        assert register(api, cnn, LAYERS, "layers.json").status_code == 201
        assert http.get(f"{api.url}/v1/cnns/{cnn}").status_code == 200
        assert http.delete(f"{api.url}/v1/cnns/{cnn}").status_code == 204
        assert http.put(f"{api.url}/v1/fleet/{OTHER}", json={"held": 0}).status_code == 200
        assert http.post(f"{api.url}/v1/fleet/{OTHER}/drain").status_code == 200
        assert http.get(f"{api.url}/v1/fleet").status_code == 200

        body = {"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [1, 2], "image_size": 32}
        job = _finished(api, http.post(f"{api.url}/v1/jobs", json=body).json()["id"], stacks)
        assert job["status"] == "succeeded", job
        assert any(a["machine_type"] == "local" for a in http.get(f"{api.url}/v1/agents").json()["agents"])
        scraped = http.get(f"{api.url}/metrics")  # every figure read as traincast_api (migrations/0020_metrics.sql)
        assert scraped.status_code == 200 and 'traincast_layer_benchmarks_done{machine_type="local"}' in scraped.text
        # A bundle exported and imported over HTTP, read and stored as traincast_api (migration 0033).
        bundle = http.get(f"{api.url}/v1/measurements", params={"machine_type": "local"})
        assert bundle.status_code == 200, bundle.text
        imported = http.post(f"{api.url}/v1/measurements", params={"as": f"local={machine_type}"},
                             content=bundle.content, headers={"Content-Type": "application/gzip"})  # fmt: skip
        assert imported.status_code == 200 and imported.json()["stored"]["layer"] > 0, imported.text
        canceled = http.post(f"{api.url}/v1/jobs", json=body | {"epochs": 3}).json()["id"]
        assert http.post(f"{api.url}/v1/jobs/{canceled}/cancel").status_code == 200
        # Connections are opened per transaction, so who each process logs in as is read from its environment.
        for kind, user in (("api", LOGINS["api"]), ("worker", LOGINS["worker"]), ("agent", AGENT_LOGIN)):
            environ = Path(f"/proc/{stacks[kind].procs[kind].pid}/environ").read_bytes().split(b"\0")
            url = next(v for v in environ if v.startswith(b"DATABASE_URL=")).decode().split("=", 1)[1]
            assert urlsplit(url).username == user, kind
    finally:
        for stack in stacks.values():
            for proc in list(stack.procs):
                stack.stop(proc)
    for kind, stack in stacks.items():
        for name in stack.logs.glob("*.log"):
            assert "permission denied" not in name.read_text(errors="replace"), f"{kind}: {name.name}"


def test_the_fleet_controller_store_runs_as_its_role(
    service_env: dict[str, str], clean_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every statement of fleet/store.py, as a login in traincast_fleet."""
    owner = service_env["DATABASE_URL"]
    launched_at = datetime.now(UTC) - timedelta(minutes=5)
    inst = LiveInstance(f"i-lp{uuid.uuid4().hex[:12]}", OTHER, launched_at, "spot", None)
    with transaction(owner) as cur:  # its agent, registered and beating
        cur.execute(
            AGENT_ON_INSTANCE, {"hash": f"lp-{uuid.uuid4()}", "machine_type": OTHER, "instance": inst.instance_id}
        )
    monkeypatch.setenv("DATABASE_URL", role_url(owner, "fleet"))
    get_settings.cache_clear()
    try:
        with transaction() as cur:
            cur.execute("SELECT current_user AS me")
            assert one(cur)["me"] == LOGINS["fleet"]
        assert OTHER in machine_types.aws_prices() and machine_types.vcpus(name=OTHER) == 4
        assert fleet_store.waiting_jobs() == {}
        assert fleet_store.adopt(inst, price=0.5) is not None
        assert inst.instance_id in fleet_store.running()
        assert fleet_store.agents_by_instance([inst.instance_id], alive_after_s=60) == {inst.instance_id: (True, False)}
        fleet_store.set_idle(inst.instance_id, idle=True)
        fleet_store.event(OTHER, "launched", "lp-test", instance_id=inst.instance_id)
        fleet_store.save_decision(OTHER, wanted=1, queued=0, waiting=0, note=None)
        fleet_store.pause(OTHER, until=datetime.now(UTC) + timedelta(minutes=5), kind="capacity", reason="lp-test")
        assert fleet_store.count_failure(OTHER) == 1 and fleet_store.count_early_death(OTHER) == 1
        fleet_store.launched(OTHER)
        fleet_store.agent_seen(OTHER)
        assert fleet_store.targets()[OTHER]["failures"] == 0
        fleet_store.terminated(inst.instance_id, reason="lp-test")
        assert fleet_store.running() == {}
    finally:
        get_settings.cache_clear()


@pytest.mark.parametrize(("kind", "sql"), DENIED)
def test_each_process_role_is_denied_what_its_process_never_does(
    service_env: dict[str, str], kind: str, sql: str
) -> None:
    """Other tables, other columns, writes the process never makes, creating objects: permission denied."""
    conn = psycopg2.connect(role_url(service_env["DATABASE_URL"], kind))
    try:
        with pytest.raises(psycopg2.errors.InsufficientPrivilege, match="permission denied"), conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


def test_only_the_api_role_reads_key_hashes(service_env: dict[str, str]) -> None:
    """Besides the owner (and superusers), only traincast_api and its members can read api_keys.secret_sha256."""
    role_url(service_env["DATABASE_URL"], "api")
    with transaction() as cur:
        cur.execute(HASH_READERS)
        readers = {r["rolname"] for r in cur.fetchall()}
        cur.execute(MEMBERS_OF_API)
        assert readers == {r["rolname"] for r in cur.fetchall()} and LOGINS["api"] in readers


def _as_agent(sql: str, params: dict[str, Any]) -> None:
    with transaction() as cur:
        cur.execute(sql, params)


def _finished(api: Stack, job_id: str, stacks: dict[str, Stack], timeout: float = 240) -> dict[str, Any]:
    """The job once it has ended, polled over HTTP; on a timeout, the end of each process's log."""

    def logs() -> str:
        return "\n".join(f"{k}: {s.log(k)[-2000:]}" for k, s in stacks.items() if (s.logs / f"{k}.log").exists())

    return job_finished(lambda: http.get(f"{api.url}/v1/jobs/{job_id}").json(), job_id, timeout, logs)
