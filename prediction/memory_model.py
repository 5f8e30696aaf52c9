"""Memory of a job's points: the modelled peak (shared/cnn/step_memory.py), whether it fits, the largest that fits.

A GPU point is checked against one GPU's memory (a point trains on one GPU of the machine); a CPU
machine type against its RAM from the catalog, or for `local` (no RAM in the catalog) the RAM of this
host, which is where `local` is measured. A batch size measured out of memory stays out of memory
whatever the model says.
"""

import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from shared.cnn import step_memory
from shared.cnn.workload import WorkloadJson
from shared.core.settings import get_settings
from shared.jobs.point import PointDict
from shared.jobs.request import JobRequest
from shared.local_machine import gpu_row
from shared.machine_types import MachineTypeInfo, usable_memory

# Memos kept per worker process: a peak depends only on the CNN's workload, the training configuration, the batch
# size and the device kind, and a large job asks for ~8,000 peaks and ~250 bisections (~0.05 s).
MEMOS = 1024
# (GiB shown, bytes compared) by (batch size, on a GPU).
Peaks = dict[tuple[int, bool], tuple[float | None, float | None]]


@dataclass
class Memo:
    """One CNN's modelled peaks and largest batch sizes under one training configuration."""

    peaks: Peaks = field(default_factory=dict)
    largest: dict[tuple[float, int, bool], int | None] = field(default_factory=dict)  # (capacity, cap, on a GPU)


def memo(workload_digest: bytes, request: JobRequest) -> Memo:
    """This process's memo for a CNN (by its workload's digest, worker/step_cache.py) under the request's training."""
    return _memo(workload_digest, *training(request).values())


@lru_cache(maxsize=MEMOS)
def _memo(workload_digest: bytes, *how: Any) -> Memo:
    return Memo()


def training(request: JobRequest) -> dict[str, Any]:
    """The request's optimizer, its hyper-parameters and precision as the memory model takes them."""
    config = request.training()
    return {
        "optimizer": config.optimizer,
        "momentum": config.momentum,
        "weight_decay": config.weight_decay,
        "precision": config.precision,
    }


def capacity_bytes(info: MachineTypeInfo) -> float | None:
    """Memory one point may use: what one GPU gives PyTorch, else the machine's RAM; None if unknown."""
    if info["gpu"]:
        total, count = info["gpu_memory_gib"], info["gpu_count"] or 1
        # the catalog stores all GPUs' memory, as their datasheets give it
        return float(total) / count * usable_fraction(info)[0] * step_memory.GIB if total else None
    if ram := info["memory_gib"]:
        return float(ram) * step_memory.GIB
    return host_ram_bytes() if info["provider"] == "local" else None


def usable_fraction(info: MachineTypeInfo) -> tuple[float, str]:
    """The share of a GPU's datasheet memory PyTorch gets, and why; `local`'s is what CUDA reported: all of it."""
    if info["provider"] == "local":
        return 1.0, "as CUDA reports it"
    return _fraction_of(info["gpu"] or "")


@lru_cache(maxsize=256)
def _fraction_of(gpu: str) -> tuple[float, str]:
    row = gpu_row(gpu)
    return usable_memory().get(row["gpu"] if row else gpu, (1.0, "as its datasheet gives it"))


def host_ram_bytes() -> float | None:
    """This host's RAM, or its cgroup's limit if lower."""
    try:
        ram = float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError):
        return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            ram = min(ram, float(limit))
    except OSError:
        pass
    return ram


def annotate(
    points: list[PointDict],
    work: WorkloadJson,
    info: MachineTypeInfo,
    request: JobRequest,
    peaks: Peaks | None = None,
) -> None:
    """Give each point its modelled peak_memory_gib and fits_in_memory (a measured OOM stays False).

    peaks: a memo of this CNN's peaks under this request's training (`memo(...).peaks`), shared by its machine types.
    """
    capacity = capacity_bytes(info)
    how = training(request)
    memo: Peaks = {} if peaks is None else peaks
    gpu = bool(info.get("gpu"))
    for point in points:
        key = (point["batch_size"], gpu)
        if key not in memo:
            peak = step_memory.step_peak(work, point["batch_size"], gpu=gpu, **how)
            # (GiB shown, bytes compared): each summed once per batch size, not once per point.
            memo[key] = (round(peak.gib, 3), peak.total) if peak is not None else (None, None)
        shown, total = memo[key]
        point["peak_memory_gib"] = shown
        if point["fits_in_memory"] is False:
            continue  # measured out of memory: data beats the model
        if total is not None and capacity is not None:
            point["fits_in_memory"] = total <= capacity


def max_batch_size(
    work: WorkloadJson,
    info: MachineTypeInfo,
    request: JobRequest,
    *,
    measured_oom: list[int],
    largest: dict[tuple[float, int, bool], int | None] | None = None,
) -> int | None:
    """The largest batch size whose modelled peak fits (up to the largest a request may ask); None if unknown.

    measured_oom: batch sizes measured out of memory; the answer stays below the smallest of them.
    largest: a memo of this CNN's answers under this request's training (`memo(...).largest`).
    """
    capacity = capacity_bytes(info)
    if capacity is None:
        return None
    cap = min([get_settings().max_batch_size, *(b - 1 for b in measured_oom)])
    if cap < 1:
        return 0
    gpu = bool(info.get("gpu"))
    if largest is None:
        largest = {}
    if (capacity, cap, gpu) not in largest:
        largest[capacity, cap, gpu] = step_memory.max_batch_size(work, capacity, cap=cap, gpu=gpu, **training(request))
    return largest[capacity, cap, gpu]
