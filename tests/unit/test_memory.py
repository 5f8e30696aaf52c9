"""The training-step memory model (shared/cnn/step_memory.py) and how a job's points use it (memory_model.py)."""

from typing import Any, cast

import pytest

from prediction import memory_model as point_memory
from shared.cnn import step_memory
from shared.cnn import zoo as cnn_zoo
from shared.cnn.workload import WorkloadJson
from shared.jobs.point import PointDict
from shared.jobs.request import JobRequest
from shared.machine_types import MachineTypeInfo
from worker import step_cache

T4 = 16 * step_memory.GIB


def machine(figures: dict[str, Any]) -> MachineTypeInfo:
    """A machine type with only the figures the memory model reads; the rest of its row plays no part here."""
    return cast(MachineTypeInfo, figures)


@pytest.fixture(scope="module")
def resnet50() -> WorkloadJson:
    return cnn_zoo.conv_layers("resnet50", 224).workload


def peak(work: WorkloadJson, bs: int, **kw: Any) -> float:
    p = step_memory.step_peak(work, bs, **kw)
    assert p is not None
    return p.total


def test_extraction_measures_what_autograd_saves(resnet50: WorkloadJson) -> None:
    """Saved activations are counted once per storage: less than every op output, more than the input."""
    saved, outputs = resnet50["saved_bytes"], resnet50["activation_bytes"]
    assert saved is not None and outputs is not None
    assert 3 * 224 * 224 * 4 < saved < outputs
    assert resnet50["largest_parameter"] == 512 * 512 * 3 * 3  # layer4's 3x3 convs, above the 2048x1000 classifier


def test_optimizer_state_orders_the_peaks(resnet50: WorkloadJson) -> None:
    sgd, momentum = peak(resnet50, 8), peak(resnet50, 8, optimizer="sgd", momentum=0.9)
    adam, adamw = peak(resnet50, 8, optimizer="adam"), peak(resnet50, 8, optimizer="adamw")
    assert resnet50["parameters"] is not None
    params = resnet50["parameters"] * 4
    assert momentum - sgd == pytest.approx(params * step_memory.GPU_SCALE)
    assert adam > momentum and adamw == adam
    # Weight decay costs Adam a temporary copy of the gradients (foreach); AdamW decays in place.
    assert peak(resnet50, 1, optimizer="adam", weight_decay=1e-4) > peak(resnet50, 1, optimizer="adam")
    assert peak(resnet50, 1, optimizer="adamw", weight_decay=1e-4) == peak(resnet50, 1, optimizer="adamw")


def test_amp_halves_activations_but_keeps_fp32_master_weights(resnet50: WorkloadJson) -> None:
    fp32 = step_memory.step_peak(resnet50, 64)
    amp = step_memory.step_peak(resnet50, 64, precision="amp_fp16")
    assert fp32 is not None and amp is not None
    assert amp.activations < 0.6 * fp32.activations and amp.total < fp32.total
    assert amp.weights == fp32.weights and amp.gradients == fp32.gradients
    assert peak(resnet50, 64, precision="tf32") == fp32.total  # TF32 changes the math, not the storage
    with pytest.raises(ValueError):
        step_memory.step_peak(resnet50, 64, precision="fp8")


def test_peak_grows_with_the_batch_and_the_gpu_adds_its_own(resnet50: WorkloadJson) -> None:
    peaks = [peak(resnet50, bs) for bs in range(1, 257)]
    assert all(b > a for a, b in zip(peaks, peaks[1:], strict=False))
    assert peak(resnet50, 32, gpu=True) > peak(resnet50, 32, gpu=True, tensors_only=True) > 0
    assert peak(resnet50, 32, gpu=False) == peak(resnet50, 32, gpu=True, tensors_only=True)


@pytest.mark.parametrize(("optimizer", "precision"), [("sgd", "fp32"), ("adam", "fp32"), ("sgd", "amp_fp16")])
def test_max_batch_size_is_the_boundary(resnet50: WorkloadJson, optimizer: str, precision: str) -> None:
    largest = step_memory.max_batch_size(resnet50, T4, cap=4096, optimizer=optimizer, precision=precision)
    assert largest is not None and 1 < largest < 4096
    assert peak(resnet50, largest, optimizer=optimizer, precision=precision) <= T4
    assert peak(resnet50, largest + 1, optimizer=optimizer, precision=precision) > T4


def test_max_batch_size_at_its_bounds(resnet50: WorkloadJson) -> None:
    assert step_memory.max_batch_size(resnet50, 1e15, cap=300) == 300
    assert step_memory.max_batch_size(resnet50, peak(resnet50, 1) - 1, cap=300) == 0
    assert step_memory.max_batch_size({"parameters": 10}, T4, cap=300) is None  # nothing known of its activations


def test_a_cnn_read_without_autograd_is_estimated_from_its_op_outputs() -> None:
    work: WorkloadJson = {"parameters": 1_000_000, "activation_bytes": 5e6, "saved_bytes": None}
    assert step_memory.saved_per_sample(work) == pytest.approx(5e6 * step_memory.SAVED_PER_OUTPUT)
    assert step_memory.step_peak({"parameters": 1_000_000, "activation_bytes": None}, 8) is None


def test_capacity_is_one_gpu_or_the_ram() -> None:
    eight = machine({"gpu": "A100", "gpu_count": 8, "gpu_memory_gib": 320, "memory_gib": 1152, "provider": "aws"})
    assert point_memory.capacity_bytes(eight) == 40 * step_memory.GIB
    own = machine({"gpu": None, "memory_gib": 8, "provider": "own"})
    assert point_memory.capacity_bytes(own) == 8 * step_memory.GIB
    local = point_memory.capacity_bytes(machine({"gpu": None, "memory_gib": None, "provider": "local"}))
    assert local is not None and local > step_memory.GIB
    assert point_memory.capacity_bytes(machine({"gpu": None, "memory_gib": None, "provider": "own"})) is None


def test_a_measured_out_of_memory_wins_over_the_model(resnet50: WorkloadJson) -> None:
    t4 = machine({"gpu": "T4", "gpu_count": 1, "gpu_memory_gib": 16, "provider": "aws"})
    request = JobRequest(cnns=["resnet50"], machines=["x"], batch_sizes=[8, 16])
    points: list[PointDict] = [{"batch_size": 8, "fits_in_memory": False}, {"batch_size": 16, "fits_in_memory": None}]
    point_memory.annotate(points, resnet50, t4, request)
    assert points[0]["fits_in_memory"] is False and points[1]["fits_in_memory"] is True
    peaks = [p["peak_memory_gib"] for p in points]
    assert all(gib is not None and gib > 0 for gib in peaks)
    modelled = point_memory.max_batch_size(resnet50, t4, request, measured_oom=[])
    assert modelled is not None and modelled > 16
    assert point_memory.max_batch_size(resnet50, t4, request, measured_oom=[16]) == 15
    assert point_memory.max_batch_size(resnet50, t4, request, measured_oom=[1]) == 0


def test_a_cnns_memo_is_kept_per_workload_and_training(resnet50: WorkloadJson) -> None:
    """The same workload (by digest) and training share a memo; another training or workload gets its own; answers
    read from a memo equal those computed without one, even with a measured out-of-memory lowering the cap."""
    t4 = machine({"gpu": "T4", "gpu_count": 1, "gpu_memory_gib": 16, "provider": "aws"})
    sgd = JobRequest(cnns=["resnet50"], machines=["x"], batch_sizes=[8, 64])
    adamw = JobRequest(cnns=["resnet50"], machines=["x"], batch_sizes=[8, 64], optimizer="adamw")
    digest = step_cache.digest(resnet50)
    memo = point_memory.memo(digest, sgd)
    assert point_memory.memo(digest, sgd) is memo
    assert point_memory.memo(digest, adamw) is not memo
    assert point_memory.memo(step_cache.digest({**resnet50, "parameters": 1}), sgd) is not memo
    for request in (sgd, adamw):
        kept = point_memory.memo(digest, request)
        for _ in range(2):  # the second pass reads the memo
            fresh: list[PointDict] = [{"batch_size": b, "fits_in_memory": None} for b in (8, 64, 512)]
            memoised = [p.copy() for p in fresh]
            point_memory.annotate(fresh, resnet50, t4, request)
            point_memory.annotate(memoised, resnet50, t4, request, peaks=kept.peaks)
            assert memoised == fresh
            for oom in ([], [40]):
                alone = point_memory.max_batch_size(resnet50, t4, request, measured_oom=oom)
                assert (
                    point_memory.max_batch_size(resnet50, t4, request, measured_oom=oom, largest=kept.largest) == alone
                )
    assert point_memory.max_batch_size(resnet50, t4, sgd, measured_oom=[40], largest=memo.largest) == 39
