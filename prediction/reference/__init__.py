"""Reference predictor: GPU training-step times from a GPU's spec sheet, learned from public measurements only.

Torch-free and database-free: numpy, scipy and LightGBM. Fit with `python -m prediction.reference.fit`.
"""

from prediction.reference.bands import H100_SETTING, PointErrors, held_out_on_h100, point_errors, unseen_gpu_figures
from prediction.reference.model import ReferenceModel, load
from prediction.reference.specs import GpuSpecs
from prediction.reference.steps import StepArrays, StepEstimate, band_group

__all__ = [
    "H100_SETTING",
    "GpuSpecs",
    "PointErrors",
    "held_out_on_h100",
    "ReferenceModel",
    "StepArrays",
    "StepEstimate",
    "load",
    "point_errors",
    "band_group",
    "unseen_gpu_figures",
]
