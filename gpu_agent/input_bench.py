"""The input pipeline's CPU cost on this host: JPEGs decoded and augmented as DataLoader workers do it.

The agent makes its own images (no dataset on the host): ImageNet's most common size, 500x375, with smooth
structure and enough grain that at quality 90 they come to ~107 KB, about ImageNet's mean JPEG (~115 KB). Each is
decoded with PIL and put through torchvision's standard ImageNet training transforms (RandomResizedCrop 224,
RandomHorizontalFlip, ToTensor, Normalize) in one thread, as a DataLoader worker runs them. Two figures: one worker
alone (decode and augment apart), and every CPU busy with a worker of its own (what an input-bound job sees), the
median of rounds the workers start together.
"""

import io
import multiprocessing as mp
import os
import re
import statistics
import time
from collections.abc import Callable
from multiprocessing.synchronize import Barrier
from typing import Any

import numpy as np
import torch
from PIL import Image

from gpu_agent import environment
from shared.measurements.inputs import PIPELINE, InputRate

WIDTH, HEIGHT, QUALITY, CROP = 500, 375, 90, 224
IMAGES = 32
GRAIN = 20  # std of the grain: ~107 KB a JPEG, where 6 gave 60 KB and decoded 30% faster
ROUNDS = 5
# The all-CPU phase: rounds that start together at a barrier; the rate is the median round's, so a burst of
# another process on the host during one or two rounds moves nothing (one figure over a 0.25 s window did).
ALL_ROUNDS = 9
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# The machine type name the shipped rate carries: it is no machine type of any installation.
SHIPPED = "shipped"


def make_jpegs(n: int = IMAGES, seed: int = 0) -> list[bytes]:
    """n photograph-like JPEGs: coarse random colour fields upscaled smoothly, with fine grain."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        coarse = Image.fromarray(rng.integers(0, 256, (HEIGHT // 16, WIDTH // 16, 3), dtype=np.uint8))
        smooth = np.asarray(coarse.resize((WIDTH, HEIGHT), Image.Resampling.BICUBIC), dtype=np.float32)
        grain = rng.normal(0, GRAIN, smooth.shape)
        buf = io.BytesIO()
        Image.fromarray(np.clip(smooth + grain, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=QUALITY)
        out.append(buf.getvalue())
    return out


def _augment() -> Callable[[Image.Image], torch.Tensor]:
    from torchvision import transforms  # here, not at the agent's start (torchvision pulls torch._dynamo, ~1.3 s)

    return transforms.Compose([  # type: ignore[no-any-return]
        transforms.RandomResizedCrop(CROP), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
        transforms.Normalize(MEAN, STD),
    ])  # fmt: skip


def _decode(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data)).convert("RGB")  # convert() forces the decode


def _one_pass(jpegs: list[bytes], augment: Callable[[Image.Image], torch.Tensor]) -> tuple[float, float]:
    """Seconds spent decoding and augmenting every image once."""
    decode_s = augment_s = 0.0
    for data in jpegs:
        t0 = time.perf_counter()
        image = _decode(data)
        t1 = time.perf_counter()
        augment(image)
        decode_s, augment_s = decode_s + t1 - t0, augment_s + time.perf_counter() - t1
    return decode_s, augment_s


def _worker(jpegs: list[bytes], rounds: int, barrier: Barrier, results: Any) -> None:
    torch.set_num_threads(1)  # as torch sets it in a DataLoader worker
    augment = _augment()
    _one_pass(jpegs, augment)  # warm-up: imports, allocator, caches
    spans = []
    for _ in range(rounds):
        barrier.wait()
        start = time.perf_counter()
        _one_pass(jpegs, augment)
        spans.append((start, time.perf_counter()))
    results.put(spans)


def round_rates(spans: list[list[tuple[float, float]]], images: int) -> list[float]:
    """Images per second of each synchronised round: every worker's images over the round's first start to its
    last end (spans: per worker, per round, (start, end) on one clock)."""
    rates = []
    for r in range(min(len(s) for s in spans)):
        wall = max(s[r][1] for s in spans) - min(s[r][0] for s in spans)
        rates.append(images * len(spans) / wall)
    return rates


def host_cpus() -> int:
    """The CPUs this process may run on (a container's or taskset's limit, not the machine's)."""
    return len(os.sched_getaffinity(0))


def threads_per_core() -> int | None:
    """Hardware threads per core among the CPUs this process may use (2 with SMT), or None where Linux does not say."""
    cores = set()
    cpus = os.sched_getaffinity(0)
    for cpu in cpus:
        topology = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            with open(f"{topology}/core_id") as a, open(f"{topology}/physical_package_id") as b:
                cores.add((a.read().strip(), b.read().strip()))
        except OSError:
            return None
    return max(1, round(len(cpus) / len(cores))) if cores else None


def cpu_ghz(model: str) -> float | None:
    """The nominal clock a CPU's model name states ("... @ 2.50GHz"), or None."""
    found = re.search(r"@\s*([0-9.]+)\s*GHz", model)
    return float(found.group(1)) if found else None


def measure(
    *, machine_type: str, environment_id: int, images: int = IMAGES, rounds: int = ROUNDS,
    stop: Callable[[], bool] = lambda: False,
) -> InputRate:  # fmt: skip
    """Measure decode and augment per image in one worker, then images per second with a worker on every CPU."""
    jpegs = make_jpegs(images)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        augment = _augment()
        _one_pass(jpegs, augment)  # warm-up
        passes = [_one_pass(jpegs, augment) for _ in range(rounds) if not stop()]
    finally:
        torch.set_num_threads(threads)
    decode = statistics.median(p[0] for p in passes) / images * 1000
    aug = statistics.median(p[1] for p in passes) / images * 1000
    cpus = host_cpus()
    # fork, as DataLoader workers start on Linux: the images and modules are shared, nothing is re-imported.
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(cpus), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(jpegs, ALL_ROUNDS, barrier, results), daemon=True)
             for _ in range(cpus)]  # fmt: skip
    for p in procs:
        p.start()
    spans = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    rates = round_rates(spans, images)
    return InputRate(
        machine_type=machine_type, environment_id=environment_id, pipeline=PIPELINE, host_cpus=cpus,
        decode_ms=decode, augment_ms=aug, images_per_s_all=statistics.median(rates),
        jpeg_kb=sum(map(len, jpegs)) / len(jpegs) / 1000,
        stats={"images": images, "rounds": len(passes), "solo_images_per_s": 1000 / (decode + aug),
               "decode_ms_rounds": [p[0] / images * 1000 for p in passes],
               "augment_ms_rounds": [p[1] / images * 1000 for p in passes], "workers": cpus,
               "all_images_per_s_rounds": [round(r, 2) for r in rates],
               "pillow": Image.__version__, "threads_per_core": threads_per_core(),
               "cpu_ghz": cpu_ghz(environment.cpu_model())},
    )  # fmt: skip


def ship(path: str, runs: int = 3) -> dict[str, Any]:
    """Measure this host `runs` times and write the median run, with its environment, as the rate Traincast ships
    for installations where no machine type has measured its own (prediction/input_pipeline.py)."""
    import json
    import platform
    from datetime import UTC, datetime

    import torchvision

    measured = sorted((measure(machine_type=SHIPPED, environment_id=0) for _ in range(runs)),
                      key=lambda r: r.images_per_s_all)  # fmt: skip
    median = measured[len(measured) // 2]
    doc = {
        "how": f"python -m gpu_agent.input_bench --ship {path} ({runs} runs of the agent's input bench; the median)",
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "environment": {
            "cpu": environment.cpu_model(), "host_cpus": median.host_cpus,
            "threads_per_core": median.stats.get("threads_per_core"), "python": platform.python_version(),
            "torch": torch.__version__, "torchvision": torchvision.__version__, "pillow": Image.__version__,
            "os": platform.platform(),
        },
        "runs_images_per_s_all": [round(r.images_per_s_all, 2) for r in measured],
        "rate": json.loads(median.model_dump_json(exclude={"measured_at"})),
    }  # fmt: skip
    with open(path, "w") as f:
        f.write(json.dumps(doc, indent=1) + "\n")
    return doc


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "--ship":
        sys.exit("usage: python -m gpu_agent.input_bench --ship data/reference/input_rate.json")
    print(ship(sys.argv[2])["runs_images_per_s_all"])
