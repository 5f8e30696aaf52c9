"""Honest evaluation of whole-step models, the choice between them, and their P10–P90 interval.

Held-out splits (a point is only ever scored by a model fitted without any point of its fold):
- loco: leave one CNN out; lofo: leave one family out;
- sizes: leave one CNN *and* one image size out: the fit holds neither that CNN nor any step at that size;
- batches: leave one CNN out and fit only on the lower half of the batch sizes; score its larger ones.
The model a machine type stores is chosen among CANDIDATES by their errors on inner folds of its own
training points (CNNs left out, and CNNs with a setting left out), never on what is scored. The same
out-of-fold errors give its interval (split-conformal quantiles of log(measured ÷ predicted)), so the
interval says how wrong the model was on CNNs and settings it had not seen, not how spread its training
points were (LightGBM's quantile models, fitted on those, were far too narrow).
"""

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from worker import features, models
from worker.models import Point

COVERAGE = 0.8  # P10–P90
INNER_GROUPS = 6  # CNN groups of the inner folds: leave-one-CNN-out up to this many CNNs
TIE_PCT = 0.01  # a later (more complex) candidate must beat the inner MAPE by this many points to be chosen
MIN_UNSEEN = 5  # fewer out-of-setting residuals than this: the unseen bounds use the others too
_BATCH = features.NAMES.index("batch_size")
_IMAGE = features.NAMES.index("image_size")

ParamsFit = Callable[[list[Point]], dict[str, Any]]
Triple = tuple[float, float, float]
Scorer = tuple[str, Callable[[list[Point]], list[Triple]]]  # (what predicts, P10/median/P90 of points)
Fit = Callable[[list[Point]], Scorer]


def _base_only(points: list[Point]) -> dict[str, Any]:
    return {"base": models.fit_base(points), "boosters": {}}


# What a stored model may be: the base alone, or LightGBM on the base's ratio when the boosters earn their
# place on the inner folds (the simpler one first: it wins a tie).
CANDIDATES: dict[str, ParamsFit] = {"base_only": _base_only, "lightgbm": models.fit_lgbm}


def batch_of(p: Point) -> int:
    """The point's batch size."""
    return int(p.x[_BATCH])


def image_of(p: Point) -> int:
    """The point's image size in pixels."""
    return int(p.x[_IMAGE])


@dataclass(frozen=True)
class Fold:
    """Points a model is fitted on, and points it is scored on (never among them)."""

    name: str
    train: list[Point]
    test: list[Point]


def by_group(points: list[Point], key: Callable[[Point], str]) -> list[Fold]:
    """Leave-one-group-out folds."""
    names = sorted({key(p) for p in points})
    return [Fold(n, [p for p in points if key(p) != n], [p for p in points if key(p) == n]) for n in names]


def batch_cut(points: list[Point]) -> int | None:
    """The largest batch size a `batches` fit sees: the upper half of the distinct sizes is held out."""
    sizes = sorted({batch_of(p) for p in points})
    return sizes[(len(sizes) + 1) // 2 - 1] if len(sizes) > 1 else None


def setting_folds(
    points: list[Point], key: Callable[[Point], str], *, every_size: bool = True
) -> dict[str, list[Fold]]:
    """Folds leaving a group (of `key`) out together with an image size, or with the larger batch sizes.

    every_size: a fold per group and image size; otherwise one per group, the sizes taken in turn (inner folds).
    """
    groups = sorted({key(p) for p in points})
    sizes = sorted({image_of(p) for p in points})
    cut = batch_cut(points)
    pairs = [(g, s) for i, g in enumerate(groups) for s in (sizes if every_size else [sizes[i % len(sizes)]])]
    by_size = [
        Fold(f"{g} @ {s} px", [p for p in points if key(p) != g and image_of(p) != s],
             [p for p in points if key(p) == g and image_of(p) == s])
        for g, s in pairs
    ] if len(sizes) > 1 else []  # fmt: skip
    by_batch = [
        Fold(f"{g} @ batch > {cut}", [p for p in points if key(p) != g and batch_of(p) <= cut],
             [p for p in points if key(p) == g and batch_of(p) > cut])
        for g in groups
    ] if cut is not None else []  # fmt: skip
    return {"sizes": [f for f in by_size if f.test], "batches": [f for f in by_batch if f.test]}


def splits(points: list[Point]) -> dict[str, list[Fold]]:
    """Every held-out split of the evaluation (`sizes`, `batches` empty when the points have one setting)."""
    return {
        "loco": by_group(points, lambda p: p.cnn),
        "lofo": by_group(points, lambda p: p.family),
        **setting_folds(points, lambda p: p.cnn),
    }


def inner_folds(points: list[Point]) -> tuple[list[Fold], list[Fold]]:
    """(seen, unseen) folds inside a training set: CNN groups left out, alone or with a setting."""
    cnns = sorted({p.cnn for p in points})
    group = {c: str(i % INNER_GROUPS) for i, c in enumerate(cnns)}
    key: Callable[[Point], str] = lambda p: group[p.cnn]  # noqa: E731
    unseen = setting_folds(points, key, every_size=False)
    return by_group(points, key), unseen["sizes"] + unseen["batches"]


def log_errors(folds: list[Fold], fit: ParamsFit) -> list[float]:
    """log(measured ÷ predicted median) of every test point, each predicted by its fold's fit."""
    out: list[float] = []
    for fold in folds:
        if not fold.train or not fold.test:
            continue
        model = models.load(fit(fold.train))
        medians = models.medians_ms(model, [(p.x, p.conv_ms) for p in fold.test])
        out += [math.log(p.step_ms / m) for p, m in zip(fold.test, medians, strict=True)]
    return out


def conformal(errors: list[float], coverage: float = COVERAGE) -> tuple[float, float]:
    """Split-conformal bounds: the ranks of n held-out errors that cover `coverage` of a new one."""
    r = sorted(errors)
    n = len(r)
    if not n:
        return 0.0, 0.0
    tail = (1 - coverage) / 2
    # The 1e-9 keeps (n + 1) × tail an exact rank where floating point falls just short of it.
    low = max(math.floor((n + 1) * tail + 1e-9), 1)
    high = min(math.ceil((n + 1) * (1 - tail) - 1e-9), n)
    return r[low - 1], r[high - 1]


def _ape(log_error: float) -> float:
    return abs(math.exp(-log_error) - 1) * 100


@dataclass
class Choice:
    """The candidate with the lowest inner error, with its out-of-fold errors."""

    name: str
    inner_mape: dict[str, float | None] = field(default_factory=dict)
    seen: list[float] = field(default_factory=list)
    unseen: list[float] = field(default_factory=list)


def choose(points: list[Point], candidates: dict[str, ParamsFit]) -> Choice:
    """Pick a candidate by its mean error over the inner folds of these points (and only these)."""
    seen_folds, unseen_folds = inner_folds(points)
    best: Choice | None = None
    best_score = math.inf
    scores: dict[str, float | None] = {}
    for name, fit in candidates.items():
        seen, unseen = log_errors(seen_folds, fit), log_errors(unseen_folds, fit)
        every = seen + unseen
        error = scores[name] = statistics.fmean(map(_ape, every)) if every else None
        if error is not None and error < best_score - TIE_PCT:  # the earlier (simpler) one wins a tie
            best, best_score = Choice(name, seen=seen, unseen=unseen), error
    best = best or Choice(next(iter(candidates)))  # one CNN: nothing to compare on
    best.inner_mape = scores
    return best


def fit_model(points: list[Point], candidates: dict[str, ParamsFit] | None = None) -> dict[str, Any]:
    """The stored form of the chosen model, fitted on all points, with its out-of-fold interval."""
    candidates = candidates or CANDIDATES
    choice = choose(points, candidates)
    unseen = choice.unseen if len(choice.unseen) >= MIN_UNSEEN else choice.seen + choice.unseen
    batches = [batch_of(p) for p in points]
    interval = models.Interval(
        seen=conformal(choice.seen or unseen), unseen=conformal(unseen),
        image_sizes=tuple(sorted({image_of(p) for p in points})), batch_range=(min(batches), max(batches)),
    )  # fmt: skip
    return {
        **candidates[choice.name](points),
        "choice": choice.name,
        "interval": interval.to_params(),
        "selection": {"inner_mape": choice.inner_mape, "seen_errors": len(choice.seen),
                      "unseen_errors": len(choice.unseen)},
    }  # fmt: skip


def selected(candidates: dict[str, ParamsFit] | None = None) -> Fit:
    """The stored model's whole procedure (choice on inner folds, interval) as a fit for held-out scoring."""

    def fit(train: list[Point]) -> Scorer:
        params = fit_model(train, candidates)
        model = models.load(params)
        return params["choice"], lambda pts: models.predict_many(model, [(p.x, p.conv_ms) for p in pts])

    return fit


def point_fit(name: str, fit: Callable[[list[Point]], models.Predictor]) -> Fit:
    """A fit without an interval (a baseline) as a Fit."""

    def scorer(train: list[Point]) -> Scorer:
        predict = fit(train)
        return name, lambda pts: [(math.nan, predict(p), math.nan) for p in pts]

    return scorer


def score(folds: list[Fold], fit: Fit) -> dict[str, Any]:
    """Each fold's test points predicted by a fit on its train points: errors and interval coverage."""
    groups: dict[str, Any] = {}
    apes: list[float] = []
    inside: list[bool] = []
    for fold in folds:
        if not fold.train or not fold.test:
            continue
        label, predict = fit(fold.train)
        triples = predict(fold.test)
        measured = [p.step_ms for p in fold.test]
        a = [abs(mid - m) / m * 100 for (_, mid, _), m in zip(triples, measured, strict=True)]
        hits = [lo <= m <= hi for (lo, _, hi), m in zip(triples, measured, strict=True)]
        has_interval = all(math.isfinite(lo) for lo, _, _ in triples)
        groups[fold.name] = {
            "mape": statistics.fmean(a), "median_ape": statistics.median(a), "max_ape": max(a), "rows": len(a),
            "held_out_ids": [p.id for p in fold.test], "trained_on": len(fold.train), "chosen": label,
            "measured_ms": measured, "predicted_ms": [t[1] for t in triples],
            "inside": sum(hits) if has_interval else None,
        }  # fmt: skip
        apes += a
        inside += hits if has_interval else []
    return {
        "mape": statistics.fmean(apes) if apes else None,
        "median_ape": statistics.median(apes) if apes else None,
        "max_ape": max(apes) if apes else None,
        "coverage": sum(inside) / len(inside) if inside else None,
        "points": len(apes),
        "groups": groups,
    }


BASELINES: dict[str, Callable[[list[Point]], models.Predictor]] = {
    "lightgbm": models.lgbm_predictor,  # always LightGBM, no choice: what the choice is measured against
    "base_only": models.base_predictor,
    "conv_scale": lambda pts: models.fit_scale(pts, lambda p: p.conv_ms),
    "flops_scale": lambda pts: models.fit_scale(pts, lambda p: p.flops),
}


def evaluate(points: list[Point]) -> dict[str, Any]:
    """The stored model's procedure ("model") and every baseline on every held-out split of the points."""
    fits: dict[str, Fit] = {"model": selected(), **{n: point_fit(n, f) for n, f in BASELINES.items()}}
    out: dict[str, Any] = {
        "rows": len(points), "cnns": len({p.cnn for p in points}),
        "image_sizes": sorted({image_of(p) for p in points}), "batch_sizes": sorted({batch_of(p) for p in points}),
        "batch_cut": batch_cut(points), "coverage_goal": COVERAGE, "candidates": list(CANDIDATES),
    }  # fmt: skip
    for split, folds in splits(points).items():
        out[split] = {name: score(folds, fit) for name, fit in fits.items()} if folds else None
    return out
