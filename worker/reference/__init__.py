"""Reference predictor: GPU training-step times from a GPU's spec sheet, learned from public measurements only.

Torch-free and database-free: numpy, scipy and LightGBM. Fit with `python -m worker.reference.fit`.
"""

from worker.reference.model import ReferenceModel, load
from worker.reference.specs import GpuSpecs
from worker.reference.steps import StepArrays, StepEstimate

__all__ = ["GpuSpecs", "ReferenceModel", "StepArrays", "StepEstimate", "load"]
