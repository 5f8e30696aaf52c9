"""Measuring the points (batch sizes) of one task in windows: a few points timed together, stored together.

A window is the unit of work the agent finishes before it looks at a stop request: its points
are set up and warmed up, timed round-robin (gpu_agent/timing.py), stored, and freed. Windows
are bounded in points (so a stop is prompt) and in estimated memory (so timing points together
cannot run out of memory where one alone would not); a point that still runs out of memory
next to others is measured again alone, and only out of memory alone is recorded.
"""

import gc
import logging
import os
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from gpu_agent import memory
from gpu_agent.timing import OpError, Policy, Timing, time_rounds

log = logging.getLogger(__name__)
# On CUDA, the allocator's cache of freed blocks is kept between windows until it holds this share of the device.
CUDA_CACHE_KEEP = 0.1


@dataclass(frozen=True)
class Prepared:
    """A point ready to time: warmed-up operations per phase (holding its tensors), and facts about it."""

    phases: dict[str, Callable[[], object]]
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """What one point came to: timings per phase; or out of memory; or infeasible, with the reason."""

    timings: dict[str, Timing] | None = None
    oom: bool = False
    reason: str | None = None
    window: tuple[int, ...] = ()  # the points it was timed together with
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def infeasible(self) -> bool:
        """It cannot run at all at this point (not a memory limit)."""
        return self.timings is None and not self.oom


@dataclass(frozen=True)
class PointSetup:
    """How to set up the points of one task and how much memory a window of them needs."""

    prepare: Callable[[int], Prepared]
    footprint: Callable[[Sequence[int]], int]
    infeasible: tuple[type[BaseException], ...] = ()  # raised by prepare: the point cannot run


def is_oom(exc: BaseException) -> bool:
    """True for an allocation failure on any device."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and ("out of memory" in str(exc) or "can't allocate memory" in str(exc))


def first_line(exc: BaseException) -> str:
    """An exception's message, short enough for a stats column."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


def run(
    points: Sequence[int],
    setup: PointSetup,
    *,
    device: torch.device,
    policy: Policy,
    window_points: int,
    save: Callable[[int, Outcome], None],
    stop: Callable[[], bool],
) -> list[int]:
    """Measure and save every point, window by window; returns the points left when a stop was requested."""
    limit = memory.limit_bytes(device)
    queue = deque(pack(points, setup.footprint, limit=limit, most=window_points))
    while queue:
        if stop():
            return [p for w in queue for p in w]
        window = queue.popleft()
        # Said before timing starts: a stop from here on finishes this window first (tests wait for the line).
        log.info("timing window %s", window)
        outcomes, alone = _window(window, setup, device, policy, limit, stop)
        for point, outcome in outcomes.items():
            save(point, outcome)
        queue.extendleft([p] for p in reversed(alone))
    return []


def pack(points: Sequence[int], footprint: Callable[[Sequence[int]], int], *, limit: int, most: int) -> list[list[int]]:
    """Consecutive points grouped into windows of at most `most` points that fit in `limit` together."""
    windows: list[list[int]] = []
    for p in points:
        if windows and len(windows[-1]) < most and footprint([*windows[-1], p]) <= limit:
            windows[-1].append(p)
        else:
            windows.append([p])
    return windows


def _window(
    window: list[int], setup: PointSetup, device: torch.device, policy: Policy, limit: int, stop: Callable[[], bool]
) -> tuple[dict[int, Outcome], list[int]]:
    """Measure one window; returns outcomes and the points to measure again alone."""
    shared = len(window) > 1
    # The machine's load while timing, kept with each row: a later reader can tell a busy hour.
    load_before = os.getloadavg()[0]
    done: dict[int, Outcome] = {}
    alone: list[int] = []
    ready: dict[int, Prepared] = {}
    failed = False
    try:
        for p in window:
            needed = setup.footprint([p])
            if device.type == "cpu" and needed > limit:
                done[p] = Outcome(oom=True, reason=memory.guard_reason(needed, limit))
                continue
            prepared = _prepare(setup, p)
            if isinstance(prepared, Prepared):
                ready[p] = prepared
                continue
            # A full collection after out of memory only: an infeasible point's traceback is dropped (_prepare), so
            # reference counting frees what it built.
            free(device, collect=is_oom(prepared))
            if not is_oom(prepared):
                done[p] = Outcome(reason=first_line(prepared))
            elif shared:
                alone.append(p)
            else:
                done[p] = Outcome(oom=True, reason=first_line(prepared))
        if ready:
            try:
                timings = _time(ready, device, policy, stop)
            except OpError as err:
                failed = True
                if not is_oom(err.cause):
                    raise err.cause from None
                if len(ready) > 1:
                    alone.extend(ready)
                else:
                    done[next(iter(ready))] = Outcome(oom=True, reason=first_line(err.cause))
            else:
                together = tuple(ready)
                load = {"load_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)]}
                for p, prep in ready.items():
                    timed = {phase: timings[(p, phase)] for phase in prep.phases}
                    done[p] = Outcome(timings=timed, window=together, info={**prep.info, **load})
    finally:
        ready.clear()
        free(device, collect=failed)
    if alone:
        log.info("points %s ran out of memory next to others: measuring each alone", alone)
    return {p: done[p] for p in window if p in done}, alone


def _prepare(setup: PointSetup, point: int) -> Prepared | BaseException:
    """Set up a point; out of memory and infeasibility come back as values (their frames released)."""
    try:
        return setup.prepare(point)
    except Exception as exc:
        if is_oom(exc) or isinstance(exc, setup.infeasible):
            # The traceback would keep the half-built tensors alive until the next window.
            return exc.with_traceback(None)
        raise


def _time(
    ready: dict[int, Prepared], device: torch.device, policy: Policy, stop: Callable[[], bool]
) -> dict[Any, Timing]:
    ops: dict[Any, Callable[[], object]] = {(p, ph): fn for p, prep in ready.items() for ph, fn in prep.phases.items()}
    return time_rounds(ops, device, policy.for_points(len(ready)), stop=stop)


def free(device: torch.device, *, collect: bool = False) -> None:
    """Release what the last window held: its tensors by reference counting; after a failure, or when the
    allocator's cache has grown large, also the garbage and the cache."""
    if collect:
        # Only after a failure: a full collection costs tenths of a second in a large process, on every window.
        gc.collect()
    if device.type == "cuda" and (collect or _cached_bytes(device) > CUDA_CACHE_KEEP * _total_bytes(device)):
        # Not after every window: the next one would allocate through cudaMalloc again (milliseconds per tensor,
        # on windows of microsecond operations). An allocation that does not fit empties the cache and retries
        # by itself, so out of memory is judged as before; the memory limit reads free memory, so a large
        # cache is handed back.
        torch.cuda.empty_cache()


def _cached_bytes(device: torch.device) -> int:
    return int(torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))


def _total_bytes(device: torch.device) -> int:
    return int(torch.cuda.get_device_properties(device).total_memory)
