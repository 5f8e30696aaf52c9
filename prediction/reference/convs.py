"""Conv layer geometry, its roofline on a GPU and GPU-normalised features, vectorised over layers x batches.

Every phase is seen as the implicit GEMM cuDNN runs (M x N output tiles, reduction K):
forward        M = batch x out pixels, N = out channels / group, K = in channels / group x kernel area
backward data  M = batch x in pixels,  N = in channels / group,  K = out channels / group x kernel area
backward wgt   M = out channels / group, N = in channels / group x kernel area, K = batch x out pixels
The model never regresses a time: it predicts log(measured / roofline) from features that are
ratios to the GPU (intensity over its ridge point, waves of tiles over its SMs), so a GPU
outside the training range moves the roofline, not the learned correction.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from prediction.reference.specs import GpuSpecs, element_bytes, simt_tflops, tensor_tflops

PHASES = ("forward", "backward_data", "backward_weight")
TILE = 128.0  # the common cuDNN/cuBLAS CTA tile edge (sgemm_128x128, scudnn_128x64 ...)
FEATURES = (
    "phase", "tensor", "elem_bytes", "log_intensity_over_ridge", "log_waves", "wave_tail", "log_k", "log_m",
    "log_n", "kernel", "stride", "depthwise", "log_groups", "log_roofline_us", "log_footprint_over_l2", "arch",
    "alignment",
)  # fmt: skip


@dataclass(frozen=True)
class Geometry:
    """Per-layer arrays (shape (L,)) of a list of conv specs, batch size excluded."""

    cin: np.ndarray
    cout: np.ndarray
    h: np.ndarray
    w: np.ndarray
    ho: np.ndarray
    wo: np.ndarray
    kh: np.ndarray
    kw: np.ndarray
    stride: np.ndarray
    groups: np.ndarray
    transposed: np.ndarray


def geometry(specs: Sequence[Mapping[str, Any]]) -> Geometry:
    """Arrays of a list of ConvSignature.to_json() specs; transposed convs become their direct twin."""
    rows = []
    for s in specs:
        kh, kw = (int(v) for v in s["kernel"])
        sh, sw = (int(v) for v in s.get("stride", (1, 1)))
        ph, pw = (int(v) for v in s.get("padding", (0, 0)))
        dh, dw = (int(v) for v in s.get("dilation", (1, 1)))
        h, w, cin, cout = int(s["in_h"]), int(s["in_w"]), int(s["in_channels"]), int(s["out_channels"])
        transposed = bool(s.get("transposed", False))
        if transposed:
            oph, opw = (int(v) for v in s.get("output_padding", (0, 0)))
            ho = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
            wo = (w - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
            # A transposed conv is the data-gradient of the direct conv from its output to its input.
            h, w, ho, wo, cin, cout = ho, wo, h, w, cout, cin
        else:
            ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
            wo = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        rows.append((cin, cout, h, w, max(ho, 1), max(wo, 1), kh, kw, max(sh, sw), int(s.get("groups", 1)), transposed))
    a = np.array(rows, dtype=float).reshape(-1, 11)
    c = [a[:, i] for i in range(10)]
    return Geometry(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], a[:, 10].astype(bool))


def phase_work(
    g: Geometry, n: np.ndarray, precision: str
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Per phase: (FLOPs, minimum bytes, M, N, K) arrays of shape (L, B); n is the batch as (1, B) or (L, 1)."""
    eb = element_bytes(precision)
    area = (g.kh * g.kw)[:, None]
    cin_g, cout_g, groups = (g.cin / g.groups)[:, None], (g.cout / g.groups)[:, None], g.groups[:, None]
    in_px, out_px = (g.h * g.w)[:, None], (g.ho * g.wo)[:, None]
    flops = 2.0 * n * out_px * g.cout[:, None] * cin_g * area
    x_b, y_b = n * in_px * g.cin[:, None] * eb, n * out_px * g.cout[:, None] * eb
    w_b = np.broadcast_to(g.cout[:, None] * cin_g * area * eb, flops.shape)
    ones = np.ones_like(flops)
    return {
        "forward": (flops, x_b + w_b + y_b, n * out_px * ones, cout_g * ones * groups, cin_g * area * ones),
        "backward_data": (flops, y_b + w_b + x_b, n * in_px * ones, cin_g * ones * groups, cout_g * area * ones),
        "backward_weight": (flops, x_b + y_b + w_b, cout_g * ones * groups, cin_g * area * ones, n * out_px * ones),
    }


def uses_tensor_cores(g: Geometry, gpu: GpuSpecs, precision: str) -> np.ndarray:
    """Whether cuDNN can take the tensor-core path: it needs aligned channels per group (4 for TF32, 8 for FP16)."""
    if tensor_tflops(gpu, precision) is None:
        return np.zeros(len(g.cin), dtype=bool)
    align = 8 if precision == "amp_fp16" else 4
    cin_g, cout_g = g.cin / g.groups, g.cout / g.groups
    return (cin_g % align == 0) & (cout_g % align == 0) & (cin_g >= align)


def features(
    specs: Sequence[Mapping[str, Any]],
    batch_sizes: Sequence[int],
    gpu: GpuSpecs,
    precision: str = "fp32",
    tensor: np.ndarray | None = None,
    paired: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features (3, L, B, F), roofline ms (3, L, B), transposed (L,)) for every phase, layer and batch.

    paired: batch_sizes holds one batch per spec and B is 1 (the layout of measured tables).
    """
    gpu = gpu.filled()
    g = geometry(specs)
    batch = np.asarray(batch_sizes, dtype=float)
    n = batch[:, None] if paired else batch[None, :]
    if tensor is None:
        tensor = uses_tensor_cores(g, gpu, precision)
    tensor_peak = tensor_tflops(gpu, precision) or 0.0
    peak = np.where(tensor, tensor_peak, simt_tflops(gpu, precision))[:, None] * 1e12  # FLOP/s per layer
    bw = gpu.mem_bandwidth_gbs * 1e9
    sms = float(gpu.sm_count or 1)
    l2 = float(gpu.l2_mib or 1.0) * 2**20
    shape = (len(g.cin), n.shape[1])
    out_f = np.empty((3, *shape, len(FEATURES)))
    out_r = np.empty((3, *shape))
    depthwise = ((g.groups == g.cin) & (g.groups > 1)).astype(float)[:, None]
    # vectorised loads need channel counts divisible by 4-8: NeuSight's random odd counts run slower
    per_group = np.gcd((g.cin / g.groups).astype(int), (g.cout / g.groups).astype(int))
    alignment = np.broadcast_to(np.log2(np.gcd(per_group, 32)).astype(float)[:, None], shape)
    for p, name in enumerate(PHASES):
        flops, nbytes, m, n_gemm, k = phase_work(g, n, precision)[name]
        roof = np.maximum(flops / peak, nbytes / bw)
        groups = g.groups[:, None]
        tiles = np.ceil(m / TILE) * np.ceil(n_gemm / groups / TILE) * groups
        waves = tiles / sms
        tail = waves / np.ceil(waves)
        cols = (
            np.full(shape, float(p)),
            np.broadcast_to(tensor[:, None].astype(float), shape),
            np.full(shape, element_bytes(precision)),
            np.log2(flops / nbytes / (peak / bw)),
            np.log2(waves),
            tail,
            np.log2(k),
            np.log2(m),
            np.log2(n_gemm),
            np.broadcast_to(np.maximum(g.kh, g.kw)[:, None], shape),
            np.broadcast_to(g.stride[:, None], shape),
            np.broadcast_to(depthwise, shape),
            np.broadcast_to(np.log2(g.groups)[:, None], shape),
            np.log2(roof * 1e6),
            np.log2(nbytes / l2),
            # architecture generation: kernels' reachable efficiency differs by generation; a newer GPU than
            # any measured falls in the newest bin (trees do not extrapolate), never outside the data
            np.full(shape, gpu.cc),
            alignment,
        )
        out_f[p] = np.stack(cols, axis=-1)
        out_r[p] = roof * 1e3
    return out_f, out_r, g.transposed
