"""Honest evaluation of whole-step models, the choice between them, and their P10–P90 interval.

Held-out splits (a point is only ever scored by a model fitted without any point of its fold):
- loco: leave one CNN out; lofo: leave one family out;
- sizes: leave one CNN *and* one image size out: the fit holds neither that CNN nor any step at that size;
- batches: leave one CNN out and fit only on the lower half of the batch sizes; score its larger ones.
The model a machine type stores is chosen among CANDIDATES by their errors on inner folds of its own
training points (CNNs left out, and CNNs with a setting left out), never on what is scored. The same
out-of-fold errors give its interval (split-conformal quantiles of log(measured ÷ predicted)), so the
interval says how wrong the model was on CNNs and settings it had not seen, not how spread its training
points were (LightGBM's quantile models, fitted on those, were far too narrow). Errors grow the further a
point's batch size lies outside the fitted ones: the unseen bounds are scaled by (1 + scale × doublings
outside), the scale learnt on inner folds that fit smaller batch sizes and predict larger ones (bounds
calibrated on the errors inside the fitted batch sizes must cover those outside).
"""

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prediction import features, step_model
from prediction.step_model import Point

COVERAGE = 0.8  # P10–P90
# CNN groups of the inner folds: leave-one-CNN-out up to this many CNNs. Two CNNs in one group can be every CNN
# that shows a cost (the default calibration's alexnet and vgg11, sorted first and last of seven, alone have large
# matmuls): that fold cannot learn the cost, misses them 3x, and its errors widen every stored interval. Larger
# sets share groups, each fit costing about linearly in them.
INNER_GROUPS = 12
TIE_PCT = 0.01  # a later (more complex) candidate must beat the inner MAPE by this many points to be chosen
MIN_UNSEEN = 5  # fewer out-of-setting residuals than this: the unseen bounds use the others too
SCALES = tuple(i * 0.05 for i in range(81))  # widening per doubling outside the fitted batch sizes, tried in order
_BATCH = features.NAMES.index("batch_size")
_IMAGE = features.NAMES.index("image_size")

ParamsFit = Callable[[list[Point]], dict[str, Any]]
Triple = tuple[float, float, float]
Scorer = tuple[str, Callable[[list[Point]], list[Triple]]]  # (what predicts, P10/median/P90 of points)
Fit = Callable[[list[Point]], Scorer]


def _base_only(points: list[Point]) -> dict[str, Any]:
    return {"base": step_model.fit_base(points), "boosters": {}}


def _base_shrunk(points: list[Point]) -> dict[str, Any]:
    coef, strength = step_model.fit_shrunk(points)
    return {"base": coef, "boosters": {}, "shrink": strength}


# What a stored model may be: the base alone, the base pulled toward the plain sum of the measured parts (by a
# strength chosen inside its own training points), the host's dispatch and the device's kernels overlapped (a GPU
# queues ahead: prediction/overlap.py), or LightGBM on the base's ratio, each when it earns its place on the inner
# folds (the simpler one first: it wins a tie).
CANDIDATES: dict[str, ParamsFit] = {
    "base_only": _base_only,
    "base_shrunk": _base_shrunk,
    "overlap": step_model.fit_overlap,
    "lightgbm": step_model.fit_lgbm,
}


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


def cut_folds(points: list[Point], key: Callable[[Point], str]) -> list[Fold]:
    """Folds leaving a group out and fitting only batch sizes up to each cut but `batch_cut`'s (which
    setting_folds holds): its larger batch sizes lie 1, 2, … doublings outside what the fit saw."""
    sizes = sorted({batch_of(p) for p in points})
    skip = batch_cut(points)
    folds = [
        Fold(f"{g} @ batch > {cut}", [p for p in points if key(p) != g and batch_of(p) <= cut],
             [p for p in points if key(p) == g and batch_of(p) > cut])
        for cut in sizes[:-1] if cut != skip for g in sorted({key(p) for p in points})
    ]  # fmt: skip
    # A fit of one batch size cannot tell per-sample costs from fixed ones: no model is stored from one.
    return [f for f in folds if f.test and len({batch_of(p) for p in f.train}) > 1]


def splits(points: list[Point]) -> dict[str, list[Fold]]:
    """Every held-out split of the evaluation (`sizes`, `batches` empty when the points have one setting)."""
    return {
        "loco": by_group(points, lambda p: p.cnn),
        "lofo": by_group(points, lambda p: p.family),
        **setting_folds(points, lambda p: p.cnn),
    }


def _inner_key(points: list[Point]) -> Callable[[Point], str]:
    cnns = sorted({p.cnn for p in points})
    group = {c: str(i % INNER_GROUPS) for i, c in enumerate(cnns)}
    return lambda p: group[p.cnn]


def inner_folds(points: list[Point]) -> tuple[list[Fold], list[Fold]]:
    """(seen, unseen) folds inside a training set: CNN groups left out, alone or with a setting."""
    key = _inner_key(points)
    unseen = setting_folds(points, key, every_size=False)
    return by_group(points, key), unseen["sizes"] + unseen["batches"]


def errors_and_distances(folds: list[Fold], fit: ParamsFit) -> tuple[list[float], list[float]]:
    """log(measured ÷ predicted median) of every test point, each predicted by its fold's fit, and how far
    its batch size lies outside that fit's (step_model.batch_distance)."""
    errors: list[float] = []
    distances: list[float] = []
    for fold in folds:
        if not fold.train or not fold.test:
            continue
        model = step_model.load(fit(fold.train))
        medians = step_model.medians_ms(model, [(p.x, p.conv_ms) for p in fold.test])
        errors += [math.log(p.step_ms / m) for p, m in zip(fold.test, medians, strict=True)]
        batches = [batch_of(p) for p in fold.train]
        distances += [step_model.batch_distance(p.x, (min(batches), max(batches))) for p in fold.test]
    return errors, distances


def log_errors(folds: list[Fold], fit: ParamsFit) -> list[float]:
    """log(measured ÷ predicted median) of every test point, each predicted by its fold's fit."""
    return errors_and_distances(folds, fit)[0]


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


def widening(errors: list[float], distances: list[float], coverage: float = COVERAGE) -> float:
    """The scale of the unseen bounds per doubling outside: the smallest of SCALES with which bounds calibrated
    on the errors at the median distance or nearer (inside the fitted batch sizes, when most are) cover
    `coverage` of the farther ones (else the one covering most).

    The bounds are chosen for reaching past the errors that calibrated them, as the stored interval must:
    a fit on all batch sizes predicts larger ones than its inner folds did."""
    cut = statistics.median(distances) if distances else 0.0
    near = [(e, d) for e, d in zip(errors, distances, strict=True) if d <= cut]
    far = [(e, d) for e, d in zip(errors, distances, strict=True) if d > cut]
    if not near or not far:
        return 0.0
    best, best_cover = 0.0, -1.0
    for k in SCALES:
        lo, hi = conformal([e / (1 + k * d) for e, d in near], coverage)
        cover = statistics.fmean(lo * (1 + k * d) <= e <= hi * (1 + k * d) for e, d in far)
        if cover >= coverage:
            return k
        if cover > best_cover:
            best, best_cover = k, cover
    return best


def _ape(log_error: float) -> float:
    return abs(math.exp(-log_error) - 1) * 100


@dataclass
class Choice:
    """The candidate with the lowest inner error, with its out-of-fold errors."""

    name: str
    inner_mape: dict[str, float | None] = field(default_factory=dict)
    seen: list[float] = field(default_factory=list)
    unseen: list[float] = field(default_factory=list)
    distances: list[float] = field(default_factory=list)  # of the unseen errors


def choose(points: list[Point], candidates: dict[str, ParamsFit]) -> Choice:
    """Pick a candidate by its mean error over the inner folds of these points (and only these)."""
    seen_folds, unseen_folds = inner_folds(points)
    best: Choice | None = None
    best_score = math.inf
    scores: dict[str, float | None] = {}
    for name, fit in candidates.items():
        seen, (unseen, distances) = log_errors(seen_folds, fit), errors_and_distances(unseen_folds, fit)
        every = seen + unseen
        error = scores[name] = statistics.fmean(map(_ape, every)) if every else None
        if error is not None and error < best_score - TIE_PCT:  # the earlier (simpler) one wins a tie
            best, best_score = Choice(name, seen=seen, unseen=unseen, distances=distances), error
    if best is None:  # one CNN: nothing to compare on
        return Choice(next(iter(candidates)), inner_mape=scores)
    best.inner_mape = scores
    # The chosen one alone is also fitted at every other batch cut: errors 1, 2, … doublings out.
    more, far = errors_and_distances(cut_folds(points, _inner_key(points)), candidates[best.name])
    best.unseen += more
    best.distances += far
    return best


def fit_model(points: list[Point], candidates: dict[str, ParamsFit] | None = None) -> dict[str, Any]:
    """The stored form of the chosen model, fitted on all points, with its out-of-fold interval."""
    candidates = candidates or CANDIDATES
    choice = choose(points, candidates)
    unseen, distances = choice.unseen, choice.distances
    if len(unseen) < MIN_UNSEEN:
        unseen, distances = choice.seen + unseen, [0.0] * len(choice.seen) + distances
    # Learnt from in-setting errors (distance 0: the seen ones too) out to the farthest extrapolated ones.
    scale = widening(choice.seen + unseen, [0.0] * len(choice.seen) + distances)
    batches = [batch_of(p) for p in points]
    interval = step_model.Interval(
        seen=conformal(choice.seen or unseen),
        unseen=conformal([e / (1 + scale * d) for e, d in zip(unseen, distances, strict=True)]),
        image_sizes=tuple(sorted({image_of(p) for p in points})), batch_range=(min(batches), max(batches)),
        scale=scale,
    )  # fmt: skip
    return {
        **candidates[choice.name](points),
        "choice": choice.name,
        "interval": interval.to_params(),
        "selection": {"inner_mape": choice.inner_mape, "seen_errors": len(choice.seen),
                      "unseen_errors": len(choice.unseen), "widening": scale},
    }  # fmt: skip


def selected(candidates: dict[str, ParamsFit] | None = None) -> Fit:
    """The stored model's whole procedure (choice on inner folds, interval) as a fit for held-out scoring."""

    def fit(train: list[Point]) -> Scorer:
        params = fit_model(train, candidates)
        model = step_model.load(params)
        return params["choice"], lambda pts: step_model.predict_many(model, [(p.x, p.conv_ms) for p in pts])

    return fit


def point_fit(name: str, fit: Callable[[list[Point]], step_model.Predictor]) -> Fit:
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


BASELINES: dict[str, Callable[[list[Point]], step_model.Predictor]] = {
    "lightgbm": step_model.lgbm_predictor,  # always LightGBM, no choice: what the choice is measured against
    "base_only": step_model.base_predictor,
    "base_shrunk": step_model.shrunk_predictor,
    "conv_scale": lambda pts: step_model.fit_scale(pts, lambda p: p.conv_ms),
    "flops_scale": lambda pts: step_model.fit_scale(pts, lambda p: p.flops),
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
