"""The predictor: trained from stored measurements, versioned, honest in evaluation and assembly."""

import math
import random

import pytest

from shared import jobs, machines
from shared.errors import InvalidRequest
from shared.schemas import JobRequest
from shared.settings import get_settings
from tests.jobflow import drain_agent_queue, submit
from worker import assemble, calibrate, features, models, planning, predictor, validation


def measure(plan: calibrate.Plan) -> None:
    """Send a calibration's work and run it with the real agent code."""
    calibrate.send(plan)
    drain_agent_queue()


def test_train_store_load_predict_and_version(clean_db: None) -> None:
    """A model is fitted from real measurements, stored with its rows and evaluation, reloaded and versioned."""
    with pytest.raises(InvalidRequest, match="at least 2 CNNs"):
        predictor.train(machine="local")
    assert predictor.latest(machine="local") is None
    cnns = ("resnet18", "squeezenet1_1", "mobilenet_v2")
    measure(calibrate.Plan(machine="local", cnns=cnns, batch_sizes=(2, 4), image_size=64))
    points = predictor.dataset("local")
    assert len(points) == 6 and all(p.conv_ms > 0 and p.step_ms > 0 for p in points)
    first = predictor.train(machine="local")
    assert first["version"] == 1 and first["kind"] == predictor.KIND
    assert len(first["params"]["base"]) == len(models.BASE_TERMS) and min(first["params"]["base"]) >= 0
    assert first["params"]["choice"] in validation.CANDIDATES
    assert first["params"]["interval"]["image_sizes"] == [64] and first["params"]["interval"]["batch_range"] == [2, 4]
    assert sorted(first["training_rows"]) == sorted(p.id for p in points)
    ev = first["evaluation"]
    assert set(ev["loco"]["model"]["groups"]) == set(ev["loco"]["lightgbm"]["groups"]) == set(cnns)
    assert set(ev["lofo"]["model"]["groups"]) == {"resnet", "squeezenet", "mobilenet_v2"}
    assert {"lightgbm", "base_only", "conv_scale", "flops_scale"} <= set(ev["loco"])
    assert ev["loco_mape"] == ev["loco"]["model"]["mape"] and 0 <= ev["loco"]["model"]["coverage"] <= 1
    # One image size: no size split; batch 2 fits, batch 4 is held out.
    assert ev["sizes"] is None and set(ev["batches"]["model"]["groups"]) == {f"{c} @ batch > 2" for c in cnns}
    low, mid, high = predictor.predict_ms(first, points[0].x, points[0].conv_ms)
    assert 0 < low <= mid <= high
    second = predictor.train(machine="local")
    latest = predictor.latest(machine="local")
    assert second["version"] == 2 and latest is not None and latest["id"] == second["id"]


def test_base_finds_the_per_parameter_cost_a_conv_scale_cannot() -> None:
    """Steps = 2 × conv + 3 ms per million parameters: the base recovers both; conv × k cannot."""
    rng = random.Random(3)
    points = []
    at = features.NAMES.index("mparameters")
    for i in range(40):
        conv, mparams = 5 + 100 * rng.random(), 60 * rng.random()
        x = [0.0] * len(features.NAMES)
        x[at] = mparams
        points.append(models.Point(i, f"cnn{i % 8}", "fam", x, conv, conv, 2 * conv + 3 * mparams))
    coef = dict(zip(models.BASE_TERMS, models.fit_base(points), strict=True))
    assert coef["conv_ms"] == pytest.approx(2, rel=1e-6) and coef["mparameters"] == pytest.approx(3, rel=1e-6)
    ev = validation.evaluate(points)
    assert ev["loco"]["base_only"]["mape"] < 1e-6 < ev["loco"]["conv_scale"]["mape"]


def test_an_older_kind_of_model_is_not_used(clean_db: None) -> None:
    """A stored model of another kind gives a clear error (assembly then reports no number), not a wrong one."""
    model = {"id": -1, "version": 7, "kind": "lightgbm_ratio", "params": {"features": list(features.NAMES)}}
    with pytest.raises(InvalidRequest, match="older kind; retrain"):
        predictor.predict_ms(model, [0.0] * len(features.NAMES), 1.0)


def test_lightgbm_learns_a_ratio_the_scale_cannot() -> None:
    """Where step/conv depends on a feature, LightGBM beats the single scale on held-out CNNs."""
    rng = random.Random(5)
    points = []
    for i in range(60):
        bs = rng.choice([2, 4, 8, 16, 32])
        conv = 10.0 * bs * (1 + rng.random())
        x = [float(bs)] + [0.0] * (len(features.NAMES) - 1)
        points.append(models.Point(i, f"cnn{i % 10}", "fam", x, conv, conv, conv * (1 + 8 / bs)))
    ev = validation.evaluate(points)
    assert ev["loco"]["lightgbm"]["mape"] < ev["loco"]["conv_scale"]["mape"] / 2
    assert ev["loco"]["model"]["mape"] < ev["loco"]["conv_scale"]["mape"] / 2


def test_assembly_time_cost_energy_and_out_of_memory(clean_db: None) -> None:
    """Epochs use ceil(dataset/batch) iterations, cost is price x time, energy uses board power, OOM is excluded."""
    measure(calibrate.Plan(machine="local", cnns=("resnet18", "squeezenet1_1"), batch_sizes=(2,), image_size=32))
    model = predictor.train(machine="local")
    point = predictor.dataset("local")[0]
    g5 = machines.get_by_name(name="g5.xlarge")
    request = JobRequest(cnns=["x"], machines=["g5.xlarge"], batch_sizes=[8], epochs=3, dataset_size=100)
    p = assemble._blank("x", "g5.xlarge", 8, g5, source="benchmarked", fits=True, conv_ms=point.conv_ms)
    assemble._fill(p, predictor.predict_ms(model, point.x, point.conv_ms), g5, request)
    low, mid, high = predictor.predict_ms(model, point.x, point.conv_ms)
    assert p["iteration_seconds"] == pytest.approx(mid / 1000)
    assert p["total_seconds"] == pytest.approx(mid / 1000 * math.ceil(100 / 8) * 3)
    assert p["epoch_seconds"] == pytest.approx(p["total_seconds"] / 3)
    assert p["cost_usd"] == pytest.approx(g5["price_usd_per_hour"] * p["total_seconds"] / 3600)
    assert p["energy_kwh"] == pytest.approx(g5["gpu_tdp_watts"] * g5["gpu_count"] * p["total_seconds"] / 3.6e6)
    assert p["total_seconds_p10"] <= p["total_seconds"] <= p["total_seconds_p90"]
    assert p["cost_per_gpu_usd"] == pytest.approx(p["cost_usd"] / g5["gpu_count"]) and p["gpus_used"] == 1
    oom = assemble._blank("x", "g5.xlarge", 16, g5, source="benchmarked", fits=False, conv_ms=None)
    assert oom["fits_in_memory"] is False and oom["total_seconds"] is None
    best = assemble._best("x", "g5.xlarge", [p, oom], 15)
    assert best["min_time"]["batch_size"] == 8 and best["min_cost"]["batch_size"] == 8
    assert best["max_batch_size"] == 15


def test_job_result_names_the_model_version(clean_db: None) -> None:
    """With a model stored, a job's predictions carry numbers, intervals and the model version."""
    measure(calibrate.Plan(machine="local", cnns=("resnet18", "squeezenet1_1"), batch_sizes=(2,), image_size=32))
    model = predictor.train(machine="local")
    job = submit(cnns=["resnet18"], batch_sizes=[2])
    planning.plan_job(job["id"])
    result = jobs.get(job_id=job["id"])["result"]
    assert result["models"]["local"] == {
        "status": "ok", "source": "benchmarked", "version": model["version"], "kind": predictor.KIND,
        "loco_mape": model["evaluation"]["loco_mape"], "pooled_from": ["local"], "training": "sgd/fp32",
        "interval_coverage": model["evaluation"]["loco"]["model"]["coverage"],
    }  # fmt: skip
    (point,) = result["predictions"]
    assert point["iteration_seconds_p10"] <= point["iteration_seconds"] <= point["iteration_seconds_p90"]
    # The interval is the stored one from out-of-fold errors (32 px, batch 2: a setting the fit measured).
    low, high = model["params"]["interval"]["seen"]
    assert point["iteration_seconds_p10"] == pytest.approx(point["iteration_seconds"] * math.exp(min(low, 0)))
    assert point["total_seconds_p90"] == pytest.approx(point["total_seconds"] * math.exp(max(high, 0)))
    assert point["cost_usd"] == 0.0 and point["energy_kwh"] is None  # local: free, board power unknown
    assert result["best"][0]["min_time"]["batch_size"] == 2


def test_a_type_with_few_steps_pools_every_types_steps(clean_db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """One CNN stepped on g4dn.xlarge: its model learns from local's steps too, and says so; --no-pool refuses."""
    measure(calibrate.Plan(machine="local", cnns=("resnet18", "squeezenet1_1"), batch_sizes=(2,), image_size=32))
    # The same agent code, registered for another machine type (the rows carry this CPU's environment).
    monkeypatch.setenv("AGENT_MACHINE_TYPE", "g4dn.xlarge")
    get_settings.cache_clear()
    try:
        plan = calibrate.Plan(machine="g4dn.xlarge", cnns=("mobilenet_v2",), batch_sizes=(2,), image_size=32)
        calibrate.send(plan)
        drain_agent_queue("g4dn.xlarge")
    finally:
        monkeypatch.delenv("AGENT_MACHINE_TYPE")
        get_settings.cache_clear()
    with pytest.raises(InvalidRequest, match="at least 2 CNNs on g4dn.xlarge"):
        predictor.train(machine="g4dn.xlarge", pool=False)
    model = predictor.train(machine="g4dn.xlarge")
    ev = model["evaluation"]
    assert ev["pooled_from"] == ["g4dn.xlarge", "local"] and ev["own_rows"] == 1 and ev["cnns"] == 3
    local_ids = {p.id for p in predictor.dataset("local")}
    assert local_ids < set(model["training_rows"])
    [own] = predictor.dataset("g4dn.xlarge")
    low, mid, high = predictor.predict_ms(model, own.x, own.conv_ms)
    assert 0 < low <= mid <= high
    assert predictor.train(machine="local", pool=False)["evaluation"]["pooled_from"] == ["local"]
