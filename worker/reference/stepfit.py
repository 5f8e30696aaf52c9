"""Fitting the whole-step constants (model.json "step"): device multipliers per precision group, host costs.

Rows are whole training steps (public sets and our own H100 steps) turned into uncalibrated parts by the conv
model and the workload (worker/reference/steps.py); the constants minimise the weighted squared log error, with
ridge penalties that keep a part's multipliers close across precision groups and near 1x, so a group or part
with few rows borrows from the others instead of fitting noise. Host costs have no public rows to learn from
but our H100 steps (public sets time large batches, where the device sets the step): without them they stay at
their priors (the PyTorch docs' ~10 us per operator, both passes, and a few us per optimizer tensor).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from worker.reference.steps import DEVICE_PARTS, PRECISION_GROUPS, StepParts, overlap

# Priors (the starting point, and where the ridge pulls): device parts at 1x, a conv call's fixed device time,
# host costs per launched kernel (forward and its backward), per autocast cast, per optimizer tensor, per step.
PRIORS: dict[str, float] = {
    **{f"dev_{part}_{g}": 1.0 for part in DEVICE_PARTS if part != "conv_calls" for g in PRECISION_GROUPS},
    **{f"dev_conv_calls_{g}": 0.03 for g in PRECISION_GROUPS},
    "dev_conv_autotuned": 1.0,
    "host_kernel_ms": 0.02,
    "host_cast_factor": 1.0,
    "host_tensor_ms": 0.002,
    **{f"host_step_ms_{g}": 0.5 for g in PRECISION_GROUPS},
    "smooth_max_q": 4.0,
}
NAMES = tuple(PRIORS)
# Ridge strengths on log values, against a (CNN, configuration) series' weight of 1: a part's multiplier across
# precision groups, a group's multipliers across parts, the multipliers toward 1x, the host costs toward their priors.
ACROSS_GROUPS, ACROSS_PARTS, TOWARD_ONE, HOST_PRIOR = 0.045, 0.045, 0.022, 0.009


@dataclass(frozen=True)
class Rows:
    """Parts of many one-batch-size steps, stacked; measured ms and each row's fit weight."""

    device: np.ndarray  # (R, len(DEVICE_PARTS))
    optimizer_ms: np.ndarray  # (R,)
    kernels: np.ndarray
    casts: np.ndarray
    tensors: np.ndarray
    group: np.ndarray  # (R,) index into PRECISION_GROUPS
    passes: np.ndarray  # (R,) foreach passes over the parameter tensors
    synced: np.ndarray  # (R,) bool
    autotuned: np.ndarray  # (R,) bool
    measured: np.ndarray
    weight: np.ndarray

    @classmethod
    def stack(cls, parts: Sequence[StepParts], measured: Sequence[float], weight: Sequence[float]) -> "Rows":
        """Rows from one-batch-size parts."""
        return cls(
            np.array([p.device[0] for p in parts]).reshape(-1, len(DEVICE_PARTS)),
            np.array([p.optimizer_ms for p in parts]), np.array([p.kernels for p in parts]),
            np.array([p.casts for p in parts]), np.array([p.tensors for p in parts]),
            np.array([PRECISION_GROUPS.index(p.group) for p in parts], dtype=int),
            np.array([p.passes for p in parts]),
            np.array([p.synced for p in parts], dtype=bool), np.array([p.autotuned for p in parts], dtype=bool),
            np.asarray(measured, dtype=float), np.asarray(weight, dtype=float),
        )  # fmt: skip


def predict(rows: Rows, p: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(step, device, host) ms of every row under constants p: the same arithmetic as steps.combine."""
    scales = np.array([[p[f"dev_{part}_{g}"] for g in PRECISION_GROUPS] for part in DEVICE_PARTS])  # (P, G)
    per_row = scales[:, rows.group].T.copy()
    per_row[rows.autotuned, :3] *= p["dev_conv_autotuned"]
    device = (rows.device * per_row).sum(axis=1)
    per_step = np.array([p[f"host_step_ms_{g}"] for g in PRECISION_GROUPS])[rows.group]
    host_pass = p["host_kernel_ms"] * (rows.kernels + p["host_cast_factor"] * rows.casts)
    host_opt = p["host_tensor_ms"] * rows.tensors * rows.passes + per_step
    return overlap(device, rows.optimizer_ms, host_pass, host_opt, rows.synced, p["smooth_max_q"])


def _params(theta: np.ndarray) -> dict[str, float]:
    return {k: float(v) for k, v in zip(NAMES, np.exp(theta), strict=True)}


_INDEX = {k: i for i, k in enumerate(NAMES)}
# (groups, parts) indices of the device multipliers; the conv-call floor is a time, not a multiplier.
_SCALES = np.array([[_INDEX[f"dev_{part}_{g}"] for part in DEVICE_PARTS[:-1]] for g in PRECISION_GROUPS])
_HOST = np.array([i for k, i in _INDEX.items() if k.startswith("host_") or k.startswith("dev_conv_calls")])
_PRIOR = np.log(np.array([PRIORS[k] for k in NAMES]))


def _penalty(theta: np.ndarray) -> np.ndarray:
    s = theta[_SCALES]
    return np.concatenate([
        ACROSS_GROUPS * (s - s.mean(axis=0)).ravel(), ACROSS_PARTS * (s - s.mean(axis=1, keepdims=True)).ravel(),
        TOWARD_ONE * s.ravel(), HOST_PRIOR * (theta[_HOST] - _PRIOR[_HOST]),
        [TOWARD_ONE * theta[_INDEX["dev_conv_autotuned"]]],
    ])  # fmt: skip


def fit(rows: Rows) -> dict[str, float]:
    """Constants minimising the weighted squared log error of rows, with the ridge penalties (deterministic)."""
    theta0 = np.log(np.array([PRIORS[k] for k in NAMES]))
    if not len(rows.measured):
        return _params(theta0)
    w = np.sqrt(rows.weight)

    def residual(theta: np.ndarray) -> np.ndarray:
        step, _, _ = predict(rows, _params(theta))
        return np.concatenate([w * np.log(step / rows.measured), _penalty(theta)])

    fitted = least_squares(residual, theta0, bounds=(theta0 - 8.0, theta0 + 8.0))
    return _params(fitted.x)
