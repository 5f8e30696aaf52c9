"""The predictor: trained from stored measurements, versioned, honest in evaluation and assembly."""

import math

import pytest

from calibration import run as calibrate
from prediction import features, step_model, validation
from shared import jobs
from shared.cnn import zoo as cnn_zoo
from shared.core.errors import InvalidRequest
from shared.core.settings import get_settings
from tests.support.jobflow import drain_agent_queue, stored_conv_ms, submit
from worker import planning, predictor


def measure(plan: calibrate.Plan) -> None:
    """Send a calibration's work and run it with the real agent code."""
    calibrate.send(plan)
    drain_agent_queue()


def test_train_store_load_predict_and_version(clean_db: None) -> None:
    """A model is fitted from real measurements, stored with its rows and evaluation, reloaded and versioned."""
    with pytest.raises(InvalidRequest, match="at least 2 CNNs"):
        predictor.train(machine_type="local")
    assert predictor.latest(machine_type="local") is None
    cnns = ("resnet18", "squeezenet1_1", "mobilenet_v2")
    measure(calibrate.Plan(machine_type="local", cnns=cnns, batch_sizes=(2, 4), image_size=64))
    points = predictor.dataset("local")
    assert len(points) == 6 and all(p.step_ms > 0 for p in points)
    # Each point's conv_ms is Σ count × (fwd + bwd data + bwd weight) of its CNN's stored layer rows.
    at_bs = features.NAMES.index("batch_size")
    for p in points:
        convs, conv_ms = stored_conv_ms(p.cnn, 64)[int(p.x[at_bs])]
        assert convs == cnn_zoo.conv_layers(p.cnn, 64).total and p.conv_ms == pytest.approx(conv_ms, rel=1e-9)
    first = predictor.train(machine_type="local")
    assert first["version"] == 1 and first["kind"] == predictor.KIND
    assert len(first["params"]["base"]) == len(step_model.BASE_TERMS) and min(first["params"]["base"]) >= 0
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
    second = predictor.train(machine_type="local")
    latest = predictor.latest(machine_type="local")
    assert second["version"] == 2 and latest is not None and latest["id"] == second["id"]


def test_job_result_names_the_model_version(clean_db: None) -> None:
    """With a model stored, a job's predictions carry numbers, intervals and the model version."""
    measure(calibrate.Plan(machine_type="local", cnns=("resnet18", "squeezenet1_1"), batch_sizes=(2,), image_size=32))
    model = predictor.train(machine_type="local")
    job = submit(cnns=["resnet18"], batch_sizes=[2])
    planning.plan_job(job["id"])
    result = jobs.get(job_id=job["id"])["result"]
    assert result is not None
    assert result["models"]["local"] == {
        "status": "ok", "source": "benchmarked", "version": model["version"], "kind": predictor.KIND,
        "loco_mape": model["evaluation"]["loco_mape"], "pooled_from": ["local"], "training": "sgd/fp32",
        "interval_coverage": model["evaluation"]["loco"]["model"]["coverage"],
    }  # fmt: skip
    (point,) = result["predictions"]
    assert point["iteration_seconds_p10"] <= point["iteration_seconds"] <= point["iteration_seconds_p90"]
    # The interval is the stored one from out-of-fold errors (32 px, batch 2: a setting the fit measured).
    low, high = model["params"]["interval"]["seen"]
    assert point["iteration_seconds_p10"] == pytest.approx(point["iteration_seconds"] * math.exp(min(low, 0)), rel=1e-5)
    assert point["total_seconds_p90"] == pytest.approx(point["total_seconds"] * math.exp(max(high, 0)), rel=1e-5)
    assert point["cost_usd"] == 0.0 and point["energy_kwh"] is None  # local: free, board power unknown
    assert result["best"][0]["min_time"]["batch_size"] == 2


def test_a_type_with_few_steps_pools_every_types_steps(clean_db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """One CNN stepped on g4dn.xlarge: its model learns from local's steps too, and says so; --no-pool refuses."""
    measure(calibrate.Plan(machine_type="local", cnns=("resnet18", "squeezenet1_1"), batch_sizes=(2,), image_size=32))
    # The same agent code, registered for another machine type (the rows carry this CPU's environment).
    monkeypatch.setenv("AGENT_MACHINE_TYPE", "g4dn.xlarge")
    get_settings.cache_clear()
    try:
        plan = calibrate.Plan(machine_type="g4dn.xlarge", cnns=("mobilenet_v2",), batch_sizes=(2,), image_size=32)
        calibrate.send(plan)
        drain_agent_queue("g4dn.xlarge")
    finally:
        monkeypatch.delenv("AGENT_MACHINE_TYPE")
        get_settings.cache_clear()
    with pytest.raises(InvalidRequest, match="at least 2 CNNs on g4dn.xlarge"):
        predictor.train(machine_type="g4dn.xlarge", pool=False)
    model = predictor.train(machine_type="g4dn.xlarge")
    ev = model["evaluation"]
    assert ev["pooled_from"] == ["g4dn.xlarge", "local"] and ev["own_rows"] == 1 and ev["cnns"] == 3
    local_ids = {p.id for p in predictor.dataset("local")}
    assert local_ids < set(model["training_rows"])
    [own] = predictor.dataset("g4dn.xlarge")
    low, mid, high = predictor.predict_ms(model, own.x, own.conv_ms)
    assert 0 < low <= mid <= high
    assert predictor.train(machine_type="local", pool=False)["evaluation"]["pooled_from"] == ["local"]
