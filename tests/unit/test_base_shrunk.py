"""The base pulled toward the plain sum of the measured parts: its strength chosen inside the training points."""

import math
import random
import statistics

import pytest

from prediction import features, step_model, validation

AT = {n: i for i, n in enumerate(features.NAMES)}
GRID = ((64, (8, 32)), (112, (4, 16)), (160, (2,)))


def measured_cnns(cnns: int, *, seed: int, prefix: str, effect_sigma: float = 0.12) -> list[step_model.Point]:
    """CNNs whose steps are their measured conv, other ops and optimizer added up, times an effect of each CNN's
    own that no term explains (lognormal), with point noise: the plain sum is right on average, no fit can be."""
    rng = random.Random(seed)
    points: list[step_model.Point] = []
    for c in range(cnns):
        conv_per, other_per, optimizer = 0.2 + rng.random(), 0.05 + 0.6 * rng.random(), 2 + 20 * rng.random()
        effect = rng.gauss(0, effect_sigma)
        for size, batches in GRID:
            for batch in batches:
                work = batch * size * size / 1e3
                x = [0.0] * len(features.NAMES)
                x[AT["batch_size"]], x[AT["image_size"]] = batch, size
                x[AT["ops_measured"]] = x[AT["optimizer_measured"]] = 1.0
                x[AT["other_ms"]], x[AT["optimizer_ms"]] = other_per * work, optimizer
                conv = conv_per * work
                step = (conv + x[AT["other_ms"]] + optimizer) * math.exp(effect + rng.gauss(0, 0.02))
                points.append(step_model.Point(len(points), f"{prefix}{c}", f"f{c}", x, conv, conv, step))
    return points


def mape(coef: list[float], points: list[step_model.Point]) -> float:
    """Mean absolute percentage error of a base's coefficients on points."""
    return statistics.fmean(abs(step_model.base_ms(coef, p.x, p.conv_ms) / p.step_ms - 1) * 100 for p in points)


def test_on_few_cnns_the_shrunk_base_is_chosen_and_predicts_new_cnns_better() -> None:
    """Seven CNNs let NNLS explain each CNN's own effect by trading parts; a pull toward the plain sum (the shrunk
    base, its strength chosen by leaving each training CNN out, or the overlap's) wins on the inner folds, and the
    shrunk base on CNNs it never saw."""
    wins, gains = 0, []
    for seed in range(6):
        train = measured_cnns(7, seed=seed, prefix="train")
        new = measured_cnns(30, seed=100 + seed, prefix="new")
        strength = step_model.shrink_strength(train)
        assert strength in step_model.SHRINK_STRENGTHS and strength > 0
        shrunk = step_model.fit_base_shrunk(train, strength)
        gains.append(mape(step_model.fit_base(train), new) - mape(shrunk, new))
        params = validation.fit_model(train)
        # The overlap of host and device pulls the measured parts toward their plain sum too (prediction/overlap.py).
        pulled = params["choice"] in ("base_shrunk", "overlap")
        wins += pulled
        inner = params["selection"]["inner_mape"]
        assert not pulled or inner[params["choice"]] < inner["base_only"]
    # The inner folds are seven CNNs too: the choice is noisy, but a pull is worth choosing about as often as not.
    assert wins >= 3 and statistics.fmean(gains) > 0.5 and sum(g > 0 for g in gains) >= 5, (wins, gains)


def test_exact_steps_of_other_costs_keep_the_plain_fit() -> None:
    """Steps exactly 2 × conv + 3 ms per million parameters: the prior is wrong and the data exact, so no pull
    is chosen and the stored model is the base alone (a tie goes to the simpler one)."""
    rng = random.Random(3)
    points = []
    for i in range(40):
        conv, mparams = 5 + 100 * rng.random(), 60 * rng.random()
        x = [0.0] * len(features.NAMES)
        x[AT["mparameters"]], x[AT["batch_size"]], x[AT["image_size"]] = mparams, 2 ** (i % 5), 64
        points.append(step_model.Point(i, f"cnn{i % 8}", "fam", x, conv, conv, 2 * conv + 3 * mparams))
    assert step_model.shrink_strength(points) == 0.0
    assert step_model.fit_base_shrunk(points, 0.0) == pytest.approx(step_model.fit_base(points), abs=1e-9)
    assert validation.fit_model(points)["choice"] == "base_only"


def test_a_strong_pull_gives_the_plain_sum_of_the_measured_parts() -> None:
    """At the strongest pull the measured parts count once each and the unmeasured terms nothing."""
    points = measured_cnns(3, seed=9, prefix="c", effect_sigma=0.3)
    coef = dict(zip(step_model.BASE_TERMS, step_model.fit_base_shrunk(points, 1e9), strict=True))
    assert coef["conv_ms"] == pytest.approx(1, abs=0.01) and coef["other_ms"] == pytest.approx(1, abs=0.01)
    assert coef["optimizer_ms"] == pytest.approx(1, abs=0.01) and coef["constant"] == pytest.approx(0, abs=0.01)
