"""A result's points (prediction/points.py): times, cost and energy of a point, the best batch sizes among several."""

import math
from typing import Any, cast

import numpy as np
import pytest

from prediction import points as made
from shared.jobs.point import PointDict
from shared.jobs.request import JobRequest
from shared.machine_types import MachineTypeInfo


def approx6(expected: float) -> Any:
    """Equal within the rounding to 6 significant digits (prediction/points.py SIGNIFICANT_DIGITS)."""
    return pytest.approx(expected, rel=1e-5)


# Machine types with only the figures fill reads; the rest of a machine_types row plays no part here.
G5 = cast(MachineTypeInfo, {"price_usd_per_hour": 1.006, "gpu_count": 1, "gpu_tdp_watts": 300})
FOUR_GPUS = cast(MachineTypeInfo, {"price_usd_per_hour": 5.672, "gpu_count": 4, "gpu_tdp_watts": 300})
LOCAL = cast(MachineTypeInfo, {"price_usd_per_hour": 0.0, "gpu_count": 0, "gpu_tdp_watts": None})


def point(bs: int, total: float | None, cost: float | None, fits: bool | None = True) -> PointDict:
    """A point as best_of sees it."""
    return {"batch_size": bs, "total_seconds": total, "cost_usd": cost, "fits_in_memory": fits, "source": "x"}


def test_times_cost_and_energy_use_ceil_iterations_price_and_board_power() -> None:
    """Epochs take ceil(dataset/batch) iterations; cost is price × time; energy board power × GPUs × time."""
    request = JobRequest(cnns=["resnet18"], machines=["g5.xlarge"], batch_sizes=[8], epochs=3, dataset_size=100)
    p: PointDict = {"batch_size": 8}
    made.fill(p, (40.0, 50.0, 70.0), G5, request)
    iterations = math.ceil(100 / 8) * 3  # 13 per epoch, not 12.5
    assert p["iteration_seconds"] == approx6(0.05) and p["iteration_seconds_p10"] == approx6(0.04)
    assert p["total_seconds"] == approx6(0.05 * iterations) and iterations == 39
    assert p["total_seconds_p90"] == approx6(0.07 * iterations)
    assert p["total_seconds"] is not None
    assert p["epoch_seconds"] == approx6(p["total_seconds"] / 3)
    assert p["cost_usd"] == approx6(1.006 * 0.05 * iterations / 3600)
    assert p["energy_kwh"] == approx6(300 * 0.05 * iterations / 3.6e6)
    assert p["cost_usd"] is not None
    assert p["cost_per_gpu_usd"] == approx6(p["cost_usd"])


def test_spot_cost_beside_on_demand_where_the_catalog_has_a_spot_price() -> None:
    """The same run at the spot price, for every node; no spot price, no figure; a point out of memory has neither."""
    request = JobRequest(cnns=["resnet18"], machines=["g5.xlarge"], batch_sizes=[8], epochs=3, dataset_size=100)
    spotted: PointDict = {"batch_size": 8}
    plain: PointDict = {"batch_size": 8}
    two: PointDict = {"batch_size": 8, "nodes": 2}
    made.fill(spotted, (40.0, 50.0, 70.0), G5 | {"spot_price_usd_per_hour": 0.40}, request)
    made.fill(plain, (40.0, 50.0, 70.0), G5, request)
    made.fill(two, (40.0, 50.0, 70.0), G5 | {"spot_price_usd_per_hour": 0.40}, request)
    assert spotted["total_seconds"] is not None and two["total_seconds"] is not None
    assert spotted["spot_cost_usd"] == approx6(0.40 * spotted["total_seconds"] / 3600)
    assert spotted["cost_usd"] == approx6(1.006 * spotted["total_seconds"] / 3600)
    assert "spot_cost_usd" not in plain
    assert two["spot_cost_usd"] == approx6(2 * 0.40 * two["total_seconds"] / 3600)
    unfit: PointDict = {**spotted, "fits_in_memory": False}
    made.withhold_unfit([unfit])
    assert unfit["spot_cost_usd"] is None and unfit["cost_usd"] is None and unfit["total_seconds"] is None


def test_a_machine_with_several_gpus_shares_its_cost_and_one_without_has_no_energy() -> None:
    """Four GPUs: the cost per GPU is a quarter, energy counts the boards that train (all four, or the one of a
    one-GPU point); a CPU has no energy figure. Two nodes: twice the price, global batch of both."""
    request = JobRequest(cnns=["resnet18"], machines=["local"], batch_sizes=[10], epochs=1, dataset_size=100)
    many: PointDict = {"batch_size": 10, "gpus_used": 4}
    one: PointDict = {"batch_size": 10, "gpus_used": 1}
    cpu: PointDict = {"batch_size": 10}
    made.fill(many, (100.0, 100.0, 100.0), FOUR_GPUS, request)
    made.fill(one, (100.0, 100.0, 100.0), FOUR_GPUS, request)
    made.fill(cpu, (100.0, 100.0, 100.0), LOCAL, request)
    assert many["cost_usd"] is not None
    assert many["cost_per_gpu_usd"] == approx6(many["cost_usd"] / 4)
    assert many["total_seconds"] == approx6(0.1 * math.ceil(100 / 40)) and one["total_seconds"] == approx6(1.0)
    assert many["total_seconds"] is not None
    assert many["energy_kwh"] == approx6(4 * 300 * many["total_seconds"] / 3.6e6)
    assert one["energy_kwh"] == approx6(300 * 1.0 / 3.6e6)
    pair: PointDict = {"batch_size": 10, "gpus_used": 4, "nodes": 2}
    made.fill(pair, (100.0, 100.0, 100.0), FOUR_GPUS, request)
    assert pair["total_seconds"] == approx6(0.1 * math.ceil(100 / 80))
    assert pair["total_seconds"] is not None
    assert pair["cost_usd"] == approx6(2 * 5.672 * pair["total_seconds"] / 3600)
    assert pair["cost_usd"] is not None
    assert pair["cost_per_gpu_usd"] == approx6(pair["cost_usd"] / 8)
    assert cpu["energy_kwh"] is None and cpu["cost_usd"] == 0.0 and "cost_per_gpu_usd" not in cpu


def test_best_batch_sizes_among_several_points() -> None:
    """The fastest and the cheapest differ; a faster point that does not fit, or has no time, is never chosen."""
    points = [
        point(8, 300.0, 0.30),
        point(16, 200.0, 0.25),
        point(32, 150.0, 0.28),
        point(64, 100.0, 0.10, fits=False),  # fastest and cheapest, but out of memory
        point(128, None, None, fits=None),  # no model: no time
        point(4, 400.0, 0.20, fits=None),  # fit unknown: may be best
    ]
    best = made.best_of("resnet18", "g5.xlarge", points, 48)
    assert best["cnn"] == "resnet18" and best["machine"] == "g5.xlarge" and best["max_batch_size"] == 48
    assert best["min_time"] == {
        "batch_size": 32, "gpus": 1, "nodes": 1, "total_seconds": 150.0, "cost_usd": 0.28, "source": "x",
        "memory_headroom_pct": None,
    }  # fmt: skip
    assert best["min_cost"] is not None
    assert best["min_cost"]["batch_size"] == 4


def test_ties_go_to_the_smaller_batch_for_time_and_the_faster_one_for_cost() -> None:
    """Equal times: the smaller batch size; equal costs (a free machine): the faster, then the smaller."""
    points = [point(32, 100.0, 0.0), point(16, 100.0, 0.0), point(8, 120.0, 0.0), point(4, 100.0, 0.0)]
    best = made.best_of("resnet18", "local", points, None)
    assert best["min_time"] is not None and best["min_cost"] is not None
    assert best["min_time"]["batch_size"] == 4 and best["min_cost"]["batch_size"] == 4
    points = [point(8, 90.0, 0.5), point(16, 80.0, 0.5), point(32, 80.0, 0.5)]
    best = made.best_of("resnet18", "g5.xlarge", points, None)
    assert best["min_time"] is not None and best["min_cost"] is not None
    assert best["min_time"]["batch_size"] == 16 and best["min_cost"]["batch_size"] == 16


def test_no_usable_point_has_no_best() -> None:
    """Only points that do not fit or have no time: no best, not a wrong one."""
    points = [point(8, 10.0, 0.1, fits=False), point(16, None, None)]
    best = made.best_of("resnet18", "g5.xlarge", points, 4)
    assert best["min_time"] is None and best["min_cost"] is None


def test_significant_digits_print_short_and_stay_close() -> None:
    """Rounded to 6 significant digits: within 5e-6 of the value, printed in at most 6 digits; 0, NaN and values
    whose powers of ten a double cannot hold exactly are left as they are."""
    rng = np.random.default_rng(7)
    x = rng.lognormal(0, 8, 20_000) * rng.choice([-1, 1], 20_000)
    rounded = made.significant(x)
    assert np.all(np.abs(rounded / x - 1) <= 5e-6)
    assert all(len(repr(v).lstrip("-").split("e")[0].replace(".", "").strip("0")) <= 6 for v in rounded.tolist())
    edge = np.array([0.0, np.nan, 5e-324, 1.7e300])
    np.testing.assert_array_equal(made.significant(edge), edge)
    assert made.significant(np.array([0.12345678901234567, 923412.3456])).tolist() == [0.123457, 923412.0]


def test_a_best_choice_leaves_memory_headroom_where_some_batch_does() -> None:
    """On a 16 GiB GPU, batch 166 just fits (15.8 GiB) and is fastest: the choice is 128 (12 GiB, 25% free), with
    its headroom said; when every batch is tight, the fastest of them is still chosen and its headroom shown."""

    def at(bs: int, total: float, peak: float) -> PointDict:
        return point(bs, total, total / 1000) | {"peak_memory_gib": peak}

    points = [at(64, 120.0, 6.5), at(128, 100.0, 12.0), at(166, 95.0, 15.8)]
    best = made.best_of("resnet50", "g4dn.xlarge", points, 166, 16.0)
    assert best["min_time"] is not None
    assert best["min_time"]["batch_size"] == 128 and best["min_time"]["memory_headroom_pct"] == 25.0
    assert best["max_batch_size"] == 166
    tight = made.best_of("resnet50", "g4dn.xlarge", [at(160, 96.0, 15.0), at(166, 95.0, 15.8)], 166, 16.0)
    assert tight["min_time"] is not None
    assert tight["min_time"]["batch_size"] == 166 and tight["min_time"]["memory_headroom_pct"] == 1.2


def test_timed_fitting_keeps_timed_points_that_fit_or_may_in_their_order() -> None:
    """No time, a measured or modelled out-of-memory, or (priced) no cost: left out; an unknown fit stays."""
    points = [point(1, 10.0, 1.0), point(2, None, None), point(3, 8.0, 0.5, fits=False),
              point(4, 6.0, None, fits=None), point(5, 7.0, 0.4, fits=None)]  # fmt: skip
    assert [p["batch_size"] for p in made.timed_fitting(points)] == [1, 4, 5]
    assert [p["batch_size"] for p in made.timed_fitting(points, priced=True)] == [1, 5]
    assert made.timed_fitting([]) == []


def test_iteration_ms_many_is_iteration_ms_of_each_point() -> None:
    """The (P10, median, P90) rows in ms, as iteration_ms gives them one point at a time."""
    request = JobRequest(cnns=["resnet18"], machines=["g5.xlarge"], batch_sizes=[8, 16])
    pts: list[Any] = [{"batch_size": 8}, {"batch_size": 16}]
    made.fill_many(pts, np.array([[4.0, 5.0, 7.0], [9.0, 10.0, 12.5]]), G5, request)
    rows = made.iteration_ms_many(pts)
    assert rows.shape == (2, 3)
    assert rows.tolist() == [pytest.approx(made.iteration_ms(p)) for p in pts]
    assert made.iteration_ms_many([]).shape == (0, 3)
