"""Depthwise convs costed by the SM cycles their kernels issue per element, learnt from layers our agent timed.

A depthwise conv does a few multiply-adds per element and no reduction over channels, so no tensor core and no
GEMM tiling helps it; PyTorch's kernels for it run far from both the FLOP peak and DRAM bandwidth (an H200's
took 5-14x its byte roofline). The public layer data hold only inference forwards of 3x3 ones (cuDNN 7.6 under
MXNet), and the conv model learnt on them answered the H200's training layers 2.5-8x too fast. What bounds these
kernels is the work the SMs issue: a fixed launch time, cycles per input element read, cycles per multiply-add
(output elements x kernel area), per phase and precision, fitted on every depthwise layer of the bundles and
scaled to another GPU by its SMs x clock (specs.sm_cycles_per_s, as op_passes scales memory-bound operators'
excess), never below the time its bytes take at the GPU's bandwidth. Without depthwise layers in any bundle the
conv model answers, as before.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.optimize import nnls

from prediction.reference import convs
from prediction.reference.specs import GpuSpecs, sm_cycles_per_s

# Layers per precision below which no coefficients are fitted (the conv model answers instead).
MIN_LAYERS = 20
PRECISIONS = ("fp32", "amp_fp16")

# One measured layer: (GPU, precision 'fp32' or 'amp_fp16', conv spec, batch, (forward, backward-data,
# backward-weight) ms), as measured.layer_rows gives them.
LayerRow = tuple[str, str, dict[str, Any], int, tuple[float, float, float]]


def is_depthwise(geo: convs.Geometry) -> np.ndarray:
    """(L,) bool: a group per input channel (MobileNet's, EfficientNet's), more than one."""
    return (geo.groups == geo.cin) & (geo.groups > 1) & ~geo.transposed


def _work(geo: convs.Geometry, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(input elements, multiply-adds) per layer and batch; n is the batch as (1, B) or (L, 1), as convs.phase_work."""
    inputs = n * (geo.cin * geo.h * geo.w)[:, None]
    macs = n * (geo.cout * geo.ho * geo.wo * geo.kh * geo.kw)[:, None]
    return inputs, macs


def fit(rows: Sequence[LayerRow], gpus: dict[str, GpuSpecs]) -> dict[str, list[list[float]]]:
    """Per precision, per phase: [launch ms, cycles per input element, cycles per multiply-add], minimising the
    relative error over the depthwise layers of rows (non-negative: no term may make a layer faster)."""
    out: dict[str, list[list[float]]] = {}
    for precision in PRECISIONS:
        mine = [r for r in rows if r[1] == precision]
        if mine:
            mine = [r for r, d in zip(mine, is_depthwise(convs.geometry([r[2] for r in mine])), strict=True) if d]
        if len(mine) < MIN_LAYERS:
            continue
        n = np.array([[r[3]] for r in mine], dtype=float)
        inputs, macs = (a[:, 0] for a in _work(convs.geometry([r[2] for r in mine]), n))
        rate = np.array([sm_cycles_per_s(gpus[r[0]]) for r in mine]) / 1e3  # cycles per ms
        ms = np.array([r[4] for r in mine])
        design = np.column_stack([np.ones(len(mine)), inputs / rate, macs / rate])
        out[precision] = [nnls(design / ms[:, p, None], np.ones(len(mine)))[0].tolist() for p in range(3)]
    return out


def times(
    geo: convs.Geometry, batch: np.ndarray, gpu: GpuSpecs, precision: str, coef: Sequence[Sequence[float]],
    paired: bool = False,
) -> np.ndarray:  # fmt: skip
    """Phase times (L, B, 3) ms of depthwise convs on gpu: the issue-bound estimate, never below the byte roofline.

    paired: batch holds one batch per layer and B is 1 (the layout of measured tables, as convs.features)."""
    n = batch[:, None] if paired else batch[None, :]
    inputs, macs = _work(geo, n)
    rate = sm_cycles_per_s(gpu) / 1e3
    work = convs.phase_work(geo, n, precision)
    bw = gpu.mem_bandwidth_gbs * 1e9
    out = np.empty((*inputs.shape, 3))
    for p, phase in enumerate(convs.PHASES):
        launch, per_input, per_mac = coef[p]
        issued = launch + (per_input * inputs + per_mac * macs) / rate
        out[..., p] = np.maximum(issued, work[phase][1] / bw * 1e3)
    return out
