"""Whole-step models and their honest evaluation; no database here, only numbers.

Every model maps a point (features, summed conv time, FLOPs) to an iteration time in ms.
The model has two stages. A base with one non-negative coefficient per cost that every step
pays: the measured conv time, the parameters (the optimizer and the weight gradients read and
write each one, however small the batch: this is most of an AlexNet or VGG step), the bytes
the other layers move, and a cost per operation. Then LightGBM learns the ratio of the
measured step to that base (in log space). Both transfer across CNNs better than a model of
the time itself, and the measured conv time keeps the steps at particular batch sizes that
the layer benchmarks show.
"""

import math
import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lightgbm as lgb
import numpy as np
from scipy.optimize import nnls

from worker import features

QUANTILES = {"p10": 0.1, "p90": 0.9}


@dataclass(frozen=True)
class Point:
    """One measured whole step with what the models may use to predict it."""

    id: int
    cnn: str
    family: str
    x: list[float]
    conv_ms: float
    flops: float
    step_ms: float
    machine: str = ""


Predictor = Callable[[Point], float]


def fit_scale(points: list[Point], value: Callable[[Point], float]) -> Predictor:
    """step ≈ k × value, with k minimising the squared relative error."""
    num = sum(value(p) / p.step_ms for p in points)
    den = sum((value(p) / p.step_ms) ** 2 for p in points)
    k = num / den
    return lambda p: k * value(p)


def scale_constant(points: list[Point]) -> float:
    """The conv-time scale k of the simplest model (kept as a baseline and for small data)."""
    num = sum(p.conv_ms / p.step_ms for p in points)
    den = sum((p.conv_ms / p.step_ms) ** 2 for p in points)
    return num / den


def _params(alpha: float | None, rows: int) -> dict[str, Any]:
    params: dict[str, Any] = {
        "learning_rate": 0.05,
        "num_leaves": 7,
        # Few rows per machine type: leaves must be allowed to be small, or nothing is learnt.
        "min_data_in_leaf": max(2, min(5, rows // 8)),
        "min_data_in_bin": 1,
        "feature_fraction": 0.8,
        "lambda_l2": 1.0,
        "verbose": -1,
        "deterministic": True,
        "num_threads": 1,
        "seed": 7,
    }
    params.update({"objective": "quantile", "alpha": alpha} if alpha else {"objective": "regression"})
    return params


# Measured where the agent measured them: the other ops' and the optimizer's time (issue 14). The guessed
# terms (parameters, other layers' bytes) stand in only where those are not measured, so the learnt part
# shrinks to what no measurement covers (framework overhead per op, and a constant).
BASE_TERMS = ("conv_ms", "other_ms", "optimizer_ms", "mparameters", "other_mbytes", "operations", "constant")
_AT = {name: i for i, name in enumerate(features.NAMES)}


def base_terms(x: list[float], conv_ms: float) -> list[float]:
    """The costs of the base, in BASE_TERMS order."""
    operations = sum(x[_AT[f"{k}_convs"]] for k in features.LAYER_KINDS) + sum(
        x[_AT[f"{k}_ops"]] for k in features.WORK_KINDS
    )
    ops_measured, optimizer_measured = x[_AT["ops_measured"]], x[_AT["optimizer_measured"]]
    # Measured ops cover the other layers' work; a measured optimizer step (with the weight gradients in the
    # conv and linear backward timings) covers the per-parameter work.
    other_mbytes = sum(x[_AT[f"{k}_mbytes"]] for k in features.WORK_KINDS) * (1 - ops_measured)
    mparameters = x[_AT["mparameters"]] * (1 - optimizer_measured * ops_measured)
    other_ms = x[_AT["other_ms"]] if ops_measured else 0.0
    return [conv_ms, other_ms, x[_AT["optimizer_ms"]], mparameters, other_mbytes, operations, 1.0]


def fit_base(points: list[Point]) -> list[float]:
    """Non-negative coefficients of the base terms, minimising the squared relative error."""
    a = np.array([[t / p.step_ms for t in base_terms(p.x, p.conv_ms)] for p in points])
    coef, _residual = nnls(a, np.ones(len(points)))
    return [float(c) for c in coef]


def base_ms(coef: list[float], x: list[float], conv_ms: float) -> float:
    """The base's step time; never zero, so the ratio stays defined."""
    return max(1e-3, float(np.dot(coef, base_terms(x, conv_ms))))


def fit_lgbm(points: list[Point], rounds: int = 300) -> dict[str, Any]:
    """The base coefficients, and median (L2 on the log ratio) and P10/P90 boosters as LightGBM model text."""
    coef = fit_base(points)
    x = np.array([[*p.x, base_ms(coef, p.x, p.conv_ms)] for p in points], dtype=float)
    y = np.array([math.log(p.step_ms / base_ms(coef, p.x, p.conv_ms)) for p in points])
    boosters = {"p50": lgb.train(_params(None, len(points)), lgb.Dataset(x, y), rounds)}
    for name, alpha in QUANTILES.items():
        boosters[name] = lgb.train(_params(alpha, len(points)), lgb.Dataset(x, y), rounds)
    return {"base": coef, "boosters": {name: b.model_to_string() for name, b in boosters.items()}}


@dataclass(frozen=True)
class Fitted:
    """A loaded model: base coefficients and boosters."""

    base: list[float]
    boosters: dict[str, lgb.Booster]


def load(params: dict[str, Any]) -> Fitted:
    """A model from its stored parameters (LightGBM model text, never a pickle)."""
    boosters = {name: lgb.Booster(model_str=text) for name, text in params["boosters"].items()}
    return Fitted(list(params["base"]), boosters)


def predict(model: Fitted, x: list[float], conv_ms: float) -> tuple[float, float, float]:
    """(P10, median, P90) iteration time in ms; quantiles sorted so they never cross."""
    base = base_ms(model.base, x, conv_ms)
    row = np.array([[*x, base]], dtype=float)
    p10, p50, p90 = (base * math.exp(float(model.boosters[n].predict(row)[0])) for n in ("p10", "p50", "p90"))
    low, mid, high = sorted((p10, p50, p90))
    return low, mid, high


def lgbm_predictor(points: list[Point]) -> Predictor:
    """Fit the base and LightGBM on points; return the median prediction."""
    model = load(fit_lgbm(points))
    return lambda p: predict(model, p.x, p.conv_ms)[1]


def base_predictor(points: list[Point]) -> Predictor:
    """The base alone (reported beside the full model, so the boosters must earn their place)."""
    coef = fit_base(points)
    return lambda p: base_ms(coef, p.x, p.conv_ms)


def held_out(
    points: list[Point], group: Callable[[Point], str], fit: Callable[[list[Point]], Predictor]
) -> dict[str, Any]:
    """Leave-one-group-out: each group predicted by a model fitted without any of its points."""
    groups: dict[str, list[Point]] = defaultdict(list)
    for p in points:
        groups[group(p)].append(p)
    per_group: dict[str, Any] = {}
    every: list[float] = []
    for name, test in sorted(groups.items()):
        train = [p for p in points if group(p) != name]
        if not train:
            continue
        model = fit(train)
        predicted = [model(p) for p in test]
        apes = [abs(q - p.step_ms) / p.step_ms * 100 for q, p in zip(predicted, test, strict=True)]
        per_group[name] = {
            "mape": statistics.fmean(apes), "median_ape": statistics.median(apes), "max_ape": max(apes),
            "rows": len(apes), "held_out_ids": [p.id for p in test],
            "measured_ms": [p.step_ms for p in test], "predicted_ms": predicted,
        }  # fmt: skip
        every.extend(apes)
    return {
        "mape": statistics.fmean(every) if every else None,
        "median_ape": statistics.median(every) if every else None,
        "max_ape": max(every) if every else None,
        "groups": per_group,
    }


def evaluate(points: list[Point]) -> dict[str, Any]:
    """LightGBM and both baselines, leave-one-CNN-out and leave-one-family-out."""
    fits: dict[str, Callable[[list[Point]], Predictor]] = {
        "lightgbm": lgbm_predictor,
        "base_only": base_predictor,
        "conv_scale": lambda pts: fit_scale(pts, lambda p: p.conv_ms),
        "flops_scale": lambda pts: fit_scale(pts, lambda p: p.flops),
    }
    out: dict[str, Any] = {"rows": len(points), "cnns": len({p.cnn for p in points})}
    for split, group in (("loco", lambda p: p.cnn), ("lofo", lambda p: p.family)):
        out[split] = {name: held_out(points, group, fit) for name, fit in fits.items()}
    return out
