"""A whole step as the overlap of the host's dispatch and the device's kernels (the GPU form of the base).

On a GPU the host queues kernels ahead of the device, so a step takes about the longer of the two, not their sum:
the host's cost grows with the number of operations, the device's with the measured parts. Each part the agent
times alone also carries a floor per call (the call's own dispatch while the GPU waits), which a step pays once, on
the host, so the device's share subtracts it again:

    device = Σ c_i × part_i − floor × operations      (the measured parts and the guessed terms, c_i ≥ 0)
    host   = per_op × operations + constant
    step   = (device^q + host^q)^(1/q)                 (a smooth max; q = 1 is their sum)

Fitted on log errors, each measured part's coefficient pulled toward 1 (the parts add up) with PRIOR points' worth;
no database, no booster. On a CPU, where one processor does both, the inner folds choose among this and the
additive bases (prediction/validation.py).
"""

import math
from typing import Any

import numpy as np
from scipy.optimize import least_squares

# Columns of step_model.BASE_TERMS: the six device parts, then the operations count and the constant.
DEVICE_TERMS = 6
MEASURED_PARTS = 4  # conv, other ops, matmuls, optimizer: measured, so pulled toward 1
OPERATIONS, CONSTANT = 6, 7
Q = 4.0
PRIOR = 1.0
_FLOOR = 1e-3  # ms: no part of a step is ever zero, so the log error stays defined
_BOUNDS = (math.log(1e-9), math.log(1e3))


def step_ms(params: dict[str, Any], terms: np.ndarray) -> np.ndarray:
    """Iteration time in ms of each row of base terms (points × BASE_TERMS) under overlap params (the fit's form)."""
    coef = np.asarray(params["device"], dtype=float)
    operations = terms[:, OPERATIONS]
    device = np.maximum(terms[:, :DEVICE_TERMS] @ coef - float(params["floor"]) * operations, _FLOOR)
    host = np.maximum(float(params["per_op"]) * operations + float(params["constant"]) * terms[:, CONSTANT], _FLOOR)
    q = float(params["q"])
    out: np.ndarray = (device**q + host**q) ** (1 / q)
    return out


def predict(params: dict[str, Any], terms: np.ndarray) -> list[float]:
    """step_ms row by row, so a point gives the same milliseconds alone as among any others (no batched sums)."""
    coef = np.asarray(params["device"], dtype=float)
    floor, per_op, constant, q = (float(params[k]) for k in ("floor", "per_op", "constant", "q"))
    out = []
    for row in terms:
        device = max(float(np.dot(coef, row[:DEVICE_TERMS])) - floor * float(row[OPERATIONS]), _FLOOR)
        host = max(per_op * float(row[OPERATIONS]) + constant * float(row[CONSTANT]), _FLOOR)
        out.append((device**q + host**q) ** (1 / q))
    return out


def _params(theta: np.ndarray) -> dict[str, Any]:
    values = np.exp(theta)
    return {"device": [float(v) for v in values[:DEVICE_TERMS]], "floor": float(values[DEVICE_TERMS]),
            "per_op": float(values[DEVICE_TERMS + 1]), "constant": float(values[DEVICE_TERMS + 2]), "q": Q}  # fmt: skip


def fit(terms: np.ndarray, steps: np.ndarray, start: list[float]) -> dict[str, Any]:
    """Overlap params minimising the squared log error of the steps; start: the additive base's coefficients."""
    device0 = np.clip(np.asarray(start[:DEVICE_TERMS], dtype=float), 1e-6, 1e2)
    device0[:MEASURED_PARTS] = 1.0
    theta0 = np.log(np.concatenate([device0, [1e-2, 3e-2, 1.0]]))
    log_steps = np.log(steps)

    def residuals(theta: np.ndarray) -> np.ndarray:
        predicted = step_ms(_params(theta), terms)
        return np.concatenate([np.log(predicted) - log_steps, math.sqrt(PRIOR) * theta[:MEASURED_PARTS]])

    solution = least_squares(residuals, np.clip(theta0, *_BOUNDS), bounds=_BOUNDS)
    return _params(solution.x)
