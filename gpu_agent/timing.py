"""Timing on a shared, noisy machine: operations timed round-robin, robust statistics per operation.

The operations of one window (the phases of a few batch sizes) are timed in rounds: each round
runs every operation still being timed a few times in turn (a block) and keeps the median of the
block. Around each block the agent reads how long its threads waited for a CPU
(gpu_agent/schedstat.py); a block that waited more than a small share of its time ran on a busy
machine and is set aside. An operation's value is the minimum of its quiet blocks' medians: a
noisy stretch slows whole rounds, which the minimum discards, instead of biasing whichever
operation was running then. Each operation leaves the rounds on its own: as soon as its two
lowest quiet block medians agree (stable), or at its own cap (a number of blocks, so a cap
proportional to its duration, or its share of the window's time), so one restless operation no
longer keeps the settled ones running. On CUDA a block's runs sit between consecutive CUDA
events on the stream, with one synchronise per block rather than per run, and a run of a
microsecond operation is several calls (its time their mean), longer than the events' resolution.
Warm-up (the first call of a new shape) is done by the caller and never sampled.
"""

import math
import statistics
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import torch

from gpu_agent import schedstat
from shared.core.settings import get_settings

K = TypeVar("K", bound=Hashable)  # what names an operation timed in rounds


@dataclass(frozen=True)
class Policy:
    """When to stop timing the operations of one window."""

    time_cap_s: float  # per point: a window of n points may take n × this, shared by its operations
    target_spread: float = 0.05  # stable when the two lowest quiet block medians agree within this
    min_rounds: int = 3
    # Stable takes this many quiet blocks (min_rounds once the operation has used its time): few blocks of a short
    # operation made its figure move from one run to the next, and they cost little.
    stable_rounds: int = 5
    settle_rounds: int = 15  # an operation with min_rounds quiet blocks that has not agreed after this many stops
    max_rounds: int = 50
    max_reps: int = 5  # runs per block at most on a CPU: a short block is rarely hit by another process's slice
    round_s: float = 0.01  # aim for this much time per operation per round (sets the reps)
    # On CUDA a run costs a launch and an event (no synchronise) and a GPU is steadier than a shared CPU: short blocks.
    cuda_round_s: float = 0.001
    cuda_max_reps: int = 50
    # On CUDA a run is this long at least: an operation shorter than this is called several times between two events
    # (their resolution is about 0.5 µs, a tenth of a 5 µs kernel) and the run's time is their mean.
    cuda_run_ms: float = 0.2
    quiet_wait: float = 0.1  # a block is quiet when its threads waited for a CPU under this share of it
    busy_cap_factor: float = 2  # without enough quiet blocks, keep trying up to this many caps
    rewarm: int = 0  # untimed runs before each block, so a block starts from the state its op left

    @classmethod
    def from_settings(cls, factor: float = 1) -> "Policy":
        """The agent's policy, with the time cap scaled by factor (whole steps get a longer one)."""
        s = get_settings()
        return cls(
            time_cap_s=s.bench_time_cap_s * factor, target_spread=s.bench_target_spread, quiet_wait=s.bench_quiet_wait,
            stable_rounds=s.bench_stable_rounds, settle_rounds=s.bench_settle_rounds,
        )  # fmt: skip

    def for_points(self, n: int) -> "Policy":
        """The same policy with the time cap of a window of n points."""
        return replace(self, time_cap_s=self.time_cap_s * max(n, 1))


@dataclass
class _Block:
    runs: list[float]
    wait: float  # share of the block's wall time its threads spent waiting for a CPU
    wall_s: float  # what the block cost, untimed runs included
    median: float = field(init=False)

    def __post_init__(self) -> None:
        self.median = statistics.median(self.runs)


@dataclass
class _Op:
    """One operation's blocks so far, and why it left the rounds."""

    fn: Callable[[], object]
    reps: int = 1  # the first block finds out how long the operation takes
    calls: int = 1  # calls per run (CUDA: between two events)
    blocks: list[_Block] = field(default_factory=list)
    spent_s: float = 0.0
    stable: bool = False
    done: bool = False


@dataclass(frozen=True)
class Timing:
    """Statistics of one operation over the rounds of its window, in milliseconds."""

    value_ms: float  # minimum of the quiet blocks' medians (of all, if none was quiet): the stored figure
    median_ms: float  # median of all runs
    min_ms: float
    spread: float | None  # interquartile range of all runs relative to their median
    agreement: float | None  # gap between the two lowest block medians used, relative: the stopping statistic
    runs: int
    rounds: int  # blocks of this operation
    quiet_rounds: int
    wait: float  # median over blocks of the share of time spent waiting for a CPU
    reps: int  # runs per block after the first round
    rewarm: int  # untimed runs before each block
    stable: bool  # this operation stopped because its blocks agreed, not at a cap, max rounds or a stop
    calls: int = 1  # calls of the operation per run after the first round (its time: their mean); 1 on a CPU

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
    ops: Mapping[K, Callable[[], object]],
    device: torch.device,
    policy: Policy,
    *,
    stop: Callable[[], bool] = lambda: False,
) -> dict[K, Timing]:
    """Time warmed-up operations round-robin, each until it is stable or at its cap; all at a stop or max rounds.

    Each operation's time cap is its share of the window's (policy.time_cap_s over the operations).
    """
    state = {k: _Op(fn) for k, fn in ops.items()}
    cap_s = policy.time_cap_s / max(len(state), 1)
    waited = schedstat.reader()
    try:
        for r in range(policy.max_rounds):
            active = [k for k, op in state.items() if not op.done]
            if not active:
                break
            # Rotate the order so no operation always follows the same one (caches, clocks).
            for k in active[r % len(active) :] + active[: r % len(active)]:
                op = state[k]
                block = _block(k, op, device, policy.rewarm, waited)
                op.blocks.append(block)
                op.spent_s += block.wall_s
                if r == 0:
                    op.reps, op.calls = _reps(block.runs[0], policy, device)
            if r + 1 < policy.min_rounds:
                continue
            for k in active:
                _settle(state[k], policy, cap_s, window_s=policy.time_cap_s)
            if stop():
                break
    finally:
        waited.close()
    return {k: _timing(op, policy) for k, op in state.items()}


def _settle(op: _Op, policy: Policy, cap_s: float, *, window_s: float) -> None:
    """Take an operation out of the rounds once it agrees, or at its cap.

    An operation short of quiet blocks goes on past its share, up to busy_cap_factor times the whole window's cap
    (as before operations left one by one): with one quiet block its value would be whichever block that was, and
    a long operation's share is only a few blocks (vgg11's 25088x4096 linear stored 590 ms where its runs took 208).
    """
    quiet, busy = _quiet(op.blocks, policy), policy.busy_cap_factor
    enough = len(quiet) >= policy.min_rounds
    sure = len(quiet) >= policy.stable_rounds or op.spent_s >= cap_s
    if enough and sure and _agreement(quiet) <= policy.target_spread:
        op.stable = op.done = True
    elif enough and (len(op.blocks) >= policy.settle_rounds or op.spent_s >= cap_s):
        op.done = True  # as settled as it gets: more blocks would only lower the minimum by chance
    elif op.spent_s >= max(cap_s, window_s) * busy or len(op.blocks) >= policy.settle_rounds * busy:
        op.done = True  # too few quiet blocks on a busy machine: it says so (quiet_rounds, wait)


def sync(device: torch.device) -> None:
    """Wait for queued device work (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _block(key: Hashable, op: _Op, device: torch.device, rewarm: int, waited: "schedstat.Reader") -> _Block:
    try:
        t0 = time.perf_counter()
        for _ in range(rewarm):
            op.fn()
        sync(device)
        before, t1 = waited(), time.perf_counter()
        runs = _cuda_runs(op.fn, op.reps, op.calls) if device.type == "cuda" else _cpu_runs(op.fn, op.reps)
        after, t2 = waited(), time.perf_counter()
    except Exception as exc:
        raise OpError(key, exc) from exc
    return _Block(runs=runs, wait=(after - before) / (t2 - t1) if t2 > t1 else 0.0, wall_s=t2 - t0)


def _cpu_runs(fn: Callable[[], object], reps: int) -> list[float]:
    runs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t0) * 1000)
    return runs


def _cuda_runs(fn: Callable[[], object], reps: int, calls: int) -> list[float]:
    """Each run (`calls` calls) between two consecutive events on the stream; one synchronise for the block."""
    # Events time the device work itself, not the launch; a run ends where the next begins.
    events = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
    events[0].record()
    for end in events[1:]:
        for _ in range(calls):
            fn()
        end.record()
    events[-1].synchronize()
    return [float(a.elapsed_time(b)) / calls for a, b in zip(events, events[1:], strict=False)]


def _reps(first_ms: float, policy: Policy, device: torch.device) -> tuple[int, int]:
    """(runs per block, calls per run) for an operation whose first run took first_ms."""
    first_ms = max(first_ms, 1e-6)
    if device.type != "cuda":
        return max(1, min(policy.max_reps, int(policy.round_s * 1000 / first_ms))), 1
    calls = max(1, math.ceil(policy.cuda_run_ms / first_ms))
    return max(1, min(policy.cuda_max_reps, int(policy.cuda_round_s * 1000 / (first_ms * calls)))), calls


def _quiet(blocks: list[_Block], policy: Policy) -> list[_Block]:
    return [b for b in blocks if b.wait <= policy.quiet_wait]


def _agreement(blocks: list[_Block]) -> float:
    medians = sorted(b.median for b in blocks)
    if len(medians) < 2 or medians[0] <= 0:
        return float("inf")
    return (medians[1] - medians[0]) / medians[0]


def _timing(op: _Op, policy: Policy) -> Timing:
    blocks = op.blocks
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
        reps=op.reps,
        calls=op.calls,
        rewarm=policy.rewarm,
        stable=op.stable,
    )
