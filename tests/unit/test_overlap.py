"""The GPU's form of the step (host and device overlapped): it recovers a known overlap and the choice finds it."""

import math
import random

import numpy as np

from prediction import features, overlap, step_model, validation

AT = {n: i for i, n in enumerate(features.NAMES)}
# The known truth: a floor of 0.03 ms per operation in each part timed alone, 0.05 ms of dispatch per operation.
FLOOR, PER_OP, CONSTANT = 0.03, 0.05, 1.0


def gpu_steps(cnns: int, *, seed: int) -> list[step_model.Point]:
    """Steps where the host sets small batches and the kernels large ones, with 2% noise."""
    rng = random.Random(seed)
    points: list[step_model.Point] = []
    for c in range(cnns):
        operations, speed = rng.randint(30, 500), 0.2 + rng.random()
        for batch in (8, 16, 32, 64, 128, 256):
            conv_kernels, other_kernels = speed * batch * 0.3, speed * batch * 0.2 * rng.uniform(0.8, 1.2)
            # Each part timed alone: its kernels plus its calls' floor (split between convs and other ops).
            conv_ms, other_ms = conv_kernels + FLOOR * operations / 2, other_kernels + FLOOR * operations / 2
            x = [0.0] * len(features.NAMES)
            x[AT["batch_size"]], x[AT["image_size"]] = batch, 224
            x[AT["other_ms"]], x[AT["ops_measured"]], x[AT["optimizer_measured"]] = other_ms, 1.0, 1.0
            x[AT["pointwise_convs"]], x[AT["conv_ms"]] = operations, conv_ms
            device, host = conv_kernels + other_kernels, PER_OP * operations + CONSTANT
            step = (device**overlap.Q + host**overlap.Q) ** (1 / overlap.Q) * math.exp(rng.gauss(0, 0.02))
            points.append(step_model.Point(len(points), f"c{c}", f"f{c % 3}", x, conv_ms, conv_ms, step))
    return points


def test_the_fit_recovers_a_known_overlap() -> None:
    """Floor, dispatch per operation and the parts' coefficients come back; predictions within the noise."""
    points = gpu_steps(8, seed=3)
    params = step_model.fit_overlap(points)
    fitted = params["overlap"]
    assert math.isclose(fitted["floor"], FLOOR, rel_tol=0.15)
    assert math.isclose(fitted["per_op"], PER_OP, rel_tol=0.15)
    assert all(math.isclose(c, 1.0, rel_tol=0.1) for c in fitted["device"][:2])
    model = step_model.load(params)
    predicted = step_model.medians_ms(model, [(p.x, p.conv_ms) for p in points])
    errors = [abs(m / p.step_ms - 1) for m, p in zip(predicted, points, strict=True)]
    assert max(errors) < 0.08 and float(np.mean(errors)) < 0.03


def test_an_additive_base_cannot_say_it_and_the_choice_takes_the_overlap() -> None:
    """On such steps the inner folds choose the overlap, and CNNs left out are far closer than with the base."""
    points = gpu_steps(8, seed=5)
    assert validation.fit_model(points)["choice"] == "overlap"
    ev = validation.evaluate(points)
    assert ev["loco"]["model"]["mape"] < 4 < ev["loco"]["base_only"]["mape"]


def test_a_table_of_points_predicts_as_one_point_at_a_time() -> None:
    """predict_table (the worker's vectorised path) gives each point exactly what predict gives it alone."""
    points = gpu_steps(4, seed=7)
    model = step_model.load({**step_model.fit_overlap(points), "interval": None})
    table = np.zeros(len(points), dtype=features.DTYPE)
    for row, p in zip(table, points, strict=True):
        for name in features.NAMES:
            row[name] = p.x[AT[name]]
        row["conv_ms"] = p.conv_ms
    one_by_one = [step_model.predict(model, p.x, p.conv_ms) for p in points]
    assert step_model.predict_table(model, table) == one_by_one  # to the last bit, as the worker's assembly needs
