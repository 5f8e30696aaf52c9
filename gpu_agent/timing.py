"""Timing on a shared, noisy machine: operations timed round-robin, robust statistics per operation.

The operations of one window (the phases of a few batch sizes) are timed in rounds: each round
runs every operation a few times in turn (a block) and keeps the median of the block. Around
each block the agent reads how long its threads waited for a CPU (gpu_agent/schedstat.py); a
block that waited more than a small share of its time ran on a busy machine and is set aside.
An operation's value is the minimum of its quiet blocks' medians: a noisy stretch slows whole
rounds, which the minimum discards, instead of biasing whichever operation was running then.
Warm-up (the first call of a new shape) is done by the caller and never sampled.
"""

import statistics
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from gpu_agent import schedstat
from shared.core.settings import get_settings


@dataclass(frozen=True)
class Policy:
    """When to stop timing one window."""

    time_cap_s: float  # per point: a window of n points may take n × this, once it has min_rounds quiet rounds
    target_spread: float = 0.05  # stable when the two lowest quiet block medians agree within this
    min_rounds: int = 3
    max_rounds: int = 50
    max_reps: int = 5
    round_s: float = 0.01  # aim for this much time per operation per round (sets the reps)
    quiet_wait: float = 0.1  # a block is quiet when its threads waited for a CPU under this share of it
    busy_cap_factor: float = 2  # without enough quiet blocks, keep trying up to this many time caps
    rewarm: int = 0  # untimed runs before each block, so a block starts from the state its op left

    @classmethod
    def from_settings(cls, factor: float = 1) -> "Policy":
        """The agent's policy, with the time cap scaled by factor (whole steps get a longer one)."""
        s = get_settings()
        return cls(
            time_cap_s=s.bench_time_cap_s * factor, target_spread=s.bench_target_spread, quiet_wait=s.bench_quiet_wait
        )

    def for_points(self, n: int) -> "Policy":
        """The same policy with the time cap of a window of n points."""
        return replace(self, time_cap_s=self.time_cap_s * max(n, 1))


@dataclass
class _Block:
    runs: list[float] = field(default_factory=list)
    wait: float = 0.0  # share of the block's wall time its threads spent waiting for a CPU

    @property
    def median(self) -> float:
        return statistics.median(self.runs)


@dataclass(frozen=True)
class Timing:
    """Statistics of one operation over the rounds of its window, in milliseconds."""

    value_ms: float  # minimum of the quiet blocks' medians (of all, if none was quiet): the stored figure
    median_ms: float  # median of all runs
    min_ms: float
    spread: float | None  # interquartile range of all runs relative to their median
    agreement: float | None  # gap between the two lowest block medians used, relative: the stopping statistic
    runs: int
    rounds: int
    quiet_rounds: int
    wait: float  # median over blocks of the share of time spent waiting for a CPU
    reps: int  # runs per block after the first round
    rewarm: int  # untimed runs before each block
    stable: bool  # stopped because every operation agreed, not at a cap, max rounds or a stop

    def to_json(self) -> dict[str, Any]:
        """Plain dict for a stats column."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class OpError(Exception):
    """An operation raised while being timed; `key` says which."""

    def __init__(self, key: Hashable, cause: BaseException) -> None:
        super().__init__(f"{key!r}: {cause}")
        self.key = key
        self.cause = cause


def time_rounds(
    ops: dict[Hashable, Callable[[], object]],
    device: torch.device,
    policy: Policy,
    *,
    stop: Callable[[], bool] = lambda: False,
) -> dict[Hashable, Timing]:
    """Time warmed-up operations round-robin until all are stable, a cap, max rounds, or a stop."""
    keys = list(ops)
    blocks: dict[Hashable, list[_Block]] = {k: [] for k in keys}
    reps = dict.fromkeys(keys, 1)  # the first round finds out how long each operation takes
    started = time.perf_counter()
    stable = False
    for r in range(policy.max_rounds):
        # Rotate the order so no operation always follows the same one (caches, clocks).
        for k in keys[r % len(keys) :] + keys[: r % len(keys)]:
            blocks[k].append(_block(k, ops[k], reps[k], device, policy.rewarm))
        if r == 0:
            reps = {k: _reps(blocks[k][0].runs[0], policy) for k in keys}
        if r + 1 < policy.min_rounds:
            continue
        quiet = {k: _quiet(blocks[k], policy) for k in keys}
        enough = all(len(q) >= policy.min_rounds for q in quiet.values())
        stable = enough and all(_agreement(q) <= policy.target_spread for q in quiet.values())
        elapsed = time.perf_counter() - started
        if stable or stop() or (enough and elapsed >= policy.time_cap_s):
            break
        if elapsed >= policy.time_cap_s * policy.busy_cap_factor:
            break
    return {k: _timing(blocks[k], reps[k], stable, policy) for k in keys}


def sync(device: torch.device) -> None:
    """Wait for queued device work (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _block(key: Hashable, fn: Callable[[], object], reps: int, device: torch.device, rewarm: int) -> _Block:
    try:
        for _ in range(rewarm):
            fn()
        sync(device)
        waited, t0 = schedstat.run_delay_s(), time.perf_counter()
        runs = [_once(fn, device) for _ in range(reps)]
    except Exception as exc:
        raise OpError(key, exc) from exc
    wall = time.perf_counter() - t0
    return _Block(runs=runs, wait=(schedstat.run_delay_s() - waited) / wall if wall > 0 else 0.0)


def _once(fn: Callable[[], object], device: torch.device) -> float:
    if device.type == "cuda":
        # Events on the stream time the device work itself, not the launch.
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def _reps(first_ms: float, policy: Policy) -> int:
    return max(1, min(policy.max_reps, int(policy.round_s * 1000 / max(first_ms, 1e-6))))


def _quiet(blocks: list[_Block], policy: Policy) -> list[_Block]:
    return [b for b in blocks if b.wait <= policy.quiet_wait]


def _agreement(blocks: list[_Block]) -> float:
    medians = sorted(b.median for b in blocks)
    if len(medians) < 2 or medians[0] <= 0:
        return float("inf")
    return (medians[1] - medians[0]) / medians[0]


def _timing(blocks: list[_Block], reps: int, stable: bool, policy: Policy) -> Timing:
    runs = [t for b in blocks for t in b.runs]
    quiet = _quiet(blocks, policy)
    used = quiet or blocks
    median = statistics.median(runs)
    spread = None
    if len(runs) >= 2 and median > 0:
        q = statistics.quantiles(runs, n=4, method="inclusive")
        spread = (q[2] - q[0]) / median
    agreement = _agreement(used)
    return Timing(
        value_ms=min(b.median for b in used),
        median_ms=median,
        min_ms=min(runs),
        spread=spread,
        agreement=agreement if agreement != float("inf") else None,
        runs=len(runs),
        rounds=len(blocks),
        quiet_rounds=len(quiet),
        wait=round(statistics.median(b.wait for b in blocks), 4),
        reps=reps,
        rewarm=policy.rewarm,
        stable=stable,
    )
