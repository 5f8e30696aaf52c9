"""Depthwise convs costed by the SM cycles their kernels issue (prediction/reference/depthwise.py)."""

import dataclasses

import numpy as np
import pytest

from prediction.reference import convs, depthwise
from prediction.reference.fit import gpu_table
from prediction.reference.specs import sm_cycles_per_s

SPEC = {"in_channels": 96, "out_channels": 96, "in_h": 56, "in_w": 56, "kernel": [3, 3], "stride": [1, 1],
        "padding": [1, 1], "groups": 96}  # fmt: skip
COEF = [[0.01, 4.0, 0.2], [0.01, 2.0, 0.1], [0.02, 0.5, 0.5]]  # launch ms, cycles per input, cycles per MAC


def test_only_one_group_per_input_channel_is_depthwise() -> None:
    """Grouped (ResNeXt) and dense convs keep the conv model; a depthwise one with a channel multiplier is one."""
    specs = [SPEC, {**SPEC, "groups": 32}, {**SPEC, "groups": 1}, {**SPEC, "out_channels": 192}]
    assert depthwise.is_depthwise(convs.geometry(specs)).tolist() == [True, False, False, True]


def test_fit_recovers_the_costs_that_made_the_layers() -> None:
    """Layers timed on two GPUs from known costs: the fit gives those costs back."""
    gpus = gpu_table()
    rows = []
    for gpu in ("H200-SXM-141GB", "A100-SXM4-80GB"):
        for k, stride, channels, batch in [(k, s, c, b) for k in (3, 5) for s in (1, 2) for c in (32, 144, 480)
                                           for b in (8, 64, 256)]:  # fmt: skip
            spec = {**SPEC, "in_channels": channels, "out_channels": channels, "groups": channels,
                    "kernel": [k, k], "stride": [stride, stride], "padding": [k // 2, k // 2]}  # fmt: skip
            ms = depthwise.times(convs.geometry([spec]), np.array([float(batch)]), gpus[gpu], "fp32", COEF)[0, 0]
            rows.append((gpu, "fp32", spec, batch, tuple(ms)))
    rows.append(("H200-SXM-141GB", "fp32", {**SPEC, "groups": 1}, 64, (9.0, 9.0, 9.0)))  # dense: not used
    fitted = depthwise.fit(rows, gpus)
    assert list(fitted) == ["fp32"]  # no amp_fp16 layers: none fitted for it
    assert np.array(fitted["fp32"]) == pytest.approx(np.array(COEF), rel=0.02, abs=1e-4)


def test_too_few_layers_fit_nothing() -> None:
    """Under MIN_LAYERS depthwise layers of a precision the conv model keeps answering."""
    gpus = gpu_table()
    rows = [("H200-SXM-141GB", "fp32", SPEC, 8, (0.1, 0.2, 0.1))] * (depthwise.MIN_LAYERS - 1)
    assert depthwise.fit(rows, gpus) == {}


def test_time_scales_with_sm_cycles_and_never_beats_the_bytes() -> None:
    """Twice the SMs x clock: the issued work takes half as long; a GPU starved of bandwidth takes its bytes' time."""
    gpu = gpu_table()["A100-SXM4-80GB"]
    fast = dataclasses.replace(gpu, fp32_tflops=2 * gpu.fp32_tflops)
    geo, batch = convs.geometry([SPEC]), np.array([256.0])
    no_launch = [[0.0, a, b] for _, a, b in COEF]
    base = depthwise.times(geo, batch, gpu, "fp32", no_launch)
    assert sm_cycles_per_s(fast) == pytest.approx(2 * sm_cycles_per_s(gpu))
    assert depthwise.times(geo, batch, fast, "fp32", no_launch) == pytest.approx(base / 2)
    starved = dataclasses.replace(gpu, mem_bandwidth_gbs=1.0)
    _flops, nbytes, *_ = convs.phase_work(geo, batch[None, :], "fp32")["forward"]
    assert depthwise.times(geo, batch, starved, "fp32", no_launch)[0, 0, 0] == pytest.approx(nbytes[0, 0] / 1e9 * 1e3)


def test_the_reference_costs_depthwise_layers_by_the_fitted_costs() -> None:
    """With costs in the model, its depthwise layers are theirs (and off tensor cores); other convs are unchanged."""
    from prediction.reference import load
    from prediction.reference.model import ReferenceModel

    shipped = load()
    gpu = gpu_table()["L4"]
    dense = {**SPEC, "groups": 1}
    with_costs = ReferenceModel({**shipped.params, "depthwise": {"fp32": COEF}})
    without = ReferenceModel({k: v for k, v in shipped.params.items() if k != "depthwise"})
    got = with_costs.predict_convs(specs=[SPEC, dense], batch_sizes=[32], gpu=gpu)
    expected = depthwise.times(convs.geometry([SPEC]), np.array([32.0]), gpu.filled(), "fp32", COEF)[0, 0]
    assert got[0, 0] == pytest.approx(expected)
    assert got[1, 0] == pytest.approx(without.predict_convs(specs=[dense], batch_sizes=[32], gpu=gpu)[0, 0])
    assert not np.allclose(without.predict_convs(specs=[SPEC], batch_sizes=[32], gpu=gpu)[0, 0], expected)
