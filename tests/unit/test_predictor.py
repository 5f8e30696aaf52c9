"""The predictor's models on synthetic points: the base terms, LightGBM's ratio, a model of an older kind refused."""

import random
from typing import cast

import pytest

from prediction import features, step_model, validation
from shared.core.errors import InvalidRequest
from worker import predictor
from worker.predictor import PredictorModel


def test_base_finds_the_per_parameter_cost_a_conv_scale_cannot() -> None:
    """Steps = 2 × conv + 3 ms per million parameters: the base recovers both; conv × k cannot."""
    rng = random.Random(3)
    points = []
    at = features.NAMES.index("mparameters")
    for i in range(40):
        conv, mparams = 5 + 100 * rng.random(), 60 * rng.random()
        x = [0.0] * len(features.NAMES)
        x[at] = mparams
        points.append(step_model.Point(i, f"cnn{i % 8}", "fam", x, conv, conv, 2 * conv + 3 * mparams))
    coef = dict(zip(step_model.BASE_TERMS, step_model.fit_base(points), strict=True))
    assert coef["conv_ms"] == pytest.approx(2, rel=1e-6) and coef["mparameters"] == pytest.approx(3, rel=1e-6)
    ev = validation.evaluate(points)
    assert ev["loco"]["base_only"]["mape"] < 1e-6 < ev["loco"]["conv_scale"]["mape"]


def test_an_older_kind_of_model_is_not_used() -> None:
    """A stored model of another kind gives a clear error (assembly then reports no number), not a wrong one."""
    # Only the fields predict_ms reads before it refuses the kind; the rest of a row plays no part.
    model = cast(
        PredictorModel, {"id": -1, "version": 7, "kind": "lightgbm_ratio", "params": {"features": list(features.NAMES)}}
    )
    with pytest.raises(InvalidRequest, match="older kind; retrain"):
        predictor.predict_ms(model, [0.0] * len(features.NAMES), 1.0)


def test_lightgbm_learns_a_ratio_the_scale_cannot() -> None:
    """Where step/conv depends on a feature, LightGBM beats the single scale on held-out CNNs."""
    rng = random.Random(5)
    points = []
    for i in range(60):
        bs = rng.choice([2, 4, 8, 16, 32])
        conv = 10.0 * bs * (1 + rng.random())
        x = [float(bs)] + [0.0] * (len(features.NAMES) - 1)
        points.append(step_model.Point(i, f"cnn{i % 10}", "fam", x, conv, conv, conv * (1 + 8 / bs)))
    ev = validation.evaluate(points)
    assert ev["loco"]["lightgbm"]["mape"] < ev["loco"]["conv_scale"]["mape"] / 2
    assert ev["loco"]["model"]["mape"] < ev["loco"]["conv_scale"]["mape"] / 2
