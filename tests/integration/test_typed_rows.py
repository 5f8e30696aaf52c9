"""Typed rows: each owning module's TypedDict names exactly the keys its statements return, read from real rows."""

import json
import uuid
from datetime import UTC, datetime
from typing import Any, get_type_hints

from shared import agents, jobs, keys, machine_types
from shared.core.db import transaction
from shared.jobs.request import JobRequest
from shared.measurements import environments, layers, ops, steps
from shared.training import TrainConfig


def keys_of(typed: Any) -> set[str]:
    """The keys a TypedDict declares, its bases' included."""
    return set(get_type_hints(typed))


def test_machine_type_info_is_the_whole_catalog_row(clean_db: None) -> None:
    """MachineTypeInfo declares every machine_types column, no more; the readers return those keys."""
    with transaction() as cur:
        cur.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'machine_types'")
        columns = {r["column_name"] for r in cur.fetchall()}
    assert keys_of(machine_types.MachineTypeInfo) == columns
    assert set(machine_types.get_by_name(name="local")) == columns
    assert all(set(row) == columns for row in machine_types.list_all())


def test_job_rows_have_their_declared_keys(clean_db: None) -> None:
    """Each jobs reader returns exactly its TypedDict's keys (a column added to or dropped from a SELECT fails)."""
    request = JobRequest.model_validate({"cnns": ["resnet18"], "machines": ["local"], "batch_sizes": [2]})
    row, created = jobs.create(request=request, owner_key_id=None)
    assert created
    with transaction() as cur:
        cur.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'jobs'")
        columns = {r["column_name"] for r in cur.fetchall()}
    assert set(row) == keys_of(jobs.JobRow) == columns
    assert set(jobs.get(job_id=row["id"])) == keys_of(jobs.JobRow)
    assert set(jobs.view(job_id=row["id"])) == keys_of(jobs.JobView)
    assert set(jobs.position(job_id=row["id"])) == keys_of(jobs.JobPosition)
    assert [set(r) for r in jobs.list_page(limit=5)] == [keys_of(jobs.JobListRow)]
    assert [set(r) for r in jobs.stale(after_s=-60)] == [keys_of(jobs.StaleJob)]
    with transaction() as cur:
        cur.execute("UPDATE jobs SET status = 'running', plan = '{}' WHERE id = %s", (row["id"],))
    assert [set(r) for r in jobs.live_plans()] == [keys_of(jobs.PlannedJob)]
    ended = jobs.finish(job_id=row["id"], status=jobs.JobStatus.FAILED, error="typed rows test")
    assert ended is not None and set(ended) == keys_of(jobs.FinishedJob)
    assert [set(r) for r in jobs.recently_ended(within_s=60)] == [keys_of(jobs.PlannedJob)]


def test_key_rows_have_their_declared_keys(clean_db: None) -> None:
    """KeyRow is what every api_keys reader returns (never the secret's hash); KeyUsage what SELECT_KEY_USAGE does."""
    key, _secret = keys.create(name=f"typed-{uuid.uuid4().hex[:6]}", scope="submit")
    assert set(key) == keys_of(keys.KeyRow) and "secret_sha256" not in key
    assert set(keys.get(key_id=key["id"])) == keys_of(keys.KeyRow)
    assert {frozenset(r) for r in keys.list_all()} == {frozenset(keys_of(keys.KeyRow))}
    assert set(jobs.key_usage(owner_key_id=key["id"])) == keys_of(jobs.KeyUsage)
    assert set(keys.revoke_id(key_id=key["id"])) == keys_of(keys.KeyRow)


def test_agent_and_timing_rows_have_their_declared_keys(clean_db: None) -> None:
    """AgentListed, LayerTiming / LayerPhases and OpTiming / OpPhases match what their readers return."""
    env = environments.store(details={"device": "cpu", "run": str(uuid.uuid4())})
    agents.beat(
        agent_id=uuid.uuid4(), machine_type="local", host="h", pid=1, device="cpu", environment_id=env,
        started_at=datetime.now(UTC), instance_id=None,
    )  # fmt: skip
    listed = agents.list_all(alive_after_s=60)  # other tests' agents stay in the table: every row is checked
    assert listed and all(set(a) == keys_of(agents.AgentListed) for a in listed)

    sig, _count = layers.register_builtin(name="resnet18", image_size=32)[0]
    layers.save(
        signature_id=sig, machine_type="local", batch_size=2, precision="fp32", channels_last=False,
        environment_id=env, oom=False, ms=(1.0, 2.0, 3.0), stats={},
    )  # fmt: skip
    rows = layers.newest_first(signature_ids=[sig], machine_types=["local"], batch_sizes=[2], precision="fp32")
    assert [set(r) for r in rows] == [keys_of(layers.LayerTiming)]
    phases = layers.in_environment(
        machine_type="local", batch_size=2, precision="fp32", channels_last=False, environment_id=env,
        signature_ids=[sig],
    )  # fmt: skip
    assert set(phases[sig]) == keys_of(layers.LayerPhases)

    config = TrainConfig()
    op_sig, _spec, _n = ops.members(name="resnet18", image_size=32, num_classes=1000)[0]
    ops.save(
        signature_id=op_sig, machine_type="local", batch_size=2, variant=config.op_variant, environment_id=env,
        oom=False, ms=(1.0, 1.0), stats={},
    )  # fmt: skip
    op_rows = ops.newest_first(signature_ids=[op_sig], machine_types=["local"], batch_sizes=[2], config=config)
    assert [set(r) for r in op_rows] == [keys_of(ops.OpTiming)]
    in_env = ops.in_environment(
        machine_type="local", environment_id=env, signature_ids=[op_sig], batch_size=2, config=config
    )
    assert [set(r) for r in in_env.values()] == [keys_of(ops.OpPhases)]


def test_step_rows_have_their_declared_keys(clean_db: None) -> None:
    """MeasuredStep and StepFailure are what steps.measured and steps.failures return."""
    env = environments.store(details={"device": "cpu", "run": str(uuid.uuid4())})
    layers.register_builtin(name="resnet18", image_size=32)  # a step names a registered CNN
    config = TrainConfig()
    unit: dict[str, Any] = {"cnn": "resnet18", "machine_type": "local", "image_size": 32, "config": config}
    steps.save(**unit, batch_size=2, environment_id=env, oom=False, step_ms=12.5, stats={})
    steps.save_failure(**unit, batch_size=4, environment_id=env, reason="typed rows test")
    assert [set(r) for r in steps.measured(machine_type="local")] == [keys_of(steps.MeasuredStep)]
    failed = steps.failures(machine_type="local", image_size=32, config=config, cnns=["resnet18"], batch_sizes=[4])
    assert [set(r) for r in failed] == [keys_of(steps.StepFailure)]


def test_fleet_rows_have_their_declared_keys(clean_db: None) -> None:
    """FleetInstance, FleetTarget and Adopted are what the controller's readers return (whole rows: SELECT *)."""
    from fleet import store as fleet_store
    from fleet.ec2 import LiveInstance

    inst = LiveInstance("i-typed", "g4dn.xlarge", datetime.now(UTC), "spot", "subnet-a")
    adopted = fleet_store.adopt(inst, price=0.5)
    assert adopted is not None and set(adopted) == keys_of(fleet_store.Adopted)
    with transaction() as cur:
        cur.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'fleet_instances'")
        assert {r["column_name"] for r in cur.fetchall()} == keys_of(fleet_store.FleetInstance)
        cur.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'fleet_targets'")
        assert {r["column_name"] for r in cur.fetchall()} == keys_of(fleet_store.FleetTarget)
    running = fleet_store.running()
    assert "i-typed" in running and all(set(r) == keys_of(fleet_store.FleetInstance) for r in running.values())
    fleet_store.pause("g4dn.xlarge", until=datetime.now(UTC), kind="capacity", reason="typed rows test")
    targets = fleet_store.targets()
    assert "g4dn.xlarge" in targets and all(set(r) == keys_of(fleet_store.FleetTarget) for r in targets.values())


def test_predictor_model_is_the_whole_row(clean_db: None) -> None:
    """PredictorModel declares every predictor_models column (its readers select them all)."""
    from worker import predictor

    with transaction() as cur:
        cur.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'predictor_models'")
        assert {r["column_name"] for r in cur.fetchall()} == keys_of(predictor.PredictorModel)
    assert predictor.latest(machine_type="local") is None and predictor.latest_of(machine_types=["local"]) == {}


def test_cnn_shapes_have_their_declared_keys(clean_db: None) -> None:
    """CnnListed for built-in and registered CNNs (image_size only where fixed, warnings only for an ONNX export that
    differs from training); CustomCnn is a registered row."""
    from shared.cnn import registry

    name = f"typed-{uuid.uuid4().hex[:8]}"
    layer = {"in_channels": 3, "out_channels": 16, "input_size": 32, "kernel": 3, "padding": 1}
    created = registry.create(name=name, data=json.dumps({"image_size": 32, "layers": [layer]}).encode())
    assert set(created) == keys_of(registry.CnnListed) - {"warnings"} and created["image_size"] == 32
    listed = {c["name"]: c for c in registry.list_all()}
    assert set(listed["resnet18"]) == keys_of(registry.CnnListed) - {"image_size", "warnings"}
    assert listed[name] == created
    try:
        with transaction() as cur:
            cur.execute(registry.SELECT_CUSTOM, {"name": name, "owner": None})
            assert set(cur.fetchone() or {}) == keys_of(registry.CustomCnn)
    finally:
        registry.delete(name=name)
