"""What a reference point quotes of its own error: the held-out figures of its kind, as its mean error and band."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from prediction.reference.specs import family_of
from prediction.reference.steps import band_group, precision_group


@dataclass(frozen=True)
class PointErrors:
    """What held-out steps of a point's kind showed: mean error (%) and the band (log of measured / predicted)."""

    mape: np.ndarray
    low: np.ndarray
    high: np.ndarray


# What our H100 steps ran with (data/reference/h100/README.md): the setting of every H100 figure.
H100_SETTING = "PyTorch 2.11, cuDNN 9.19, cudnn.benchmark off"


def held_out_on_h100(accuracy: Mapping[str, Any], precision: str) -> float | None:
    """Leave-one-CNN-out mean error on our H100 steps of the configuration in this precision group, if measured."""
    group = precision_group(precision)
    for config, figures in accuracy.get("h100", {}).get("by_config", {}).items():
        if precision_group(config.split("/")[-1]) == group:
            return float(figures["mape"])
    return None


def unseen_gpu_figures(accuracy: Mapping[str, Any], precision: str) -> tuple[float, float, float]:
    """(mean error %, band low, band high) of public steps on GPUs the model never saw, in this precision: the
    step-only rows with the GPU family held out (wholestep.bands), else every headline row."""
    held = accuracy.get("whole_step_bands", {}).get(band_group(precision))
    if held is not None:
        return held["mape"], held["band_low"], held["band_high"]
    return accuracy["whole_step_mape"], accuracy["whole_step_log_ratio_p10"], accuracy["whole_step_log_ratio_p90"]


def point_errors(accuracy: Mapping[str, Any], *, precision: str, launch_bound: np.ndarray, gpu: str) -> PointErrors:
    """Per point, the held-out figures of its kind: precision group and regime (host- or device-bound) on our H100
    steps, left out one CNN at a time; on a GPU of another family, no better than the public steps of GPUs the
    model never saw in its precision (leave-one-GPU-out), so the larger error and the wider band of the two."""
    public = unseen_gpu_figures(accuracy, precision)
    own = accuracy.get("h100", {})
    kinds = own.get("by_group_regime", {}).get(precision_group(precision), {})
    figures = {}
    for regime in ("host", "device"):
        kind = kinds.get(regime)
        if kind is None:
            figures[regime] = public
        elif family_of(gpu) == own.get("family"):
            figures[regime] = (kind["mape"], kind["band_low"], kind["band_high"])
        else:
            figures[regime] = (
                max(kind["mape"], public[0]),
                min(kind["band_low"], public[1]),
                max(kind["band_high"], public[2]),
            )
    bound = np.asarray(launch_bound, dtype=bool)
    host, device = figures["host"], figures["device"]
    return PointErrors(*(np.where(bound, host[i], device[i]).astype(float) for i in range(3)))
