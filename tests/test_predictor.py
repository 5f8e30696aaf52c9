"""The predictor: trained from stored measurements, versioned, honest in evaluation and assembly."""

import math

import pytest

from shared import layers
from shared.errors import InvalidRequest
from shared.schemas import JobRequest
from tests.jobflow import drain_agent_queue
from worker import assemble, calibrate, planning, predictor


def measure(plan: calibrate.Plan) -> None:
    """Send a calibration's work and run it with the real agent code."""
    calibrate.send(plan)
    drain_agent_queue()


def test_train_store_load_and_version(clean_db: None) -> None:
    """A model is fitted from real measurements, stored with its rows and evaluation, and versioned."""
    with pytest.raises(InvalidRequest, match="at least 2 CNNs"):
        predictor.train(machine="local")
    assert predictor.latest(machine="local") is None
    plan = calibrate.Plan(
        machine="local", cnns=("resnet18", "squeezenet1_1", "alexnet"), batch_sizes=(1, 2), image_size=64
    )
    measure(plan)
    done, needed = calibrate.progress(plan, calibrate.send(plan)[0])
    assert done == needed
    first = predictor.train(machine="local")
    assert first["version"] == 1 and first["params"]["scale"] > 0
    assert len(first["training_rows"]) == 6 and first["evaluation"]["rows"] == 6
    assert set(first["evaluation"]["per_cnn"]) == set(plan.cnns)
    second = predictor.train(machine="local")
    assert second["version"] == 2 and predictor.latest(machine="local")["id"] == second["id"]


def test_held_out_cnn_is_excluded_from_its_fit() -> None:
    """Each CNN's error comes from a scale fitted without any of its rows."""
    pairs = [
        {"id": 1, "cnn": "a", "conv_ms": 10.0, "step_ms": 20.0},
        {"id": 2, "cnn": "a", "conv_ms": 20.0, "step_ms": 40.0},
        {"id": 3, "cnn": "b", "conv_ms": 10.0, "step_ms": 20.0},
        {"id": 4, "cnn": "odd", "conv_ms": 10.0, "step_ms": 100.0},
    ]
    ev = predictor.evaluate(pairs)
    # Without "odd", the others fit a scale of exactly 2: 10 x 2 = 20 against 100 measured.
    assert ev["per_cnn"]["odd"]["mape"] == pytest.approx(80.0)
    # "odd" pulls the scale of the others' fits up, so they are not predicted perfectly.
    assert ev["per_cnn"]["a"]["mape"] > 0 and ev["per_cnn"]["b"]["mape"] > 0
    assert predictor.fit_scale([p for p in pairs if p["cnn"] != "odd"]) == pytest.approx(2.0)


def test_assembly_time_cost_and_out_of_memory() -> None:
    """Epochs use ceil(dataset/batch) iterations, cost is price x time, OOM sizes are excluded from the best."""
    request = JobRequest(cnns=["x"], machines=["g5.xlarge"], batch_sizes=[8, 16], epochs=3, dataset_size=100)
    model = {"params": {"scale": 2.0}}
    rows = {
        (1, 8): {"oom": False, "forward_ms": 1.0, "backward_data_ms": 2.0, "backward_weight_ms": 3.0},
        (1, 16): {"oom": True},
    }
    fits = assemble._point("x", "g5.xlarge", 8, [(1, 2)], rows, model, 1.006, request)
    assert fits["conv_ms"] == 12.0 and fits["iteration_seconds"] == pytest.approx(0.024)
    assert fits["epoch_seconds"] == pytest.approx(math.ceil(100 / 8) * 0.024)
    assert fits["total_seconds"] == pytest.approx(3 * 13 * 0.024)
    assert fits["cost_usd"] == pytest.approx(1.006 * 3 * 13 * 0.024 / 3600)
    oom = assemble._point("x", "g5.xlarge", 16, [(1, 2)], rows, model, 1.006, request)
    assert oom["fits_in_memory"] is False and oom["total_seconds"] is None
    best = assemble._best("x", "g5.xlarge", [fits, oom])
    assert best["min_time"]["batch_size"] == 8 and best["min_cost"]["batch_size"] == 8


def test_job_result_names_the_model_version(clean_db: None) -> None:
    """With a model stored, a job's predictions carry numbers and the model version."""
    plan = calibrate.Plan(machine="local", cnns=("resnet18", "squeezenet1_1"), batch_sizes=(2,), image_size=32)
    measure(plan)
    model = predictor.train(machine="local")
    from tests.jobflow import submit

    job = submit(cnns=["resnet18"], batch_sizes=[2])
    planning.plan_job(job["id"])
    from shared import jobs

    result = jobs.get(job_id=job["id"])["result"]
    assert result["models"]["local"] == {
        "status": "ok",
        "version": model["version"],
        "kind": "conv_sum_scale",
        "loco_mape": model["evaluation"]["loco_mape"],
    }
    (point,) = result["predictions"]
    assert point["iteration_seconds"] == pytest.approx(model["params"]["scale"] * point["conv_ms"] / 1000)
    assert point["cost_usd"] == 0.0 and result["best"][0]["min_time"]["batch_size"] == 2
    assert layers.measured(signature_ids=[1], machines=["g5.xlarge"], batch_sizes=[2], precision="fp32") == set()
