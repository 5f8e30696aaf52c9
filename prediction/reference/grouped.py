"""Grouped convs that are not depthwise (ResNeXt's, RegNet's) under channels_last.

cuDNN has no fast NHWC kernels for them: public reports put ResNeXt-101's grouped layers 30-40x slower in NHWC on a
V100 (cuDNN 7.6, pytorch/pytorch#34977) and grouped convs in channels_last "generally unusable for quite a range of
group sizes" on an RTX 3090 (PyTorch 1.10, pytorch/pytorch#70954); AMD's MIGraphX forces NCHW for them. So the NHWC
speed-up our H100's dense convs show (nhwc_conv_tensor_*: no copies around their kernels) is not theirs: they are
costed at their NCHW time plus copies of their activations to and from NCHW, the least such a fallback costs.
"""

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from prediction.reference.convs import Geometry, geometry
from prediction.reference.specs import GpuSpecs, element_bytes
from prediction.reference.steps import kernel_precision, precision_group


def is_grouped(g: Geometry) -> np.ndarray:
    """Grouped convs that are not depthwise (ResNeXt's, RegNet's): more than one group, more than one channel each."""
    return (g.groups > 1) & (g.groups != g.cin)


def layout_transposes_ms(
    g: Geometry, batch: np.ndarray, precision: str, bandwidth_gbs: float, efficiency: float, floor_ms: float
) -> np.ndarray:
    """Times (L, B, 3) of the NHWC<->NCHW copies around a conv whose kernels read NCHW (precision: the kernels'):
    each phase's two activation tensors (forward x and y, data gradient dy and dx, weight gradient x and dy) read and
    written once each, at the streaming bandwidth, one kernel per tensor."""
    eb = element_bytes(precision)
    n = batch[None, :]
    x_b, y_b = n * (g.h * g.w * g.cin)[:, None] * eb, n * (g.ho * g.wo * g.cout)[:, None] * eb
    per_phase = 2.0 * (x_b + y_b) / (bandwidth_gbs * 1e9 * efficiency) * 1e3 + 2 * floor_ms
    return np.repeat(per_phase[..., None], 3, axis=2)


def nhwc_times(
    per_layer: np.ndarray, tensor: np.ndarray, specs: Sequence[Mapping[str, Any]], batch: np.ndarray, gpu: GpuSpecs,
    precision: str, c: Mapping[str, float],
) -> np.ndarray:  # fmt: skip
    """per_layer (L, B, 3) uncalibrated times with the grouped convs among specs as channels_last runs them
    (precision: the training's; c: the GPU's whole-step constants)."""
    g = geometry(specs)
    grouped = is_grouped(g)
    if not grouped.any():
        return per_layer
    sub = Geometry(*(getattr(g, f.name)[grouped] for f in dataclasses.fields(g)))
    copies = layout_transposes_ms(sub, batch, kernel_precision(precision), gpu.mem_bandwidth_gbs,
                                  c["memory_efficiency"], c["kernel_floor_ms"])  # fmt: skip
    # on the tensor-core path the step's NHWC multiplier scales them: undo it, they gain nothing from NHWC
    undo = np.where(tensor[grouped], 1.0 / c.get(f"nhwc_conv_tensor_{precision_group(precision)}", 1.0), 1.0)
    out = per_layer.copy()
    out[grouped] = (per_layer[grouped] + copies) * undo
    return out
