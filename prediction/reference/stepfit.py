"""Fitting the whole-step constants (model.json "step"): device multipliers per precision group, host costs.

Rows are whole training steps (public sets and our own H100 steps) turned into uncalibrated parts by the conv
model and the workload (prediction/reference/steps.py); the constants minimise the weighted squared log error, with
ridge penalties that keep a part's multipliers close across precision groups and near 1x, so a group or part
with few rows borrows from the others instead of fitting noise. Host costs have no public rows to learn from
but our H100 steps (public sets time large batches, where the device sets the step): without them they stay at
their priors (the PyTorch docs' ~10 us per operator, both passes, and a few us per optimizer tensor).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from prediction.reference.steps import DEVICE_PARTS, PRECISION_GROUPS, StepParts, overlap

# channels_last multipliers are learnt from one GPU's steps (data/reference/h100/steps_settings.jsonl), for the parts
# NHWC changes most: tensor-core convs (no NCHW<->NHWC transposes around cuDNN's kernels), depthwise
# convs and the memory-bound operators (NHWC kernels). The rest (linear layers, CUDA-core convs, the per-call
# floor) keep NCHW's cost: with 8 CNNs, more multipliers fitted noise (held out: 2 variants tried, this one kept).
NHWC_FITTED = ("conv_tensor", "conv_depthwise", "other")
# Priors (the starting point, and where the ridge pulls): device parts at 1x, a conv call's fixed device time,
# host costs per launched kernel (forward and its backward), per autocast cast, per optimizer tensor, per step.
PRIORS: dict[str, float] = {
    **{f"dev_{part}_{g}": 1.0 for part in DEVICE_PARTS if part != "conv_calls" for g in PRECISION_GROUPS},
    **{f"dev_conv_calls_{g}": 0.03 for g in PRECISION_GROUPS},
    **{f"dev_conv_autotuned_{g}": 1.0 for g in PRECISION_GROUPS},
    # every part's, those not in NHWC_FITTED held at 1x (pinned in both stages, not fitted)
    **{f"nhwc_{part}_{g}": 1.0 for part in DEVICE_PARTS for g in PRECISION_GROUPS},
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
NHWC_PRIOR = 0.3
# Parts whose bf16 and fp16 kernels are the same work on the same units: cuBLAS's matmuls run both at one tensor-core
# rate over the same bytes (our H200's vgg16 steps, mostly conv and linear, take 0.96-0.99x as long in bf16 as in fp16
# with the same optimizer). Few CNNs have large linears (AlexNet, the VGGs, ConvNeXt), so their two multipliers were
# free to wander apart (0.4x to 1.7x) with whichever CNN was left out; tied, each group's steps inform both.
TIED_16BIT = ("linear",)
TIED_STRENGTH = 1.0
# least_squares stops at these relative changes (its default, 1e-8, stopped up to 1% short of the optimum along the
# flat directions, and where it stopped depended on the CPU's summation order: a refit on another machine moved
# constants 1.4%). Converged this far, a jittered start lands within 0.01%; the fit takes ~5% longer.
TOLERANCE = 1e-12
_CONVERGED = {"ftol": TOLERANCE, "xtol": TOLERANCE, "gtol": TOLERANCE}


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
    nhwc: np.ndarray  # (R,) bool
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
            np.array([p.nhwc for p in parts], dtype=bool), np.asarray(measured, dtype=float),
            np.asarray(weight, dtype=float),
        )  # fmt: skip


def predict(rows: Rows, p: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(step, device, host) ms of every row under constants p: the same arithmetic as steps.combine."""
    scales = np.array([[p[f"dev_{part}_{g}"] for g in PRECISION_GROUPS] for part in DEVICE_PARTS])  # (P, G)
    per_row = scales[:, rows.group].T.copy()
    tuned = np.array([p[f"dev_conv_autotuned_{g}"] for g in PRECISION_GROUPS])[rows.group]
    per_row[rows.autotuned, :3] *= tuned[rows.autotuned, None]
    nhwc = np.array([[p[f"nhwc_{part}_{g}"] for part in DEVICE_PARTS] for g in PRECISION_GROUPS])  # (G, P)
    per_row[rows.nhwc] *= nhwc[rows.group[rows.nhwc]]
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
_TIED = np.array([[_INDEX[f"dev_{part}_bf16"], _INDEX[f"dev_{part}_fp16"]] for part in TIED_16BIT])
# What only our own steps show (public sets time large batches, where the device sets the step): the host's costs
# and their overlap with the device.
HOST_NAMES = tuple(k for k in NAMES if k.startswith(("host_", "dev_conv_calls_")) or k == "smooth_max_q")
_OWN = np.array([_INDEX[k] for k in HOST_NAMES])
_TUNED = np.array([_INDEX[f"dev_conv_autotuned_{g}"] for g in PRECISION_GROUPS])
_NHWC = np.array([[_INDEX[f"nhwc_{part}_{g}"] for part in DEVICE_PARTS] for g in PRECISION_GROUPS])


def _penalty(theta: np.ndarray) -> np.ndarray:
    s = theta[_SCALES]
    return np.concatenate([
        ACROSS_GROUPS * (s - s.mean(axis=0)).ravel(), ACROSS_PARTS * (s - s.mean(axis=1, keepdims=True)).ravel(),
        TOWARD_ONE * s.ravel(), HOST_PRIOR * (theta[_HOST] - _PRIOR[_HOST]),
        TIED_STRENGTH * (theta[_TIED[:, 0]] - theta[_TIED[:, 1]]),
    ])  # fmt: skip


def fit(
    rows: Rows, held: Mapping[str, float] | None = None, ratios: tuple[Rows, Rows] | None = None
) -> dict[str, float]:
    """Constants minimising the weighted squared log error of rows, with the ridge penalties (deterministic); the
    settings' multipliers stay at 1x (fit_settings learns them from ratios). held: the host's costs and their
    overlap with the device (HOST_NAMES) kept at these values instead of fitted. ratios: (changed, reference) steps
    of another machine, row for row, whose measured ratio each predicted ratio is fitted to as well (weights of
    changed): what swapping one thing does, where these rows never swap it."""
    theta0 = np.log(np.array([PRIORS[k] for k in NAMES]))
    if held is not None:
        theta0[_OWN] = np.log([held[NAMES[i]] for i in _OWN])
    if not len(rows.measured):
        return _params(theta0)
    w = np.sqrt(rows.weight)
    pinned = np.concatenate([_TUNED, _NHWC.ravel()])
    kept = _OWN if held is not None else np.array([], dtype=int)

    changed, reference = ratios if ratios is not None and len(ratios[0].measured) else (None, None)

    def residual(theta: np.ndarray) -> np.ndarray:
        theta = theta.copy()
        theta[pinned] = 0.0
        theta[kept] = theta0[kept]
        p = _params(theta)
        step, _, _ = predict(rows, p)
        out = [w * np.log(step / rows.measured), _penalty(theta)]
        if changed is not None and reference is not None:
            a, _, _ = predict(changed, p)
            b, _, _ = predict(reference, p)
            out.append(np.sqrt(changed.weight) * (np.log(a / b) - np.log(changed.measured / reference.measured)))
        return np.concatenate(out)

    lower, upper = theta0 - 8.0, theta0 + 8.0
    lower[_INDEX["smooth_max_q"]] = 0.0  # q >= 1: a step takes no longer than host and device one after the other
    fitted = least_squares(residual, np.maximum(theta0, lower + 1e-9), bounds=(lower, upper), **_CONVERGED).x
    fitted[pinned] = 0.0
    fitted[kept] = theta0[kept]
    return _params(fitted)


SETTINGS_NAMES = tuple(
    k for k in NAMES if k.startswith(("dev_conv_autotuned_", *(f"nhwc_{part}_" for part in NHWC_FITTED)))
)


def fit_settings(rows: Rows, baseline: Rows, p: Mapping[str, float]) -> dict[str, float]:
    """The multipliers of channels_last and cudnn.benchmark, with every other constant of p held: fitted to the
    ratio of each step in a setting (rows) to the same step in the default setting, measured in the same run
    (baseline, row for row), so neither the base model's error on a CNN nor the host's run-to-run drift enters."""
    free = np.array([_INDEX[k] for k in SETTINGS_NAMES])
    theta_all = np.log(np.array([p[k] for k in NAMES]))
    if not len(rows.measured):
        return {k: 1.0 for k in SETTINGS_NAMES}
    w = np.sqrt(rows.weight)
    measured = np.log(rows.measured / baseline.measured)
    base_step, _, _ = predict(baseline, p)

    def residual(theta: np.ndarray) -> np.ndarray:
        full = theta_all.copy()
        full[free] = theta
        step, _, _ = predict(rows, _params(full))
        tuned, nhwc = full[_TUNED], full[_NHWC]
        return np.concatenate([
            w * (np.log(step / base_step) - measured), TOWARD_ONE * tuned,
            NHWC_PRIOR * nhwc.ravel(), ACROSS_GROUPS * (nhwc - nhwc.mean(axis=0)).ravel(),
        ])  # fmt: skip

    theta = least_squares(residual, np.zeros(len(free)), bounds=(-3.0, 3.0), **_CONVERGED).x
    return {k: float(np.exp(v)) for k, v in zip(SETTINGS_NAMES, theta, strict=True)}
