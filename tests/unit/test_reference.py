"""The reference predictor: GPU step times from spec sheets, fitted on public measurements only (no DB needed)."""

import json
import math
from decimal import Decimal

import numpy as np
import pytest

from prediction.reference import GpuSpecs, ReferenceModel, layerfit, load
from prediction.reference import data as ref_data
from prediction.reference.fit import STEP_DEFAULTS, fit_memory_ops, gpu_table
from shared.training import Precision, TrainConfig

A100 = GpuSpecs("A100-test", fp32_tflops=19.5, mem_bandwidth_gbs=1555, fp16_tflops=312, tf32_tflops=156,
                sm_count=108, l2_mib=40, compute_capability="8.0", memory_gib=40)  # fmt: skip
V100 = GpuSpecs("V100-test", fp32_tflops=15.7, mem_bandwidth_gbs=900, fp16_tflops=125, sm_count=80, l2_mib=6,
                compute_capability="7.0", memory_gib=16)  # fmt: skip


def conv(cin: int, cout: int, size: int, k: int = 3, stride: int = 1, groups: int = 1) -> dict:
    """A conv spec as ConvSignature.to_json() gives it."""
    return ref_data.spec(cin, cout, size, size, k, k, stride, stride, k // 2, k // 2, groups)


@pytest.fixture(scope="module")
def model() -> ReferenceModel:
    """The committed, fitted model."""
    return load()


@pytest.fixture(scope="module")
def small_fit() -> tuple[str, str]:
    """Two fits of the same small subset (conv boosters only), as JSON text."""
    gpus = gpu_table()
    table = ref_data.load_layers()
    matrix = layerfit.layer_matrix(table, gpus)
    rows = np.zeros(len(table.gpu), dtype=bool)
    rows[::25] = True  # every 25th row: a few thousand, all sources and phases still present
    return tuple(json.dumps(layerfit.fit_conv(matrix, rows), sort_keys=True) for _ in range(2))  # type: ignore[return-value]


def test_fit_on_a_subset_is_deterministic_and_predicts(small_fit: tuple[str, str]) -> None:
    """Fitting the same rows twice gives the same model text, and that model predicts positive times."""
    first, second = small_fit
    assert first == second
    fitted = ReferenceModel({"conv": json.loads(first), "step": STEP_DEFAULTS})
    out = fitted.predict_convs(specs=[conv(64, 64, 56)], batch_sizes=[8], gpu=V100)
    assert out.shape == (1, 1, 3) and (out > 0).all()


def test_predict_convs_shape_and_positivity(model: ReferenceModel) -> None:
    """One time per spec, batch size and phase; all finite and positive, depthwise and transposed included."""
    transposed = {**conv(64, 32, 28), "transposed": True, "stride": [2, 2], "output_padding": [1, 1]}
    specs = [conv(3, 64, 224, 7, 2), conv(64, 64, 56), conv(96, 96, 56, 3, 1, 96), transposed]
    out = model.predict_convs(specs=specs, batch_sizes=[1, 7, 64], gpu=A100)
    assert out.shape == (4, 3, 3)
    assert np.isfinite(out).all() and (out > 0).all()


def test_more_work_is_not_less_time(model: ReferenceModel) -> None:
    """Batch x16 or channels x4 on a big layer never makes a phase faster."""
    by_batch = model.predict_convs(specs=[conv(128, 128, 56)], batch_sizes=[4, 64], gpu=V100)[0]
    assert (by_batch[1] >= by_batch[0]).all()
    by_channels = model.predict_convs(specs=[conv(64, 64, 56), conv(256, 256, 56)], batch_sizes=[32], gpu=V100)
    assert (by_channels[1, 0] >= by_channels[0, 0]).all()


def test_unseen_faster_gpu_is_faster_on_a_big_layer(model: ReferenceModel) -> None:
    """A made-up GPU with twice V100's compute and bandwidth (and SMs) runs a big layer faster."""
    doubled = GpuSpecs("V100x2", fp32_tflops=31.4, mem_bandwidth_gbs=1800, fp16_tflops=250, sm_count=160,
                       l2_mib=12, compute_capability="7.0")  # fmt: skip
    spec = [conv(256, 256, 56)]
    slow = model.predict_convs(specs=spec, batch_sizes=[128], gpu=V100)[0, 0]
    fast = model.predict_convs(specs=spec, batch_sizes=[128], gpu=doubled)[0, 0]
    assert (fast < slow).all()


def test_small_cnn_at_batch_one_is_launch_bound() -> None:
    """mobilenet_v3_large at batch 1: H100 is not faster than A100 by anything like their FLOPs ratio."""
    from prediction.reference.wholestep import network

    gpus = gpu_table()
    convs, work = network("mobilenet_v3_large", 224)
    m = load()
    a100, h100 = gpus["A100-SXM4-40GB"], gpus["H100-SXM5-80GB"]
    (on_a100,) = m.predict_steps(convs=convs, workload=work, batch_sizes=[1], gpu=a100)
    (on_h100,) = m.predict_steps(convs=convs, workload=work, batch_sizes=[1], gpu=h100)
    flops_ratio = (h100.tf32_tflops or 0) / (a100.tf32_tflops or 1)
    assert on_h100.launch_bound and on_h100.host_ms > on_h100.device_ms
    assert on_a100.step_ms / on_h100.step_ms < 0.5 * flops_ratio


def test_gpu_specs_from_machine_types_row() -> None:
    """A machine_types row: gpu_-prefixed Decimals, total memory over gpu_count, missing optional figures filled."""
    row = {
        "name": "p4d.24xlarge", "gpu": "A100-SXM4-40GB", "gpu_count": 8, "gpu_memory_gib": Decimal("320"),
        "gpu_fp32_tflops": Decimal("19.5"), "gpu_fp16_tflops": Decimal("312"), "gpu_tf32_tflops": None,
        "gpu_mem_bandwidth_gbs": "1555", "gpu_sm_count": None, "gpu_l2_mib": None, "gpu_compute_capability": "8.0",
    }  # fmt: skip
    gpu = GpuSpecs.from_row(row)
    assert gpu.name == "A100-SXM4-40GB" and gpu.memory_gib == 40 and gpu.fp32_tflops == 19.5
    filled = gpu.filled()
    assert filled.tf32_tflops == 156 and filled.sm_count and filled.sm_count > 50 and filled.l2_mib
    csv_row = next(r for r in ref_data.gpu_rows() if r["gpu"] == "T4")
    assert GpuSpecs.from_row(csv_row).mem_bandwidth_gbs == float(csv_row["mem_bandwidth_gbs"])
    with pytest.raises(ValueError):
        GpuSpecs.from_row({"gpu": "nothing known"})


def test_load_has_accuracy_and_version(model: ReferenceModel) -> None:
    """The committed model carries the held-out figures the service shows."""
    acc = model.accuracy
    for key in ("whole_step_mape", "whole_step_log_ratio_p10", "whole_step_log_ratio_p90", "evaluated_on"):
        assert key in acc
    assert acc["whole_step_log_ratio_p10"] <= acc["whole_step_log_ratio_p90"]
    assert set(acc["layer_logo_mape"]) == {"forward", "backward_data", "backward_weight"}
    assert len(model.version) >= 8 and load() is load()


def test_resnet50_256_batch_sizes_fast_finite_increasing(model: ReferenceModel) -> None:
    """resnet50 x 256 batch sizes: 256 finite estimates, increasing on average; a batch size's answer does not
    depend on the other batch sizes asked for (its speed is measured in bench/, not here)."""
    from prediction.reference.wholestep import network

    convs, work = network("resnet50", 224)
    batches = list(range(1, 257))
    est = model.predict_steps(
        convs=convs, workload=work, batch_sizes=batches, gpu=A100, training=TrainConfig(optimizer="adam")
    )
    [alone] = model.predict_steps(
        convs=convs, workload=work, batch_sizes=[37], gpu=A100, training=TrainConfig(optimizer="adam")
    )
    steps = np.array([e.step_ms for e in est])
    assert len(est) == 256 and np.isfinite(steps).all() and [e.batch_size for e in est] == batches
    assert np.mean(np.diff(steps) > 0) > 0.8 and steps[-1] > 10 * steps[0] / 2
    parts = est[-1]
    assert parts.conv_ms + parts.other_ms + parts.optimizer_ms == pytest.approx(parts.device_ms, rel=1e-9)
    assert max(parts.device_ms, parts.host_ms) <= parts.step_ms * 1.0001
    assert alone.step_ms == pytest.approx(est[36].step_ms, rel=1e-9)


def test_memory_ops_fit_is_physical() -> None:
    """Fitted bandwidth efficiency is a fraction of the spec, and linear layers do not beat peak."""
    fitted = fit_memory_ops(gpu_table())
    assert 0.3 < fitted["memory_efficiency"] <= 1.2
    assert 0 < fitted["linear_efficiency"] <= 1.0
    assert math.isfinite(fitted["isolated_op_floor_ms"])


@pytest.mark.parametrize("precision", ["fp32", "amp_fp16", "amp_bf16"])
def test_a_larger_batch_is_never_faster_than_a_smaller_one(model: ReferenceModel, precision: Precision) -> None:
    """Every conv of two CNNs, on GPUs of three generations: a phase at any batch size takes no longer than at the
    power-of-two sizes above it, and so does the whole step within 0.1% (the paths' own multipliers may reorder the
    sum by a hair); the learnt correction alone answered an H100's fp16 CUDA-core convs 7x slower at batch 1 than
    at 8, and its whole step 29% slower."""
    from prediction.reference.model import MONOTONE_ANCHORS
    from prediction.reference.steps import kernel_precision
    from prediction.reference.wholestep import network

    gpus = gpu_table()
    batches = list(range(1, 257))
    for name in ("shufflenet_v2_x1_0", "densenet121"):
        convs, work = network(name, 224)
        for gpu in ("H100-SXM5-80GB", "A100-SXM4-40GB", "T4"):
            if precision == "amp_bf16" and gpu == "T4":
                continue
            times = model.predict_convs(specs=[s for s, _ in convs], batch_sizes=batches, gpu=gpus[gpu],
                                        precision=kernel_precision(precision))  # fmt: skip
            steps = np.array([e.step_ms for e in model.predict_steps(
                convs=convs, workload=work, batch_sizes=batches, gpu=gpus[gpu],
                training=TrainConfig(optimizer="sgd", momentum=0.9, precision=precision),
            )])  # fmt: skip
            for anchor in MONOTONE_ANCHORS:
                below = slice(0, int(anchor) - 1)
                assert (times[:, below] <= times[:, [int(anchor) - 1]] * (1 + 1e-9)).all(), (name, gpu, anchor)
                assert (steps[below] <= steps[int(anchor) - 1] * (1 + 1e-3)).all(), (name, gpu, anchor)
