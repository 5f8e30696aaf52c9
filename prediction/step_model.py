"""Whole-step models and their honest evaluation; no database here, only numbers.

Every model maps a point (features, summed conv time, FLOPs) to an iteration time in ms.
The model has two stages. A base with one non-negative coefficient per cost that every step
pays: the measured conv time, the parameters (the optimizer and the weight gradients read and
write each one, however small the batch: this is most of an AlexNet or VGG step), the bytes
the other layers move, and a cost per operation. Then LightGBM learns the ratio of the
measured step to that base (in log space). Both transfer across CNNs better than a model of
the time itself, and the measured conv time keeps the steps at particular batch sizes that
the layer benchmarks show. The P10–P90 interval is not a quantile model's (those were far too
narrow on unseen CNNs): it is the spread of out-of-fold errors (prediction/validation.py), wider for
settings the fit did not see, and the wider the further outside them.
"""

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lightgbm as lgb
import numpy as np
from scipy.optimize import nnls

from prediction import features, overlap


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
    machine_type: str = ""


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


def booster_params(rows: int) -> dict[str, Any]:
    """LightGBM settings for a fit on this many rows (the p50 booster; tests build quantile ones from them)."""
    return {
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
        "objective": "regression",
    }


# Measured where the agent measured them: the other ops' and the optimizer's time. The guessed
# terms (parameters, other layers' bytes) stand in only where those are not measured, so the learnt part
# shrinks to what no measurement covers (framework overhead per op, and a constant).
BASE_TERMS = (
    "conv_ms", "other_ms", "linear_ms", "optimizer_ms", "mparameters", "other_mbytes", "operations", "constant",
)  # fmt: skip
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
    # Measured matmuls (linear layers) apart from the other measured ops: compute-bound, they scale otherwise.
    linear_ms = x[_AT["linear_ms"]] if ops_measured else 0.0
    other_ms = x[_AT["other_ms"]] - linear_ms if ops_measured else 0.0
    return [conv_ms, other_ms, linear_ms, x[_AT["optimizer_ms"]], mparameters, other_mbytes, operations, 1.0]


def fit_base(points: list[Point]) -> list[float]:
    """Non-negative coefficients of the base terms, minimising the squared relative error."""
    a = np.array([[t / p.step_ms for t in base_terms(p.x, p.conv_ms)] for p in points])
    coef, _residual = nnls(a, np.ones(len(points)))
    return [float(c) for c in coef]


# What the base would be without a fit: the measured parts add up to the step, and nothing else costs anything.
BASE_PRIOR = (1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0)
# Pull toward BASE_PRIOR, in points' worth per coefficient; 0 is fit_base itself. Seven CNNs of a calibration let
# NNLS trade one measured part for another (other ops ×2, optimizer ×2.5 on a CPU), which CNNs outside it pay for.
# At most 100, about three calibrations' steps: where one CNN alone shows a part's cost (AlexNet and VGG the
# matmuls'), leaving it out must not let the prior overrule what it showed (stronger pulls cost bf16 on a CPU,
# where matmuls take twice their isolated time in a step, 18% against 11% held out by CNN).
SHRINK_STRENGTHS = (0.0, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)


def fit_base_shrunk(points: list[Point], strength: float) -> list[float]:
    """fit_base with each coefficient pulled toward BASE_PRIOR, weighted by its term's mean share of a step."""
    terms, steps = _terms(points)
    return [float(c) for c in _shrunk(terms / steps[:, None], strength)]


def _terms(points: list[Point]) -> tuple[np.ndarray, np.ndarray]:
    """Each point's base terms (points × BASE_TERMS) and its measured step in ms."""
    return np.array([base_terms(p.x, p.conv_ms) for p in points]), np.array([p.step_ms for p in points])


def _shrunk(a: np.ndarray, strength: float) -> np.ndarray:
    """NNLS of a (terms over steps) toward 1, each coefficient pulled toward BASE_PRIOR by strength × its share."""
    share = np.maximum(a.mean(axis=0), 1e-12)  # a term absent from every point is left free (and stays 0)
    rows = np.vstack([a, math.sqrt(strength) * np.diag(share)])
    target = np.concatenate([np.ones(len(a)), math.sqrt(strength) * share * np.array(BASE_PRIOR)])
    coef, _residual = nnls(rows, target)
    return coef


def shrink_strength(points: list[Point]) -> float:
    """The SHRINK_STRENGTHS value with the least mean |log error| leaving each CNN of these points out in turn
    (nested: only these points are looked at); 0 where fewer than two CNNs leave nothing to hold out."""
    return _strength(points, *_terms(points))


def _strength(points: list[Point], terms: np.ndarray, steps: np.ndarray) -> float:
    """shrink_strength from the points' terms and steps, computed once: every strength refits each fold from them."""
    cnns = sorted({p.cnn for p in points})
    if len(cnns) < 2:
        return 0.0
    held = [np.array([p.cnn == cnn for p in points]) for cnn in cnns]
    best, best_error = 0.0, math.inf
    for strength in SHRINK_STRENGTHS:
        errors: list[float] = []
        for out in held:
            coef = _shrunk(terms[~out] / steps[~out, None], strength)
            # As base_ms predicts: never below 1 µs.
            predicted = np.maximum(1e-3, terms[out] @ coef)
            errors += np.abs(np.log(steps[out] / predicted)).tolist()
        error = statistics.fmean(errors)
        if error < best_error - 1e-12:  # the weaker pull wins a tie
            best, best_error = strength, error
    return best


def fit_shrunk(points: list[Point]) -> tuple[list[float], float]:
    """The shrunk base's coefficients at the strength shrink_strength chooses for these points, and that strength."""
    terms, steps = _terms(points)
    strength = _strength(points, terms, steps)
    return [float(c) for c in _shrunk(terms / steps[:, None], strength)], strength


def base_ms(coef: list[float], x: list[float], conv_ms: float) -> float:
    """The base's step time; never zero, so the ratio stays defined."""
    return max(1e-3, float(np.dot(coef, base_terms(x, conv_ms))))


def fit_lgbm(points: list[Point], rounds: int = 300) -> dict[str, Any]:
    """The base coefficients and a median booster (L2 on the log ratio to the base) as LightGBM model text."""
    coef = fit_base(points)
    x = np.array([[*p.x, base_ms(coef, p.x, p.conv_ms)] for p in points], dtype=float)
    y = np.array([math.log(p.step_ms / base_ms(coef, p.x, p.conv_ms)) for p in points])
    booster = lgb.train(booster_params(len(points)), lgb.Dataset(x, y), rounds)
    return {"base": coef, "boosters": {"p50": booster.model_to_string()}}


def fit_overlap(points: list[Point]) -> dict[str, Any]:
    """The step as the overlap of host and device (prediction/overlap.py), no booster; `base` holds its device part."""
    terms, steps = _terms(points)
    params = overlap.fit(terms, steps, fit_base(points))
    device = list(params["device"])
    return {"base": device + [0.0] * (len(BASE_TERMS) - len(device)), "overlap": params, "boosters": {}}


def batch_distance(x: list[float], batch_range: tuple[int, int]) -> float:
    """How far a point's batch size lies outside the fitted ones: doublings beyond the range (0 inside)."""
    return doublings_outside(x[_AT["batch_size"]], batch_range)


def doublings_outside(batch: float, batch_range: tuple[int, int]) -> float:
    """Doublings a batch size lies beyond a range of batch sizes (0 inside)."""
    lo, hi = batch_range
    return max(0.0, math.log2(batch / hi), math.log2(lo / batch)) if lo > 0 and batch > 0 else 0.0


@dataclass(frozen=True)
class Interval:
    """Log-ratio bounds (measured ÷ predicted) of the P10–P90 interval, from out-of-fold errors.

    `seen` holds for a point at an image size the fit measured and a batch size within the fitted
    range; any other point gets the wider `unseen` bounds, learnt from folds that left its setting out,
    times (1 + scale × its batch_distance): the further beyond the fitted batch sizes, the wider, by a
    `scale` learnt on inner folds that fitted smaller batch sizes and predicted larger ones (prediction/validation.py).
    """

    seen: tuple[float, float]
    unseen: tuple[float, float]
    image_sizes: tuple[int, ...]
    batch_range: tuple[int, int]
    scale: float = 0.0

    def bounds(self, x: list[float]) -> tuple[float, float]:
        """The (low, high) log-ratio bounds for a point with features x."""
        return self.bounds_at(int(x[_AT["image_size"]]), int(x[_AT["batch_size"]]))

    def bounds_at(self, image_size: int, batch_size: int) -> tuple[float, float]:
        """The (low, high) log-ratio bounds for a point of this image and batch size."""
        lo, hi = self.batch_range
        if image_size in self.image_sizes and lo <= batch_size <= hi:
            return self.seen
        widen = 1 + self.scale * doublings_outside(batch_size, self.batch_range)
        return self.unseen[0] * widen, self.unseen[1] * widen

    @classmethod
    def from_params(cls, d: dict[str, Any]) -> "Interval":
        """From its stored form (to_params); models stored before the scale existed widen nothing."""
        return cls(
            tuple(d["seen"]), tuple(d["unseen"]), tuple(d["image_sizes"]), tuple(d["batch_range"]),  # type: ignore[arg-type]
            float(d.get("scale", 0.0)),
        )  # fmt: skip

    def to_params(self) -> dict[str, Any]:
        """Stored with the model (JSON)."""
        return {"seen": list(self.seen), "unseen": list(self.unseen), "image_sizes": list(self.image_sizes),
                "batch_range": list(self.batch_range), "scale": self.scale}  # fmt: skip


NO_INTERVAL = Interval((0.0, 0.0), (0.0, 0.0), (), (0, 0))


@dataclass(frozen=True)
class Fitted:
    """A loaded model: base coefficients, the median booster (none: the base alone) and the interval."""

    base: list[float]
    booster: lgb.Booster | None
    interval: Interval = NO_INTERVAL
    overlap: dict[str, Any] | None = None  # host and device overlapped (prediction/overlap.py) in place of the base


def load(params: dict[str, Any]) -> Fitted:
    """A model from its stored parameters (LightGBM model text, never a pickle)."""
    text = (params.get("boosters") or {}).get("p50")
    booster = lgb.Booster(model_str=text) if text else None
    interval = Interval.from_params(params["interval"]) if params.get("interval") else NO_INTERVAL
    return Fitted(list(params["base"]), booster, interval, params.get("overlap"))


def medians_ms(model: Fitted, rows: list[tuple[list[float], float]]) -> list[float]:
    """The median iteration time in ms of each (x, conv_ms): the base, times the booster's ratio if any."""
    if model.overlap is not None:
        terms = np.array([base_terms(x, conv_ms) for x, conv_ms in rows], dtype=float)
        return overlap.predict(model.overlap, terms.reshape(len(rows), len(BASE_TERMS)))
    bases = [base_ms(model.base, x, conv_ms) for x, conv_ms in rows]
    if model.booster is None or not rows:
        return bases
    ratios = model.booster.predict(np.array([[*x, b] for (x, _), b in zip(rows, bases, strict=True)], dtype=float))
    return [b * math.exp(float(r)) for b, r in zip(bases, ratios, strict=True)]


def predict_many(model: Fitted, rows: list[tuple[list[float], float]]) -> list[tuple[float, float, float]]:
    """(P10, median, P90) iteration time in ms of each (x, conv_ms); the interval always holds the median."""
    out = []
    for (x, _), mid in zip(rows, medians_ms(model, rows), strict=True):
        lo, hi = model.interval.bounds(x)
        out.append((mid * math.exp(min(lo, 0.0)), mid, mid * math.exp(max(hi, 0.0))))
    return out


def predict(model: Fitted, x: list[float], conv_ms: float) -> tuple[float, float, float]:
    """(P10, median, P90) iteration time in ms of one point."""
    return predict_many(model, [(x, conv_ms)])[0]


def predict_table(model: Fitted, x: np.ndarray) -> list[tuple[float, float, float]]:
    """(P10, median, P90) iteration time in ms of every point of a features.table (one booster call for all).

    Each point's numbers are those predict() gives it alone: the base per point, the same booster rows.
    """
    if not len(x):
        return []
    terms = base_table(x)
    if model.overlap is not None:
        mids = overlap.predict(model.overlap, terms)
    else:
        coef = np.asarray(model.base, dtype=float)
        mids = [max(1e-3, float(np.dot(coef, row))) for row in terms]
        if model.booster is not None:
            ratios = model.booster.predict(np.column_stack([features.matrix(x), mids]))
            mids = [b * math.exp(float(r)) for b, r in zip(mids, ratios, strict=True)]
    out = []
    for image, batch, mid in zip(x["image_size"].tolist(), x["batch_size"].tolist(), mids, strict=True):
        lo, hi = model.interval.bounds_at(int(image), int(batch))
        out.append((mid * math.exp(min(lo, 0.0)), mid, mid * math.exp(max(hi, 0.0))))
    return out


def base_table(x: np.ndarray) -> np.ndarray:
    """base_terms of every point of a features.table, (points × BASE_TERMS), summed in base_terms' order."""
    convs = np.zeros(len(x))
    for k in features.LAYER_KINDS:
        convs = convs + x[f"{k}_convs"]
    work_ops = np.zeros(len(x))
    for k in features.WORK_KINDS:
        work_ops = work_ops + x[f"{k}_ops"]
    mbytes = np.zeros(len(x))
    for k in features.WORK_KINDS:
        mbytes = mbytes + x[f"{k}_mbytes"]
    ops_measured, optimizer_measured = x["ops_measured"], x["optimizer_measured"]
    other_mbytes = mbytes * (1 - ops_measured)
    mparameters = x["mparameters"] * (1 - optimizer_measured * ops_measured)
    linear_ms = np.where(ops_measured != 0, x["linear_ms"], 0.0)
    other_ms = np.where(ops_measured != 0, x["other_ms"], 0.0) - linear_ms
    return np.column_stack(
        [x["conv_ms"], other_ms, linear_ms, x["optimizer_ms"], mparameters, other_mbytes, convs + work_ops,
         np.ones(len(x))]
    )  # fmt: skip


def lgbm_predictor(points: list[Point]) -> Predictor:
    """Fit the base and LightGBM on points; return the median prediction."""
    model = load(fit_lgbm(points))
    return lambda p: medians_ms(model, [(p.x, p.conv_ms)])[0]


def base_predictor(points: list[Point]) -> Predictor:
    """The base alone (reported beside the full model, so the boosters must earn their place)."""
    coef = fit_base(points)
    return lambda p: base_ms(coef, p.x, p.conv_ms)


def shrunk_predictor(points: list[Point]) -> Predictor:
    """The base pulled toward the summed measured parts, its strength chosen leaving each CNN out (a baseline)."""
    coef, _strength = fit_shrunk(points)
    return lambda p: base_ms(coef, p.x, p.conv_ms)
