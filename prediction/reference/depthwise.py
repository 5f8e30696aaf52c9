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

Which kernels run depends on the dtype: in NCHW PyTorch sends a depthwise conv to cuDNN only when its input and
weight are fp16 and cudnn_path says so (aten/src/ATen/native/Convolution.cpp: use_cudnn_depthwise and
check_cudnn_depthwise_workload_with_filter, cuDNN 8.2 or later); bf16's and fp32's run PyTorch's own kernels. Our
H200 timed the same layers both ways: stride-1 ones took 2.6-4.6x less time in fp16 than in bf16, stride-2 ones
the same where cuDNN was not chosen. The stride-1 ones cuDNN takes get coefficients of their own (CUDNN_FP16,
cudnn_costed); the stride-2 ones it takes (wide maps, many channels) shift time between phases but took 0.98-1.02x
PyTorch's kernels' total there, and keep those kernels' costs.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy.optimize import nnls

from prediction.reference import convs
from prediction.reference.specs import GpuSpecs, sm_cycles_per_s

# Layers per precision below which no coefficients are fitted (the conv model answers instead).
MIN_LAYERS = 20
# What fp16 depthwise convs cost where PyTorch hands them to cuDNN (cudnn_path): fitted on those layers alone.
CUDNN_FP16 = "cudnn_fp16"
PRECISIONS = ("fp32", "amp_fp16", CUDNN_FP16)

# One measured layer: (GPU, precision 'fp32', 'amp_fp16' or CUDNN_FP16, conv spec, batch, (forward, backward-data,
# backward-weight) ms), as measured.layer_rows and measured.cudnn_depthwise_rows give them.
LayerRow = tuple[str, str, dict[str, Any], int, tuple[float, float, float]]


def is_depthwise(geo: convs.Geometry) -> np.ndarray:
    """(L,) bool: a group per input channel (MobileNet's, EfficientNet's), more than one."""
    return (geo.groups == geo.cin) & (geo.groups > 1) & ~geo.transposed


def cudnn_path(spec: Mapping[str, Any], batch: np.ndarray) -> np.ndarray:
    """(B,) bool: whether PyTorch runs this depthwise conv on cuDNN with fp16 input and weight in NCHW, per batch
    size (its check_cudnn_depthwise_workload_with_filter; a conv that is not depthwise never)."""
    batch = np.asarray(batch)
    channels, groups = int(spec["in_channels"]), int(spec.get("groups", 1))
    kh, kw = (int(v) for v in spec["kernel"])
    sh, sw = (int(v) for v in spec.get("stride", (1, 1)))
    dilated = any(int(v) != 1 for v in spec.get("dilation", (1, 1)))
    h, w = int(spec["in_h"]), int(spec["in_w"])
    depthwise = groups == channels > 1 and int(spec["out_channels"]) % channels == 0 and not spec.get("transposed")
    if not depthwise or dilated or channels < 32 or (sh != sw and h != 1):
        return np.zeros(batch.shape, dtype=bool)
    if h == 1 and sw == 1:
        return np.ones(batch.shape, dtype=bool)
    if kh != kw or kw not in (1, 3, 5) or w < 7 or sw not in (1, 2):
        return np.zeros(batch.shape, dtype=bool)
    if sw == 1:
        return np.ones(batch.shape, dtype=bool)
    one = (kw == 1 and w <= 28) or kw in (3, 5)
    many = (kw == 1 and channels >= 128 and w <= 7 and batch <= 16) | (
        kw in (3, 5) and (channels >= 512 or (channels >= 256 and w >= 28))
    )
    return np.where(batch == 1, one, many)


def cudnn_costed(spec: Mapping[str, Any], batch: np.ndarray) -> np.ndarray:
    """(B,) bool: fp16 depthwise convs costed by CUDNN_FP16's coefficients: those cudnn_path sends to cuDNN at
    stride 1 (module docstring: its stride-2 ones took PyTorch's kernels' total time)."""
    stride = max(int(v) for v in spec.get("stride", (1, 1)))
    return cudnn_path(spec, batch) & (stride == 1)


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
