"""How much memory a measurement may use, estimates of what it will use, and what a step used at its peak.

On CUDA an allocation that does not fit fails cleanly (out of memory is data). On a CPU it
swaps instead, which can stall the whole machine, so the agent refuses a CPU measurement whose
estimated tensors exceed a share of the available RAM and records it as out of memory.
"""

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from shared.cnn import step_memory
from shared.cnn.signatures import ConvSignature
from shared.cnn.workload import WorkloadJson
from shared.core.settings import get_settings
from shared.training import TrainConfig

BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
GIB = 2**30


def available_bytes(device: torch.device) -> int:
    """Memory free for this process now: RAM (within a cgroup limit, if any) or free GPU memory."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    free = _meminfo_available()
    limit, used = _cgroup("memory.max"), _cgroup("memory.current")
    if limit is not None and used is not None:
        free = min(free, max(limit - used, 0))
    return free


def limit_bytes(device: torch.device) -> int:
    """The most one window of measurements may use: a share of the available memory."""
    return int(available_bytes(device) * get_settings().agent_memory_fraction)


def guard_reason(needed: int, limit: int) -> str:
    """Why a CPU measurement was refused."""
    share = get_settings().agent_memory_fraction
    return (
        f"memory guard: needs about {needed / GIB:.2f} GiB, over {share:.0%} of the available RAM "
        f"({limit / GIB:.2f} GiB; AGENT_MEMORY_FRACTION)"
    )


def out_numel(sig: ConvSignature) -> int:
    """Elements of one sample's conv output."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = sig.kernel, sig.stride, sig.padding, sig.dilation
    if sig.transposed:
        oh = (sig.in_h - 1) * sh - 2 * ph + dh * (kh - 1) + sig.output_padding[0] + 1
        ow = (sig.in_w - 1) * sw - 2 * pw + dw * (kw - 1) + sig.output_padding[1] + 1
    else:
        oh = (sig.in_h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        ow = (sig.in_w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    return sig.out_channels * max(oh, 0) * max(ow, 0)


def layer_bytes(sig: ConvSignature, batch_sizes: Iterable[int], precision: str) -> int:
    """Estimated peak of a window of one layer's batch sizes: inputs, weights, output gradients, one result."""
    size = BYTES[precision]
    weight = sig.in_channels * sig.out_channels // sig.groups * sig.kernel[0] * sig.kernel[1]
    per_sample_in = sig.in_channels * sig.in_h * sig.in_w
    per_sample_out = out_numel(sig)
    sizes = list(batch_sizes)
    resident = sum(b * (per_sample_in + per_sample_out) + weight for b in sizes)
    transient = max(b * max(per_sample_in, per_sample_out) for b in sizes) if sizes else 0
    return size * (resident + transient)


def step_bytes(
    *,
    workload: WorkloadJson,
    batch_sizes: Iterable[int],
    image_size: int,
    config: TrainConfig,
    gpu: bool,
) -> int:
    """Estimated peak of a window of whole steps: the modelled step (shared/cnn/step_memory.py) at its largest batch
    size, and every batch size's input, which the window keeps prepared."""
    sizes = list(batch_sizes)
    peak = step_memory.step_peak(
        workload,
        max(sizes, default=1),
        optimizer=config.optimizer,
        momentum=config.momentum,
        weight_decay=config.weight_decay,
        precision=config.precision,
        gpu=gpu,
        tensors_only=True,
    )
    inputs = sum(b * 3 * image_size * image_size for b in sizes) * BYTES[config.layer_precision]
    return int((peak.total if peak is not None else 0) + inputs)


def _meminfo_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def _cgroup(name: str) -> int | None:
    try:
        text = (Path("/sys/fs/cgroup") / name).read_text().strip()
    except OSError:
        return None
    return None if text == "max" else int(text)


def held_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind the tensors (views and repeats counted once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def peak_of(run: Callable[[], object], *, own: Iterable[torch.Tensor], device: torch.device) -> int:
    """Peak bytes of one step: what `own` holds before it (weights, optimizer state, its input) plus the most
    the allocator held above that while `run` ran; other points' tensors, also held, are not this step's.

    CUDA: torch.cuda.max_memory_allocated after reset_peak_memory_stats. CPU: the running sum of
    torch.profiler's allocation records, as bench/memory_probe.py reads it (its counterpart on a CPU).
    """
    resident = held_bytes(own)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        run()
        torch.cuda.synchronize(device)
        return resident + max(torch.cuda.max_memory_allocated(device) - base, 0)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    results = prof.profiler.kineto_results if prof.profiler else None
    records = sorted(
        (e.start_ns(), e.nbytes()) for e in (results.events() if results else []) if e.name() == "[memory]"
    )
    held = rise = 0
    for _t, delta in records:
        held += delta
        rise = max(rise, held)
    return resident + rise
