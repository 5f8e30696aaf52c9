"""Held-out evaluation never leaks, model choice stays inside the training folds, the interval covers ~80%."""

import math
import random
import statistics
from dataclasses import replace

import lightgbm as lgb
import numpy as np
import pytest

from prediction import features, step_model, validation

AT = {n: i for i, n in enumerate(features.NAMES)}
GRID = ((64, (8, 32)), (112, (2, 4, 16)), (160, (2, 8)))


def synthetic(cnns: int, *, seed: int, cnn_sigma: float = 0.08, point_sigma: float = 0.04) -> list[step_model.Point]:
    """Steps = 2 × conv + 3 ms per million parameters, times a lognormal CNN effect and point noise (known)."""
    rng = random.Random(seed)
    points: list[step_model.Point] = []
    for c in range(cnns):
        mparams, speed, effect = 60 * rng.random(), 0.5 + rng.random(), rng.gauss(0, cnn_sigma)
        for size, batches in GRID:
            for batch in batches:
                x = [0.0] * len(features.NAMES)
                x[AT["batch_size"]], x[AT["image_size"]], x[AT["mparameters"]] = batch, size, mparams
                conv = speed * batch * size * size / 1e3
                step = (2 * conv + 3 * mparams) * math.exp(effect + rng.gauss(0, point_sigma))
                points.append(step_model.Point(len(points), f"c{seed}-{c}", f"f{c % 3}", x, conv, conv, step))
    return points


def test_no_fold_leaks_into_any_fit_that_scores_it_inner_folds_included() -> None:
    """Every fit behind a fold's score (inner validation fits and the final one) holds none of its points,
    and, for the setting splits, no point at the held-out image size or above the batch cut."""
    points = synthetic(5, seed=1)
    calls: list[frozenset[int]] = []

    def recording(fit: validation.ParamsFit) -> validation.ParamsFit:
        def fit_and_record(train: list[step_model.Point]) -> dict:  # type: ignore[type-arg]
            calls.append(frozenset(p.id for p in train))
            return fit(train)

        return fit_and_record

    nested = validation.selected({n: recording(f) for n, f in validation.CANDIDATES.items()})
    per_fold: list[list[frozenset[int]]] = []

    def outer(train: list[step_model.Point]) -> validation.Scorer:
        start = len(calls)
        scorer = nested(train)
        per_fold.append(calls[start:])
        return scorer

    by_id = {p.id: p for p in points}
    cut = validation.batch_cut(points)
    assert cut == 8  # batch sizes 2, 4, 8 | 16, 32
    splits = validation.splits(points)
    assert {k: len(v) for k, v in splits.items()} == {"loco": 5, "lofo": 3, "sizes": 15, "batches": 5}
    for split, folds in splits.items():
        per_fold.clear()
        result = validation.score(folds, outer)
        assert len(per_fold) == len(result["groups"]) == len(folds)
        for fold, fits in zip(folds, per_fold, strict=True):
            held = {p.id for p in fold.test}
            assert set(result["groups"][fold.name]["held_out_ids"]) == held
            assert len(fits) > 2 * len(validation.CANDIDATES)  # inner folds of every candidate, then the final fit
            assert fits[-1] == {p.id for p in fold.train}
            for ids in fits:
                assert not ids & held
                assert {by_id[i].cnn for i in ids}.isdisjoint({p.cnn for p in fold.test})
                if split == "sizes":
                    assert {validation.image_of(by_id[i]) for i in ids}.isdisjoint({validation.image_of(fold.test[0])})
                if split == "batches":
                    assert (
                        max(validation.batch_of(by_id[i]) for i in ids)
                        <= cut
                        < min(map(validation.batch_of, fold.test))
                    )
            if split == "lofo":
                families = {by_id[i].family for ids in fits for i in ids}
                assert fold.name not in families


def test_model_choice_is_made_on_inner_folds_and_stored() -> None:
    """Steps linear in the base's terms plus noise: the base alone wins on the inner folds; a ratio that
    depends on the batch size: LightGBM wins. The choice and its inner errors are stored."""
    points = synthetic(8, seed=2, cnn_sigma=0.0, point_sigma=0.03)
    params = validation.fit_model(points)
    assert params["choice"] == "base_only" and params["boosters"] == {}
    inner = params["selection"]["inner_mape"]
    assert inner["base_only"] < inner["lightgbm"]
    low, mid, high = step_model.predict(step_model.load(params), points[0].x, points[0].conv_ms)
    assert low < mid == step_model.base_ms(params["base"], points[0].x, points[0].conv_ms) < high

    exact = validation.fit_model(synthetic(6, seed=2, cnn_sigma=0.0, point_sigma=0.0))
    assert exact["choice"] == "base_only" and exact["selection"]["inner_mape"]["base_only"] < 1e-9  # a tie or better

    bent = [
        step_model.Point(p.id, p.cnn, p.family, p.x, p.conv_ms, p.flops, p.step_ms * (1 + 8 / validation.batch_of(p)))
        for p in points
    ]
    params = validation.fit_model(bent)
    assert params["choice"] == "lightgbm" and set(params["boosters"]) == {"p50"}
    assert params["selection"]["inner_mape"]["lightgbm"] < params["selection"]["inner_mape"]["base_only"]


def _quantile_booster(points: list[step_model.Point], alpha: float) -> lgb.Booster:
    """A raw LightGBM quantile model of log(step ÷ base), as the predictor used to give its interval."""
    coef = step_model.fit_base(points)
    x = np.array([[*p.x, step_model.base_ms(coef, p.x, p.conv_ms)] for p in points])
    y = np.array([math.log(p.step_ms / step_model.base_ms(coef, p.x, p.conv_ms)) for p in points])
    return lgb.train(
        {**step_model.booster_params(len(points)), "objective": "quantile", "alpha": alpha}, lgb.Dataset(x, y), 300
    )


def test_interval_from_out_of_fold_errors_covers_80_percent_of_unseen_cnns_raw_quantiles_do_not() -> None:
    """With a known CNN effect and point noise, ~80% of new CNNs' steps fall in P10-P90; quantile models miss."""
    train, unseen = synthetic(30, seed=3), synthetic(150, seed=4)
    model = step_model.load(validation.fit_model(train))
    triples = step_model.predict_many(model, [(p.x, p.conv_ms) for p in unseen])
    coverage = sum(lo <= p.step_ms <= hi for (lo, _, hi), p in zip(triples, unseen, strict=True)) / len(unseen)
    assert 0.72 <= coverage <= 0.88, coverage
    # The true P10-P90 of the log error is ±1.28 σ with σ² = 0.08² + 0.04²: the stored bounds are near it.
    lo, hi = model.interval.seen
    assert 0.7 < (hi - lo) / (2 * 1.2816 * math.hypot(0.08, 0.04)) < 1.4

    coef = step_model.fit_base(train)
    p10, p90 = _quantile_booster(train, 0.1), _quantile_booster(train, 0.9)
    rows = np.array([[*p.x, step_model.base_ms(coef, p.x, p.conv_ms)] for p in unseen])
    bases = rows[:, -1]
    low, high = bases * np.exp(p10.predict(rows)), bases * np.exp(p90.predict(rows))
    raw = float(np.mean([lo <= p.step_ms <= hi for lo, hi, p in zip(low, high, unseen, strict=True)]))
    assert raw < coverage - 0.15, (raw, coverage)


def test_unseen_settings_get_the_wider_bounds_widening_with_batch_doublings_outside() -> None:
    """A point at an image size the fit never measured, or a batch beyond its range, uses the unseen bounds,
    scaled by (1 + scale × doublings of batch size outside the fitted range)."""
    interval = step_model.Interval(
        seen=(-0.1, 0.1), unseen=(-0.3, 0.2), image_sizes=(64, 112), batch_range=(2, 16), scale=0.5
    )
    x = [0.0] * len(features.NAMES)
    x[AT["image_size"]], x[AT["batch_size"]] = 112, 8
    assert interval.bounds(x) == (-0.1, 0.1)
    x[AT["batch_size"]] = 64  # two doublings beyond 16
    assert interval.bounds(x) == (-0.6, 0.4)
    x[AT["batch_size"]] = 1  # one below 2
    assert interval.bounds(x) == pytest.approx((-0.45, 0.3))
    x[AT["image_size"]], x[AT["batch_size"]] = 96, 8
    assert interval.bounds(x) == (-0.3, 0.2)
    assert step_model.Interval.from_params(interval.to_params()) == interval
    stored_before = {k: v for k, v in interval.to_params().items() if k != "scale"}
    assert step_model.Interval.from_params(stored_before).scale == 0.0


def drifting(cnns: int, *, seed: int, drift: float = 0.1) -> list[step_model.Point]:
    """Steps as in `synthetic` (2 image sizes × batch 2..32), times 2^(drift × log2 batch): a trend in batch size
    that a fit follows only over the batch sizes it saw, so its error grows by `drift` per doubling outside them."""
    rng = random.Random(seed)
    points: list[step_model.Point] = []
    for c in range(cnns):
        mparams, speed, effect = 60 * rng.random(), 0.5 + rng.random(), rng.gauss(0, 0.08)
        for size in (64, 112):
            for batch in (2, 4, 8, 16, 32):
                x = [0.0] * len(features.NAMES)
                x[AT["batch_size"]], x[AT["image_size"]], x[AT["mparameters"]] = batch, size, mparams
                conv = speed * batch * size * size / 1e3
                step = (2 * conv + 3 * mparams) * math.exp(drift * math.log2(batch) + effect + rng.gauss(0, 0.04))
                points.append(step_model.Point(len(points), f"c{seed}-{c}", f"f{c % 3}", x, conv, conv, step))
    return points


def test_interval_at_held_out_larger_batches_covers_about_80_percent_the_unwidened_one_does_not() -> None:
    """Fitted on batch sizes up to 8, new CNNs' steps at 16 and 32 (1 and 2 doublings out) fall in P10-P90
    about 80% of the time; the unwidened bounds (inner folds' errors as they are, the old interval) miss more."""
    new: list[float] = []
    old: list[float] = []

    def coverage(model: step_model.Fitted, points: list[step_model.Point]) -> float:
        triples = step_model.predict_many(model, [(p.x, p.conv_ms) for p in points])
        return statistics.fmean(lo <= p.step_ms <= hi for (lo, _, hi), p in zip(triples, points, strict=True))

    for seed in (1, 2, 4, 5):
        train = [p for p in drifting(30, seed=seed) if validation.batch_of(p) <= 8]
        held = [p for p in drifting(100, seed=seed + 100) if validation.batch_of(p) > 8]
        params = validation.fit_model(train)
        model = step_model.load(params)
        assert model.interval.batch_range == (2, 8) and params["selection"]["widening"] == model.interval.scale
        _, unseen_folds = validation.inner_folds(train)
        unwidened = validation.conformal(validation.log_errors(unseen_folds, validation.CANDIDATES[params["choice"]]))
        before = replace(model.interval, unseen=unwidened, scale=0.0)
        new.append(coverage(model, held))
        old.append(coverage(replace(model, interval=before), held))
    assert 0.72 <= statistics.fmean(new) <= 0.9, new
    assert statistics.fmean(old) < 0.7 and statistics.fmean(old) < statistics.fmean(new) - 0.1, (old, new)


def test_widening_is_learnt_from_errors_inside_the_fitted_range_out_to_those_beyond_it() -> None:
    """Errors whose spread grows by g per doubling outside: the scale found makes bounds calibrated inside
    cover ~80% of new errors 3 doublings out (farther than any it learnt from); no growth, no widening."""
    rng = random.Random(9)
    distances = [d for d in (0.0, 0.0, 0.0, 0.5, 1.0, 1.5, 2.0) for _ in range(60)]
    for growth in (0.0, 0.6):
        errors = [rng.gauss(0, 0.1 * (1 + growth * d)) for d in distances]
        scale = validation.widening(errors, distances)
        lo, hi = validation.conformal([e / (1 + scale * d) for e, d in zip(errors, distances, strict=True)])
        far = [rng.gauss(0, 0.1 * (1 + growth * 3)) for _ in range(2000)]
        covered = statistics.fmean(lo * (1 + 3 * scale) <= e <= hi * (1 + 3 * scale) for e in far)
        if growth:
            assert scale > 0.2 and 0.72 <= covered <= 0.9, (scale, covered)
        else:
            assert scale <= 0.1, scale
    assert validation.widening([0.1, -0.1], [1.0, 1.0]) == 0.0  # one distance: nothing to learn from


def test_conformal_ranks() -> None:
    """Of 19 errors, the 2nd smallest and the 18th are the 80% bounds ((n+1) × 10%, (n+1) × 90%)."""
    errors = [float(i) for i in range(19)]
    random.Random(0).shuffle(errors)
    assert validation.conformal(errors) == (1.0, 17.0)
    assert validation.conformal([]) == (0.0, 0.0)


def test_every_cnn_of_the_default_calibration_is_an_inner_fold_of_its_own() -> None:
    """Only alexnet and vgg11 show the matmuls' cost, and they sort first and last of the default 7 CNNs: inner
    folds that held both out at once could not learn that cost, missed them 3x, and stretched every stored interval.
    With a fold per CNN the inner errors and the interval stay near the points' own noise."""
    rng = random.Random(3)
    names = ("alexnet", "densenet121", "mobilenet_v2", "resnet18", "shufflenet_v2_x1_0", "squeezenet1_1", "vgg11")
    points: list[step_model.Point] = []
    for name in names:
        speed, linear = 0.5 + rng.random(), 40.0 if name in ("alexnet", "vgg11") else 0.0
        for size, batches in GRID:
            for batch in batches:
                x = [0.0] * len(features.NAMES)
                x[AT["batch_size"]], x[AT["image_size"]], x[AT["ops_measured"]] = batch, size, 1.0
                x[AT["linear_ms"]] = x[AT["other_ms"]] = linear * (1 + batch / 32)
                conv = speed * batch * size * size / 1e3
                step = (conv + 3 * x[AT["linear_ms"]]) * math.exp(rng.gauss(0, 0.02))
                points.append(step_model.Point(len(points), name, name, x, conv, conv, step))
    seen, _unseen = validation.inner_folds(points)
    assert sorted(cnn for fold in seen for cnn in {p.cnn for p in fold.test}) == sorted(names)
    assert all(len({p.cnn for p in fold.test}) == 1 for fold in seen)
    params = validation.fit_model(points)
    assert params["selection"]["inner_mape"][params["choice"]] < 5, params["selection"]
    interval = params["interval"]
    assert max(map(abs, (*interval["seen"], *interval["unseen"]))) < 0.15, interval
