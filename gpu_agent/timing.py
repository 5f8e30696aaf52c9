"""Timing one operation the way a careful engineer does: warm-up, synchronise, robust statistics."""

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Timing:
    """Statistics of repeated runs, in milliseconds."""

    median_ms: float
    min_ms: float
    spread: float  # interquartile range relative to the median
    runs: int

    def to_json(self) -> dict[str, float | int]:
        """Plain dict for the stats column."""
        return {"median_ms": self.median_ms, "min_ms": self.min_ms, "spread": self.spread, "runs": self.runs}


def measure(
    fn: Callable[[], object],
    device: torch.device,
    *,
    time_cap_s: float,
    min_runs: int = 3,
    max_runs: int = 30,
    target_spread: float = 0.05,
) -> Timing:
    """Run fn until its median is stable or the time cap is hit; the first call is never a sample."""
    fn()  # warm-up: algorithm search, allocation, caches
    _sync(device)
    samples: list[float] = []
    started = time.perf_counter()
    while True:
        samples.append(_once(fn, device))
        if len(samples) >= max_runs:
            break
        settled = _spread(samples) <= target_spread or time.perf_counter() - started >= time_cap_s
        if len(samples) >= min_runs and settled:
            break
    median = statistics.median(samples)
    return Timing(median_ms=median, min_ms=min(samples), spread=_spread(samples), runs=len(samples))


def _once(fn: Callable[[], object], device: torch.device) -> float:
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _spread(samples: list[float]) -> float:
    if len(samples) < 2:
        return float("inf")
    q = statistics.quantiles(samples, n=4, method="inclusive")
    return (q[2] - q[0]) / statistics.median(samples)
