"""Where a whole training step's time goes on a CUDA GPU, kernel class by kernel class (run on the GPU host).

The reference fits fp16's steps a fixed device time per conv call (0.18 ms on our H100, 0.11 ms on our H200; fp32's
0.01-0.03) that the H200's isolated fp16 and bf16 convs do not show (docs/MODELS.md): this finds what it is. For each
CNN, configuration and batch size it times the step as bench/gpu_settings.py does (own thread, synchronize per
block), then profiles PROFILED_STEPS more under torch.profiler (CPU and CUDA activities) and writes, per step: the
device's busy time (the union of its kernels' and copies' intervals) and its idle time within the profiled steps,
the kernels launched and the aten calls the host made, time and count per kernel class (KERNEL_CLASSES), the
host's time in synchronizing calls (GradScaler's inf check reads a flag back), and the kernels with the most time.
One JSON line per step, written as it is measured; the first line is the environment. An out-of-memory step is a
row with its error.

    python3 bench/gpu_step_profile.py --out profile.jsonl [--cnns resnet50,shufflenet_v2_x1_0] [--batches 32,128]
    python3 bench/gpu_step_profile.py --dry-run     # CPU, one tiny CNN and batch: checks the script itself
"""

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script on the GPU host, from any folder
from bench.gpu_settings import (  # noqa: E402
    CROSSED,
    arguments,
    measure,
    on_device,
    own_thread,
    refuse_unknown,
    step_fn,
    write_rows,
)

CNNS = ("resnet50", "shufflenet_v2_x1_0", "vgg16", "squeezenet1_1", "resnet18")
# Both 16-bit types under both optimizers: fp16 (with its GradScaler) against bf16, the optimizer held.
CONFIGS = ("sgd+momentum/amp_bf16", *CROSSED, "adamw+wd/amp_fp16")
PROFILED_STEPS = 3
# (class, substrings of a lower-cased kernel name), the first match wins: layout transposes before convs (cuDNN
# names both after the conv), convs before GEMMs (implicit-GEMM conv kernels say gemm too).
KERNEL_CLASSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("transpose", ("nchwtonhwc", "nhwctonchw", "transpose")),
    (
        "conv",
        (
            "convolve",
            "conv2d",
            "convolution",
            "dgrad",
            "wgrad",
            "fprop",
            "implicit",
            "winograd",
            "depthwise",
            "xmma_cudnn",
        ),
    ),
    ("gemm", ("gemm", "cublas", "cutlass")),
    ("batch_norm", ("batch_norm", "batchnorm", "bn_fw", "bn_bw", "welford")),
    ("optimizer", ("multi_tensor", "foreach", "adam", "non_finite", "unscale")),
    ("pool", ("pool",)),
    ("copy_cast", ("copy", "memcpy", "memset", "cast", "convert")),
    ("reduction", ("reduce", "softmax", "nll", "cross_entropy", "sum_")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "cat", "relu", "mul", "add")),
)
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cudaMemcpyAsync")
LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")
TOP = 12


def kernel_class(name: str) -> str:
    """The KERNEL_CLASSES class of a kernel's name ("other" where none matches)."""
    low = name.lower()
    for label, parts in KERNEL_CLASSES:
        if any(p in low for p in parts):
            return label
    return "other"


def busy_us(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) intervals: time something ran, overlaps counted once."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def summarise(events: list[Any], steps: int, wall_ms: float) -> dict[str, Any]:
    """Per-step figures from a profile's events (torch.autograd.profiler_util.FunctionEvent-like: name, device_type,
    time_range.start/end in us) over `steps` steps that took wall_ms in all."""
    from torch.autograd import DeviceType

    device = [e for e in events if e.device_type == DeviceType.CUDA]
    by_class: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    by_name: dict[str, float] = defaultdict(float)
    intervals = []
    for e in device:
        start, end = e.time_range.start, e.time_range.end
        intervals.append((start, end))
        entry = by_class[kernel_class(e.name)]
        entry[0] += (end - start) / 1e3
        entry[1] += 1
        by_name[e.name] += (end - start) / 1e3
    host = [e for e in events if e.device_type != DeviceType.CUDA]
    aten = sum(1 for e in host if e.name.startswith("aten::"))
    sync = {name: sum(e.time_range.end - e.time_range.start for e in host if e.name == name) / 1e3 / steps
            for name in SYNC_CALLS}  # fmt: skip
    busy = busy_us(intervals) / 1e3 / steps
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:TOP]
    return {
        "profiled_step_ms": wall_ms / steps,
        "device_busy_ms": busy,
        "device_idle_ms": max(0.0, wall_ms / steps - busy),
        "kernels": len(device) / steps,
        "launches": sum(1 for e in host if e.name in LAUNCH_CALLS) / steps,
        "aten_ops": aten / steps,  # every aten call the host made, nested ones too
        "classes": {k: {"ms": v[0] / steps, "count": v[1] / steps} for k, v in sorted(by_class.items())},
        "sync_ms": {k: v for k, v in sync.items() if v},
        "top": [{"name": n[:160], "ms": ms / steps} for n, ms in top],
    }


def profiled(run: Any, sync: Any, steps: int) -> dict[str, Any]:
    """steps runs of run() under torch.profiler after a warm-up step, summarised per step."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    run()
    sync()
    with profile(activities=activities) as prof:
        started = time.perf_counter()
        for _ in range(steps):
            run()
        sync()
        wall_ms = (time.perf_counter() - started) * 1e3
    return summarise(list(prof.events()), steps, wall_ms)


def one(name: str, config: str, batch: int, image: int, a: argparse.Namespace) -> dict[str, Any]:
    """One CNN, configuration and batch size: its timed step and its profile, or the error that stopped it."""
    import torch

    torch.backends.cudnn.benchmark = False  # PyTorch's default, the setting the reference answers for
    row: dict[str, Any] = {"cnn": name, "config": config, "image": image, "batch": batch}

    def timed_and_profiled(model: Any, x: Any, y: Any, sync: Callable[[], None]) -> dict[str, Any]:
        def both() -> tuple[tuple[float, list[float]], dict[str, Any]]:
            run = step_fn(model, config, x, y, torch)
            return measure(run, sync, a.blocks, a.per_block), profiled(run, sync, a.steps)

        (ms, blocks), prof = own_thread(both)
        return {"ms": ms, "blocks_ms": blocks, **prof}

    return on_device(row, name, batch, image, False, timed_and_profiled)


def main(argv: list[str] | None = None) -> int:
    """Time, profile and write the rows."""
    p = arguments(__doc__.splitlines()[0], "step_profile.jsonl", CNNS, CONFIGS)
    p.add_argument("--steps", type=int, default=PROFILED_STEPS, help="profiled steps per row")
    p.add_argument("--dry-run", action="store_true", help="CPU check: squeezenet1_1, batch 2, 64 px, one step")
    a = p.parse_args(argv)
    refuse_unknown(p, a.configs, ("sgd/fp32", *CONFIGS))
    if a.dry_run:
        a.cnns, a.batches, a.image, a.blocks, a.per_block, a.steps = "squeezenet1_1", "2", 64, 1, 1, 1
    write_rows(a, lambda name, config, batch: [one(name, config, batch, a.image, a)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
