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


def test_pytorch_sends_fp16_depthwise_convs_to_cudnn_by_its_rule() -> None:
    """Stride 1 with 1, 3 or 5 taps and 32 channels or more: always; stride 2: wide or many channels (or batch 1);
    7x7 filters (ConvNeXt's), fewer channels, narrow maps, dilation and convs that are not depthwise: never."""
    batches = np.array([1, 8, 64, 256])

    def on(**changes: object) -> list[bool]:
        return depthwise.cudnn_path({**SPEC, **changes}, batches).tolist()

    assert on() == [True] * 4
    assert on(kernel=[5, 5]) == on(kernel=[1, 1]) == [True] * 4
    assert on(kernel=[7, 7]) == on(in_channels=16, out_channels=16, groups=16) == [False] * 4
    assert on(in_w=6) == on(dilation=[2, 2]) == on(groups=1) == on(groups=48) == [False] * 4
    assert on(stride=[2, 2]) == [True, False, False, False]  # 96 channels at 56 px: too few
    wide = {"in_channels": 256, "out_channels": 256, "groups": 256, "stride": [2, 2]}
    assert on(**wide) == [True] * 4 and on(**{**wide, "in_w": 14}) == [True, False, False, False]
    assert on(in_channels=512, out_channels=512, groups=512, stride=[2, 2], in_w=14) == [True] * 4
    assert on(kernel=[1, 1], in_channels=128, out_channels=128, groups=128, stride=[2, 2], in_w=7) == [
        True, True, False, False,
    ]  # fmt: skip
    # cuDNN's own costs for its stride-1 kernels; its stride-2 ones took PyTorch's kernels' total time
    assert depthwise.cudnn_costed(SPEC, batches).tolist() == [True] * 4
    assert depthwise.cudnn_costed({**SPEC, **wide}, batches).tolist() == [False] * 4


def test_the_rule_splits_the_h200_s_fp16_and_bf16_depthwise_timings() -> None:
    """Our H200 timed the same depthwise layers in fp16 and bf16 (data/measured/outside_the_fit/): where the rule
    says cuDNN the two took different kernels' times (3x apart at the median phase), elsewhere the same kernels'."""
    from prediction.reference import measured

    path = measured.MEASURED / "outside_the_fit" / "h200-sxm-2026-11-30-amp.jsonl.gz"
    read = measured.bundle(path)
    specs = {c.hash: c.spec for c in read.conv_signatures}
    timed: dict[tuple[str, int], dict[str, np.ndarray]] = {}
    for r in read.rows["layer"]:
        if r.precision in ("fp16", "bf16") and not r.oom and not r.channels_last:
            phases = np.array([r.forward_ms, r.backward_data_ms, r.backward_weight_ms], dtype=float)
            timed.setdefault((r.signature, r.batch_size), {})[r.precision] = phases
    apart: dict[bool, list[float]] = {True: [], False: []}
    for (signature, batch), both in timed.items():
        spec = specs[signature]
        if len(both) == 2 and depthwise.is_depthwise(convs.geometry([spec]))[0]:
            cudnn = bool(depthwise.cudnn_path(spec, np.array([batch]))[0])
            apart[cudnn].append(float(np.abs(np.log(both["fp16"] / both["bf16"])).max()))
    assert len(apart[True]) >= 40 and len(apart[False]) >= 40
    assert np.median(apart[True]) > np.log(2.5) and np.median(apart[False]) < np.log(1.15)
    # its cuDNN-path layers are what the refit learns that path's costs from, so its digest is in the provenance
    from prediction.reference import fit, load

    assert path in fit.inputs() and len(load().params["depthwise"][depthwise.CUDNN_FP16]) == 3


def test_fp16_depthwise_convs_on_cudnn_get_cudnn_s_costs_and_bf16_s_keep_pytorch_s() -> None:
    """In amp_fp16 the layers the rule sends to cuDNN are costed by its coefficients; bf16's, fp32's and the fp16
    layers PyTorch keeps (stride 2, few channels) by the native kernels' costs."""
    from prediction.reference import load
    from prediction.reference.model import ReferenceModel

    shipped = load()
    gpu = gpu_table()["L4"].filled()
    cudnn = [[0.001, 0.5, 0.01], [0.001, 0.5, 0.01], [0.001, 0.5, 0.01]]
    model = ReferenceModel({**shipped.params, "depthwise": {"amp_fp16": COEF, depthwise.CUDNN_FP16: cudnn}})
    kept = {**SPEC, "stride": [2, 2]}
    layers = [(SPEC, 1), (kept, 1)]
    batch = np.array([64.0])

    def cost(spec: dict[str, object], coef: list[list[float]]) -> float:
        return float(depthwise.times(convs.geometry([spec]), batch, gpu, "amp_fp16", coef)[0, 0].sum())

    fp16 = model.conv_paths(layers, [64], gpu, "amp_fp16")[0, :, 2].sum()
    bf16 = model.conv_paths(layers, [64], gpu, "amp_bf16")[0, :, 2].sum()
    first_no_data_grad = float(depthwise.times(convs.geometry([SPEC]), batch, gpu, "amp_fp16", cudnn)[0, 0, 1])
    assert fp16 == pytest.approx(cost(SPEC, cudnn) - first_no_data_grad + cost(kept, COEF))
    native_first = float(depthwise.times(convs.geometry([SPEC]), batch, gpu, "amp_fp16", COEF)[0, 0, 1])
    assert bf16 == pytest.approx(cost(SPEC, COEF) - native_first + cost(kept, COEF))
    assert fp16 < bf16
