"""A result's points: a blank point, its times, cost and energy from an iteration time, and the best choices.

Times, costs, energies and conv_ms are given to SIGNIFICANT_DIGITS significant digits.
"""

from collections.abc import Callable
from itertools import compress, repeat
from operator import is_not, itemgetter
from typing import Any, cast

import numpy as np

from shared.jobs.point import PointDict
from shared.jobs.request import JobRequest
from shared.jobs.result import BestDict, ChoiceDict
from shared.machine_types import MachineTypeInfo

TIMES = ("iteration_seconds", "epoch_seconds", "total_seconds", "cost_usd", "energy_kwh")
# Times, costs, energies and conv_ms are given to 6 significant digits: predictions err by several per cent, and
# the 17 digits of a double made a large result ~20% longer to send and to read.
SIGNIFICANT_DIGITS = 6
# (batch size, fits in memory, conv_ms) → a point without times.
Maker = Callable[[int, bool | None, float | None], PointDict]
_SUFFIXES = ("_p10", "", "_p90")
_NO_TIMES = {f"{name}{suffix}": None for name in TIMES for suffix in ("", "_p10", "_p90")}
# The keys of fill_many's rows of figures, in their order: each of these times and costs at P10, median, P90.
_FILLED = tuple(f"{name}{suffix}" for name in TIMES[:4] for suffix in _SUFFIXES)
_ENERGY = [f"energy_kwh{suffix}" for suffix in _SUFFIXES]
_NO_ENERGY = dict.fromkeys(_ENERGY)
_BATCH = itemgetter("batch_size")
_TOTAL, _COST, _FITS = itemgetter("total_seconds"), itemgetter("cost_usd"), itemgetter("fits_in_memory")
_BAND = itemgetter("iteration_seconds_p10", "iteration_seconds", "iteration_seconds_p90")
_BY_TIME = itemgetter("total_seconds", "batch_size")
BY_COST = itemgetter("cost_usd", "total_seconds", "batch_size")  # also the decisions' order for cost
# A best choice leaves this share of memory free where some usable point does: the memory model's held-out error is
# 3.7-4.7% (docs/PERFORMANCE.md, Memory), and allocators fragment.
MIN_HEADROOM_PCT = 10.0


def blank(
    cnn: str,
    machine_type: str,
    bs: int,
    info: MachineTypeInfo,
    *,
    source: str,
    fits: bool | None,
    conv_ms: float | None,
) -> PointDict:
    """One point without times (a result's benchmarked points are made one at a time)."""
    return blanks(cnn, machine_type, info, source)(bs, fits, conv_ms)


def blanks(cnn: str, machine_type: str, info: MachineTypeInfo, source: str) -> Maker:
    """A maker of a (CNN, machine type)'s points without times: (batch size, fits, conv_ms) → point."""
    template: dict[str, Any] = {
        "cnn": cnn,
        "machine": machine_type,
        "batch_size": None,
        "source": source,
        "fits_in_memory": None,
        "conv_ms": None,
        "gpus_used": 1 if info.get("gpu_count") else 0,
        "nodes": 1,
        "global_batch_size": None,
        "allreduce_ms": None,
        "exposed_allreduce_ms": None,
        "scaling_efficiency": None,
        "layer_environments": None,
        "measured_on": None,
        "cost_per_gpu_usd": None,
        "spot_cost_usd": None,
        **_NO_TIMES,
    }

    def make(bs: int, fits: bool | None, conv_ms: float | None) -> PointDict:
        point: PointDict = template.copy()  # type: ignore[assignment]  # the template holds every key
        point["batch_size"], point["fits_in_memory"], point["conv_ms"] = bs, fits, conv_ms
        point["global_batch_size"] = bs
        point["layer_environments"], point["measured_on"] = [], []  # each point its own lists
        return point

    return make


def fill(point: PointDict, ms: tuple[float, float, float], info: MachineTypeInfo, request: JobRequest) -> None:
    """Times, cost and energy of a point from its (P10, median, P90) iteration time in ms."""
    fill_many([point], np.array([ms], dtype=float), info, request)


def significant(x: np.ndarray, digits: int = SIGNIFICANT_DIGITS) -> np.ndarray:
    """x rounded to `digits` significant digits, each the double nearest its decimal (so JSON prints it short)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        magnitude = np.floor(np.log10(np.abs(x)))
    shift = digits - 1 - np.where(np.isfinite(magnitude), magnitude, 0.0)
    exact = np.abs(shift) <= 22  # powers of ten a double holds exactly; anything further out is left as it is
    power = 10.0 ** np.where(exact, np.abs(shift), 0.0)
    rounded = np.where(shift >= 0, np.round(x * power) / power, np.round(x / power) * power)
    return np.where(exact, rounded, x)


def fill_many(
    points: list[PointDict], ms: np.ndarray, info: MachineTypeInfo, request: JobRequest,
    *, layout: tuple[int, int] | None = None,
) -> None:  # fmt: skip
    """Times, cost and energy of points from their (P10, median, P90) iteration times in ms, (points × 3).

    layout: the (GPUs, nodes) every one of the points is for, when the caller knows it (else read from each point).
    """
    if not points:
        return
    n = len(points)
    # Data parallel (prediction/layouts.py): batch_size is per GPU; a step takes it on every GPU of every node.
    if layout is None:
        nodes = np.fromiter((p.get("nodes", 1) for p in points), dtype=np.float64, count=n)
        used = np.fromiter((max(1, p.get("gpus_used", 1)) for p in points), dtype=np.float64, count=n)
    else:
        used, nodes = np.full(n, float(max(1, layout[0]))), np.full(n, float(layout[1]))
    batch = np.fromiter(map(_BATCH, points), dtype=np.float64, count=n) * used * nodes
    iterations = np.ceil(request.dataset_size / batch) * request.epochs
    gpus = info.get("gpu_count") or 0
    # The GPUs that train draw power; a machine's idle ones are not counted.
    power_kw = (info.get("gpu_tdp_watts") or 0) * (used * nodes if gpus else 0) / 1000
    seconds = ms.T / 1000  # (3, points): P10, median, P90 as _SUFFIXES
    total = seconds * iterations
    cost = info["price_usd_per_hour"] * nodes * total / 3600
    rows, keys = [seconds, total / request.epochs, total, cost], list(_FILLED)
    if np.any(power_kw):
        rows.append(power_kw * total / 3600)
        keys += _ENERGY
    if gpus:
        rows.append(cost[1:2] / (gpus * nodes))
        keys.append("cost_per_gpu_usd")
    if (spot := info.get("spot_price_usd_per_hour")) is not None:
        rows.append(float(spot) * nodes * total[1:2] / 3600)
        keys.append("spot_cost_usd")
    # One rounding over every figure of every point: a call per figure cost 0.1 s in a 63,488-point job.
    plain = cast(list[dict[str, Any]], points)  # cast once: a call per point is measurable in a large job
    for point, values in zip(plain, significant(np.vstack(rows)).T.tolist(), strict=True):
        point.update(zip(keys, values, strict=True))
    if not np.any(power_kw):
        for point in plain:
            point.update(_NO_ENERGY)


def withhold_unfit(points: list[PointDict]) -> None:
    """A point that does not fit in memory cannot run: no time or cost, so nothing that sorts by them picks it."""
    for point in cast(list[dict[str, Any]], points):
        if point["fits_in_memory"] is False:
            point.update(_NO_TIMES, cost_per_gpu_usd=None, spot_cost_usd=None)


def iteration_ms_many(points: list[PointDict]) -> np.ndarray:
    """Timed points' (P10, median, P90) iteration times in ms, (points × 3)."""
    return np.array(list(map(_BAND, points)), dtype=float).reshape(-1, 3) * 1000


def iteration_ms(point: PointDict) -> list[float]:
    """A timed point's (P10, median, P90) iteration time in ms."""
    return [s * 1000 for s in _BAND(point)]


def timed_fitting(points: list[PointDict], *, priced: bool = False) -> list[PointDict]:
    """The points with a time (and a cost, when priced) that fit in memory or may (their fit unknown)."""
    # Filtered by C-level maps: a comprehension's two lookups per point were a tenth of choosing in a large job.
    timed = list(compress(points, map(is_not, map(_TOTAL, points), repeat(None))))
    if priced:
        timed = list(compress(timed, map(is_not, map(_COST, timed), repeat(None))))
    return list(compress(timed, map(is_not, map(_FITS, timed), repeat(False))))


def with_headroom(points: list[PointDict], capacity_gib: float | None) -> list[PointDict]:
    """The points leaving MIN_HEADROOM_PCT of memory free (as headroom_pct rounds it), or whose peak is unknown."""
    if not capacity_gib:
        return list(points)
    # headroom_pct(p) >= MIN, with its rounding to 0.1, without a call and a round() per point of a large job.
    most = capacity_gib * (1 - (MIN_HEADROOM_PCT - 0.05) / 100)
    return [p for p in points if (peak := p.get("peak_memory_gib")) is None or peak <= most]


def headroom_pct(point: PointDict, capacity_gib: float | None) -> float | None:
    """The share of one GPU's memory (or the machine's RAM) a point leaves free, in per cent; None if unknown."""
    peak = point.get("peak_memory_gib")
    if peak is None or not capacity_gib:
        return None
    return round(100 * (capacity_gib - peak) / capacity_gib, 1)


def best_of(
    cnn: str,
    machine_type: str,
    points: list[PointDict],
    max_batch_size: int | None,
    capacity_gib: float | None = None,
    basis: str | None = None,
) -> BestDict:
    """The fastest and the cheapest batch size (and GPU and node count) of one CNN on one machine type (None when no
    point is usable), among those leaving MIN_HEADROOM_PCT of memory free where any does."""
    # A point that does not fit is never best; one whose fit is unknown may be.
    usable = timed_fitting(points, priced=True)
    # The memory model errs by a few per cent: a batch that just fits may not, so a choice keeps a margin if it can.
    usable = with_headroom(usable, capacity_gib) or usable

    def pick(key: Callable[[PointDict], Any]) -> ChoiceDict | None:
        if not usable:
            return None
        p = min(usable, key=key)
        total, cost = p["total_seconds"], p["cost_usd"]  # usable: both given
        assert total is not None and cost is not None
        return {
            "batch_size": p["batch_size"],
            "gpus": p.get("gpus_used", 1),
            "nodes": p.get("nodes", 1),
            "total_seconds": total,
            "cost_usd": cost,
            "source": p["source"],
            "memory_headroom_pct": headroom_pct(p, capacity_gib),
        }

    return {
        "cnn": cnn,
        "machine": machine_type,
        "max_batch_size": max_batch_size,
        "memory_gib": None if capacity_gib is None else round(capacity_gib, 3),
        "memory_basis": basis,
        "min_time": pick(_BY_TIME),
        # Ties in cost (a free machine) go to the faster batch size.
        "min_cost": pick(BY_COST),
    }
