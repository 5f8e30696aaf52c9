"""GPU machine types with no benchmarks are answered at once by the reference predictor, labelled as such;
benchmarks of a GPU model, once stored with a model, win for every machine type that carries that GPU."""

from typing import Any

import pytest

from shared import jobs, machine_types
from shared.core.db import transaction
from shared.core.settings import get_settings
from shared.jobs.store import JobRow
from shared.machine_request import MachineCreate
from shared.machine_types import MachineTypeInfo
from tests.support.jobflow import calibrate_as, submit
from tests.support.stack import broker
from worker import planning

OWN_GPU: dict[str, Any] = {
    "name": "lab-rtx-box", "gpu": "RTX-6000-Ada", "gpu_count": 2, "gpu_memory_gib": 48, "gpu_fp32_tflops": 91.1,
    "gpu_fp16_tflops": 364.2, "gpu_mem_bandwidth_gbs": 960, "gpu_sm_count": 142, "gpu_l2_mib": 96,
    "gpu_tdp_watts": 300, "price_usd_per_hour": 2.5, "gpu_compute_capability": "8.9", "gpu_tf32_tflops": 182.1,
}  # fmt: skip


def type_with(*, gpu: str, provider: str, count: int = 1) -> MachineTypeInfo:
    """A catalog machine type of that provider carrying `count` of that GPU."""
    found = [
        m for m in machine_types.list_all() if m["gpu"] == gpu and m["provider"] == provider and m["gpu_count"] == count
    ]
    assert found, f"no {provider} machine type with {count} x {gpu} in the catalog"
    return found[0]


def run(**overrides: Any) -> JobRow:
    """Submit and plan a job in-process; return it as stored."""
    job = submit(**overrides)
    planning.plan_job(job["id"])
    return jobs.get(job_id=job["id"])


def test_gpu_types_with_no_agent_are_answered_at_once_and_labelled(clean_db: None) -> None:
    """No agent, no fleet: the job succeeds when planned, every GPU point says reference and its error."""
    multi = type_with(gpu="A100-SXM4-40GB", provider="aws", count=8)
    names = ["g5.xlarge", type_with(gpu="L4", provider="gcp")["name"], multi["name"]]
    job = run(cnns=["resnet18", "mobilenet_v3_large"], machines=names, batch_sizes=[1, 8, 64], image_size=224)
    assert job["status"] == "succeeded", job["error"]
    result = job["result"]
    assert result is not None
    assert len(result["predictions"]) == 2 * 3 * 3
    for point in result["predictions"]:
        assert point["source"] == "reference" and point["measured_on"] == []
        # a point quotes its kind's held-out error, never below that of public steps on GPUs the model never saw
        assert point["reference_error_pct"] >= result["models"][point["machine"]]["whole_step_mape"] > 0
        assert 0 < point["iteration_seconds_p10"] <= point["iteration_seconds"] <= point["iteration_seconds_p90"]
        # Memory is modelled for reference points too: these small CNNs fit on every one of these GPUs.
        info = machine_types.get_by_name(name=point["machine"])
        # Every GPU of the machine by default, each at the batch size.
        assert (
            point["gpus_used"] == info["gpu_count"]
            and point["global_batch_size"] == point["batch_size"] * (info["gpu_count"])
        )
        assert point["fits_in_memory"] is True and point["peak_memory_gib"] > 0
        assert point["cost_usd"] == pytest.approx(info["price_usd_per_hour"] * point["total_seconds"] / 3600, rel=1e-5)
        assert point["cost_per_gpu_usd"] == pytest.approx(point["cost_usd"] / info["gpu_count"], rel=1e-5)
    assert {m["status"] for m in result["models"].values()} == {"reference"}
    assert all(b["min_time"]["source"] == "reference" for b in result["best"])
    # One GPU of an 8-GPU machine is no faster than one GPU of a 1-GPU machine with the same GPU model.
    single = type_with(gpu="A100-SXM4-40GB", provider="gcp")["name"]
    pair = run(cnns=["resnet18"], machines=[single, multi["name"]], batch_sizes=[64], image_size=224, gpus=1)["result"]
    assert pair is not None
    one, eight = (p["iteration_seconds"] for p in pair["predictions"])
    assert one == pytest.approx(eight)
    # Nobody would measure them: no agent and no fleet, so nothing is queued.
    assert broker().llen("bench.g5.xlarge") == 0


def test_fleet_gets_the_work_of_a_reference_answer(clean_db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the fleet on, a Google T4 type answered by reference has its benchmarks queued for the AWS T4 type,
    which the fleet can start, so later jobs are benchmarked."""
    monkeypatch.setenv("FLEET_ENABLED", "true")
    get_settings.cache_clear()
    try:
        gcp_t4 = type_with(gpu="T4", provider="gcp")["name"]
        job = run(machines=[gcp_t4])
    finally:
        monkeypatch.delenv("FLEET_ENABLED")
        get_settings.cache_clear()
    assert job["status"] == "succeeded"
    assert job["progress"]["machines"][gcp_t4]["answered_by"] == "reference"
    assert broker().llen("bench.g4dn.xlarge") > 0 and broker().llen(f"bench.{gcp_t4}") == 0


def test_benchmarks_of_a_gpu_model_win_for_every_type_that_carries_it(
    clean_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once g4dn.xlarge (T4) has layer benchmarks and a model, a Google T4 type is predicted from them,
    priced at its own price, and says where it was measured."""
    gcp_t4 = type_with(gpu="T4", provider="gcp")
    body = {"cnns": ["resnet18"], "machines": [gcp_t4["name"]], "batch_sizes": [2], "image_size": 32}
    before = run(**body)["result"]
    assert before is not None
    assert before["predictions"][0]["source"] == "reference"
    calibrate_as("g4dn.xlarge", monkeypatch)
    job = run(**body)
    assert job["status"] == "succeeded", job["error"]
    assert job["result"] is not None
    [point] = job["result"]["predictions"]
    assert point["source"] == "benchmarked" and point["measured_on"] == ["g4dn.xlarge"]
    assert point["cost_usd"] == pytest.approx(gcp_t4["price_usd_per_hour"] * point["total_seconds"] / 3600, rel=1e-5)
    assert job["result"]["models"][gcp_t4["name"]]["measured_on"] == "g4dn.xlarge"


def test_a_gpu_registered_by_its_specs_is_predicted_at_once(clean_db: None) -> None:
    """A user's own GPU machine type gets reference predictions; more bandwidth and compute → faster."""
    machine_types.create(figures=MachineCreate(**OWN_GPU))
    slower = OWN_GPU | {"name": "lab-slow", "gpu": "slow-gpu", "gpu_fp32_tflops": 9.1, "gpu_tf32_tflops": 18.2}
    slower |= {"gpu_fp16_tflops": 36.4, "gpu_mem_bandwidth_gbs": 96, "provider": "lab"}
    machine_types.create(figures=MachineCreate(**slower))
    job = run(cnns=["resnet50"], machines=["lab-rtx-box", "lab-slow"], batch_sizes=[128], image_size=224)
    assert job["result"] is not None
    fast, slow = job["result"]["predictions"]
    assert fast["source"] == slow["source"] == "reference"
    assert fast["iteration_seconds"] < slow["iteration_seconds"]
    with transaction() as cur:
        cur.execute("SELECT provider FROM machine_types WHERE name IN ('lab-rtx-box', 'lab-slow') ORDER BY name")
        assert [r["provider"] for r in cur.fetchall()] == ["own", "lab"]
        cur.execute("DELETE FROM machine_types WHERE registered_at IS NOT NULL")


# An RTX 3090 as its datasheet gives it: FP16 tensor 71 with FP32 accumulate, 142 with FP16 accumulate.
RTX_3090: dict[str, Any] = {
    "name": "lab-3090", "gpu": "GeForce RTX 3090", "gpu_count": 1, "gpu_memory_gib": 24, "gpu_fp32_tflops": 35.6,
    "gpu_fp16_tflops": 71, "gpu_tf32_tflops": 35.6, "gpu_mem_bandwidth_gbs": 936, "gpu_sm_count": 82,
    "gpu_l2_mib": 6, "gpu_tdp_watts": 350, "price_usd_per_hour": 0.5, "gpu_compute_capability": "8.6",
}  # fmt: skip


def test_a_geforce_board_is_costed_at_its_full_tensor_rate(clean_db: None) -> None:
    """The FP16-accumulate figure is stored and read: the same board given it is answered faster under autocast,
    and both answers say they are reference answers."""
    machine_types.create(figures=MachineCreate(**RTX_3090))
    machine_types.create(figures=MachineCreate(**RTX_3090 | {"name": "lab-3090-full", "gpu_fp16_acc16_tflops": 142}))
    with transaction() as cur:
        cur.execute("SELECT name, gpu_fp16_acc16_tflops FROM machine_types WHERE name LIKE 'lab-3090%' ORDER BY name")
        assert [(r["name"], r["gpu_fp16_acc16_tflops"]) for r in cur.fetchall()] == [
            ("lab-3090", None), ("lab-3090-full", 142)
        ]  # fmt: skip
    # at 224 px, where the GPU sets the step (at the test suite's usual 32 px the host's dispatch does)
    job = run(cnns=["resnet50"], machines=["lab-3090", "lab-3090-full"], batch_sizes=[128], precision="amp_fp16",
              image_size=224)  # fmt: skip
    assert job["result"] is not None
    halved, full = job["result"]["predictions"]
    assert (halved["machine"], full["machine"]) == ("lab-3090", "lab-3090-full")
    assert halved["source"] == full["source"] == "reference"
    assert full["iteration_seconds"] < 0.9 * halved["iteration_seconds"]  # convs are most of the step
    with pytest.raises(ValueError, match="below gpu_fp16_tflops"):
        MachineCreate(**RTX_3090 | {"name": "lab-3090-bad", "gpu_fp16_acc16_tflops": 35.5})
    with transaction() as cur:
        cur.execute("DELETE FROM machine_types WHERE registered_at IS NOT NULL")


LAYER_LIST = (
    b'{"image_size": 32, "layers": [{"in_channels": 3, "out_channels": 8, "input_size": 32, "kernel": 3,'
    b' "padding": 1}, {"in_channels": 8, "out_channels": 8, "input_size": 32, "kernel": 3, "padding": 1,'
    b' "count": 2}], "parameters": 1400}'
)


@pytest.mark.parametrize("precision", ["fp32", "amp_fp16", "amp_bf16"])
def test_uploaded_cnns_are_answered_on_gpu_types_in_every_precision(clean_db: None, precision: str) -> None:
    """A JSON layer list and an ONNX graph (no parameter tensors or kernel counts known for the first) get reference
    answers on a GPU type, fp32 and autocast, with finite times and their kind's error (they failed)."""
    from shared.cnn import registry
    from tests.support.onnx_models import export

    registry.create(name="two-convs", data=LAYER_LIST)
    registry.create(name="onnx-resnet18", data=export("resnet18", 32))
    body = {"cnns": ["two-convs", "onnx-resnet18"], "machines": ["g5.xlarge"], "batch_sizes": [1, 64]}
    job = run(**body, image_size=32, precision=precision, optimizer="adamw")
    assert job["status"] == "succeeded", job["error"]
    assert job["result"] is not None
    points = job["result"]["predictions"]
    assert {p["cnn"] for p in points} == {"two-convs", "onnx-resnet18"} and len(points) == 4
    for point in points:
        assert point["source"] == "reference" and point["iteration_seconds"] > 0 and point["reference_error_pct"] > 0
    with transaction() as cur:
        cur.execute("DELETE FROM cnns WHERE name IN ('two-convs', 'onnx-resnet18')")
