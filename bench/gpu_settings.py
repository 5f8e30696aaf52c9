"""Whole training steps on a CUDA GPU in NCHW and NHWC, with cudnn.benchmark off and on (run on the GPU host).

Times the CNNs of data/reference/h100 the way that folder's README says (torchvision model, synthetic batch on the
GPU, 2 warm-up steps, 3 blocks of 4 steps with one synchronize per block, the median block's mean step) in its
three configurations, at each batch size, in the four settings (channels_last x cudnn.benchmark). The loops run
setting-innermost, so a run cut short still holds complete comparisons for the CNNs it reached. One JSON line
per step, written and flushed as it is measured; the first line is the environment. An out-of-memory step is
recorded as data ("error"), not skipped. Each step is measured in a thread of its own that also runs its backward
(own_thread): PyTorch caches cuDNN's chosen plan per shape and thread, whatever cudnn.benchmark says, so before
that a benchmark-on step ran the plans its benchmark-off neighbour of the same shapes had cached (the rows of
data/reference/h100/steps_settings.jsonl, measured so, say so in that folder's README).

    python3 bench/gpu_settings.py --out steps_settings.jsonl [--cnns resnet50,vgg16] [--batches 32,128]
    python3 bench/gpu_settings.py --dry-run     # CPU, one tiny CNN and batch: checks the script itself
    # what separates fp16 from AdamW (docs/MODELS.md): the optimizer and precision crossed, the default setting only
    python3 bench/gpu_settings.py --configs sgd+momentum/amp_fp16,adamw+wd/amp_bf16 --default-only \
        --batches 16,32,64,128,256 --out steps_crossed.jsonl
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

CNNS = (
    "resnet50", "vgg16", "densenet121", "mobilenet_v2", "efficientnet_b0", "resnet18", "googlenet",
    "shufflenet_v2_x1_0", "mnasnet1_0", "squeezenet1_1", "vgg11", "alexnet",
)  # fmt: skip
CONFIGS = ("sgd/fp32", "sgd+momentum/amp_bf16", "adamw+wd/amp_fp16")
# The optimizer and the precision swapped between our two autocast configurations: they separate what fp16 (with its
# GradScaler) costs from what AdamW does, which the three above confound (docs/MODELS.md).
CROSSED = ("sgd+momentum/amp_fp16", "adamw+wd/amp_bf16")
SETTINGS = ((False, False), (True, False), (False, True), (True, True))  # (channels_last, cudnn_benchmark)


def build(name: str, torch: Any, torchvision: Any) -> Any:
    """The torchvision model, untrained, as the H100 steps built it."""
    kwargs: dict[str, Any] = {"weights": None}
    if name in ("googlenet", "inception_v3"):
        kwargs["init_weights"] = False
    return torchvision.models.get_model(name, **kwargs)


def step_fn(model: Any, config: str, x: Any, y: Any, torch: Any) -> Any:
    """One whole training iteration of config as a callable (zero_grad, forward, loss, backward, step)."""
    if config == "sgd/fp32":
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        dtype, scaler = None, None
    else:
        optimizer, precision = config.split("/")
        if optimizer == "sgd+momentum":
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        # fp16 autocast always with a GradScaler (what every AMP fp16 recipe does); bf16 without one. Its scale at 1,
        # never growing: at the default 2**16 fresh weights overflow and the first steps skip the optimizer, which
        # training past its first steps does not (gpu_agent/step_bench.py).
        fp16 = precision == "amp_fp16"
        dtype = torch.float16 if fp16 else torch.bfloat16
        scaler = torch.amp.GradScaler(x.device.type, init_scale=1.0, growth_interval=2**30) if fp16 else None
    loss_fn = torch.nn.CrossEntropyLoss()

    def run() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(x.device.type, dtype=dtype, enabled=dtype is not None):
            out = model(x)
            out = out.logits if hasattr(out, "logits") else out
            loss = loss_fn(out, y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

    return run


def measure(run: Any, sync: Any, blocks: int, per_block: int) -> tuple[float, list[float]]:
    """Median over blocks of the mean step (ms), after two warm-up steps."""
    for _ in range(2):
        run()
    sync()
    block_ms = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(per_block):
            run()
        sync()
        block_ms.append((time.perf_counter() - t0) * 1e3 / per_block)
    return statistics.median(block_ms), block_ms


def own_thread(run: Any) -> Any:
    """run() in a new thread that ends with it, backward on that thread too (not autograd's long-lived device thread):
    a fresh cache of cuDNN's chosen plans, as a training process starts with."""
    import torch

    def isolated() -> Any:
        with torch.autograd.set_multithreading_enabled(False):
            return run()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(isolated).result()


def on_device(
    row: dict[str, Any],
    name: str,
    batch: int,
    image: int,
    nhwc: bool,
    run: Callable[[Any, Any, Any, Callable[[], None]], dict[str, Any]],
) -> dict[str, Any]:
    """row with run(model, images, labels, sync)'s figures for a fresh CNN and batch on the device (channels_last if
    nhwc), or with the error that stopped it (out of memory, a shape the CNN cannot take: data too); the step's
    tensors freed before the cache is emptied, so the next row starts clean."""
    import torch
    import torchvision

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    fmt = torch.channels_last if nhwc else torch.contiguous_format
    model: Any = None
    x: Any = None
    y: Any = None
    try:
        torch.manual_seed(0)
        model = build(name, torch, torchvision).to(device).train().to(memory_format=fmt)
        x = torch.randn(batch, 3, image, image, device=device).contiguous(memory_format=fmt)
        y = torch.randint(0, 1000, (batch,), device=device)
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        row.update(run(model, x, y, sync))
    except torch.OutOfMemoryError:
        row["error"] = "out of memory"
    except RuntimeError as exc:
        row["error"] = str(exc).splitlines()[0][:200]
    finally:
        model = x = y = None
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return row


def one(name: str, config: str, batch: int, image: int, nhwc: bool, bench: bool, a: argparse.Namespace) -> dict:
    """One measured (or failed) step as a JSON-able row."""
    import torch

    torch.backends.cudnn.benchmark = bench
    row: dict[str, Any] = {"cnn": name, "config": config, "image": image, "batch": batch,
                           "channels_last": nhwc, "cudnn_benchmark": bench}  # fmt: skip

    def timed(model: Any, x: Any, y: Any, sync: Callable[[], None]) -> dict[str, Any]:
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        ms, blocks = own_thread(lambda: measure(step_fn(model, config, x, y, torch), sync, a.blocks, a.per_block))
        figures: dict[str, Any] = {"ms": ms, "blocks_ms": blocks}
        if cuda:
            figures["peak_alloc_bytes"] = torch.cuda.max_memory_allocated()
        return figures

    return on_device(row, name, batch, image, nhwc, timed)


def environment() -> dict:
    """The software and GPU the steps ran on."""
    import torch
    import torchvision

    meta: dict[str, Any] = {"torch": torch.__version__, "torchvision": torchvision.__version__,
                            "python": platform.python_version(), "cudnn_tf32": torch.backends.cudnn.allow_tf32,
                            "matmul_tf32": torch.backends.cuda.matmul.allow_tf32}  # fmt: skip
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        meta.update(gpu=p.name, sms=p.multi_processor_count, memory_bytes=p.total_memory,
                    cudnn=torch.backends.cudnn.version(), cuda=torch.version.cuda)  # fmt: skip
        meta.update(_smi())
    else:
        meta["gpu"] = None
    meta["cpu_cores"] = os.cpu_count()
    return {"meta": meta, "date": time.strftime("%Y-%m-%d")}


def _smi() -> dict[str, Any]:
    """The driver, power limit and top SM clock nvidia-smi reports (nothing where it cannot be run)."""
    query = "driver_version,power.limit,clocks.max.sm"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout  # fmt: skip
        driver, power, clock = (v.strip() for v in out.splitlines()[0].split(","))
        return {"driver": driver, "power_limit_w": float(power), "sm_clock_max_mhz": int(float(clock))}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {}


def arguments(description: str, out: str, cnns: tuple[str, ...], configs: tuple[str, ...]) -> argparse.ArgumentParser:
    """The options of both step scripts for the GPU host (this one and bench/gpu_step_profile.py)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", default=out)
    p.add_argument("--cnns", default=",".join(cnns))
    p.add_argument("--configs", default=",".join(configs))
    p.add_argument("--batches", default="32,128")
    p.add_argument("--image", type=int, default=224)
    p.add_argument("--blocks", type=int, default=3)
    p.add_argument("--per-block", type=int, default=4)
    p.add_argument("--deadline-s", type=float, default=0.0, help="stop starting new CNNs after this many seconds")
    return p


def refuse_unknown(p: argparse.ArgumentParser, configs: str, known: tuple[str, ...]) -> None:
    """Stop at once, naming the known configurations, if any of configs is not one."""
    unknown = sorted(set(configs.split(",")) - set(known))
    if unknown:
        p.error(f"unknown configuration(s) {', '.join(unknown)}; known: {', '.join(known)}")


def write_rows(a: argparse.Namespace, rows: Callable[[str, str, int], Iterable[dict]]) -> None:
    """The environment's line, then rows(cnn, configuration, batch) for each, every row flushed as it is measured;
    no new CNN is started past --deadline-s."""
    t0 = time.monotonic()
    with open(a.out, "w") as f:
        f.write(json.dumps(environment()) + "\n")
        for name in a.cnns.split(","):
            if a.deadline_s and time.monotonic() - t0 > a.deadline_s:
                print(f"deadline: stopped before {name}", file=sys.stderr)
                break
            for config in a.configs.split(","):
                for batch in (int(b) for b in a.batches.split(",")):
                    for row in rows(name, config, batch):
                        f.write(json.dumps(row) + "\n")
                        f.flush()
            print(f"{name} done at {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Measure and write the rows."""
    p = arguments(__doc__.splitlines()[0], "steps_settings.jsonl", CNNS, CONFIGS)
    p.add_argument("--dry-run", action="store_true", help="CPU check: squeezenet1_1, batch 2, 64 px, one block")
    p.add_argument("--default-only", action="store_true", help="only PyTorch's default setting (NCHW, benchmark off)")
    a = p.parse_args(argv)
    refuse_unknown(p, a.configs, (*CONFIGS, *CROSSED))
    if a.dry_run:
        a.cnns, a.batches, a.image, a.blocks, a.per_block = "squeezenet1_1", "2", 64, 1, 1
    settings = SETTINGS[:1] if a.default_only else SETTINGS
    write_rows(a, lambda name, config, batch: (one(name, config, batch, a.image, nhwc, bench, a)
                                               for nhwc, bench in settings))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
