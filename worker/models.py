"""Whole-step models and their honest evaluation; no database here, only numbers.

Every model maps a point (features, summed conv time, FLOPs) to an iteration time in ms.
The LightGBM model learns the ratio of the measured step to the summed conv time (in log
space): the ratio transfers across CNNs better than the time itself, and the conv time keeps
the steps at particular batch sizes that the layer benchmarks show.
"""

import math
import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lightgbm as lgb
import numpy as np

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


def fit_lgbm(points: list[Point], rounds: int = 300) -> dict[str, str]:
    """Median (L2 on the log ratio) and P10/P90 quantile boosters, as LightGBM model text."""
    x = np.array([p.x for p in points], dtype=float)
    y = np.array([math.log(p.step_ms / p.conv_ms) for p in points])
    boosters = {"p50": lgb.train(_params(None, len(points)), lgb.Dataset(x, y), rounds)}
    for name, alpha in QUANTILES.items():
        boosters[name] = lgb.train(_params(alpha, len(points)), lgb.Dataset(x, y), rounds)
    return {name: b.model_to_string() for name, b in boosters.items()}


def load(texts: dict[str, str]) -> dict[str, lgb.Booster]:
    """Boosters from their model text (plain text, never a pickle)."""
    return {name: lgb.Booster(model_str=text) for name, text in texts.items()}


def predict(boosters: dict[str, lgb.Booster], x: list[float], conv_ms: float) -> tuple[float, float, float]:
    """(P10, median, P90) iteration time in ms; quantiles sorted so they never cross."""
    row = np.array([x], dtype=float)
    p10, p50, p90 = (conv_ms * math.exp(float(boosters[n].predict(row)[0])) for n in ("p10", "p50", "p90"))
    low, mid, high = sorted((p10, p50, p90))
    return low, mid, high


def lgbm_predictor(points: list[Point]) -> Predictor:
    """Fit LightGBM on points; return its median prediction."""
    boosters = load(fit_lgbm(points))
    return lambda p: predict(boosters, p.x, p.conv_ms)[1]


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
        "conv_scale": lambda pts: fit_scale(pts, lambda p: p.conv_ms),
        "flops_scale": lambda pts: fit_scale(pts, lambda p: p.flops),
    }
    out: dict[str, Any] = {"rows": len(points), "cnns": len({p.cnn for p in points})}
    for split, group in (("loco", lambda p: p.cnn), ("lofo", lambda p: p.family)):
        out[split] = {name: held_out(points, group, fit) for name, fit in fits.items()}
    return out
