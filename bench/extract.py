"""Extraction time of every torchvision classification model, against a naive baseline.

Ours: build the model on the meta device and record every aten op of one training forward
pass and the loss (conv signatures and workload). Baseline, in the same run: build the model
with real (random) weights on the CPU and run one real forward pass of batch 1 with hooks on
nn.Conv2d modules, which is what reading layers costs without the meta device.

    .venv/bin/python bench/extract.py            # every model, with the baseline
    .venv/bin/python bench/extract.py --no-baseline
"""

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.perf_doc import write_section  # noqa: E402
from shared.cnn import zoo as cnn_zoo  # noqa: E402


def size_for(name: str) -> int:
    """The usual training input size."""
    return 299 if name == "inception_v3" else 224


def ours(name: str) -> tuple[float, int]:
    """Seconds to build on meta and read one model (caches bypassed), and its conv count."""
    started = time.perf_counter()
    layers = cnn_zoo.conv_layers_of(cnn_zoo.build(name), size_for(name), 1000)
    return time.perf_counter() - started, layers.total


def baseline(name: str) -> tuple[float, int]:
    """Seconds to build with real weights and run a hooked CPU forward; conv modules called."""
    started = time.perf_counter()
    model = cnn_zoo.build(name, device="cpu").eval()
    calls = 0

    def hook(*_args: object) -> None:
        nonlocal calls
        calls += 1

    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d):
            m.register_forward_hook(hook)
    with torch.no_grad():
        model(torch.randn(1, 3, size_for(name), size_for(name)))
    return time.perf_counter() - started, calls


def deep_network(depth: int) -> torch.nn.Module:
    """A plain network of `depth` 3x3 convs with batch norm and ReLU, built on meta."""
    with torch.device("meta"):
        blocks: list[torch.nn.Module] = [torch.nn.Conv2d(3, 16, 3, padding=1)]
        for _ in range(depth - 1):
            blocks += [torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3, padding=1)]
        return torch.nn.Sequential(*blocks, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10))


def main() -> None:
    """Run, print, write docs/PERFORMANCE.md."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-baseline", action="store_true")
    args = parser.parse_args()
    cnn_zoo.conv_layers("resnet18", 64)  # one-time start-up of PyTorch's meta kernels, not a model's cost
    rows, ratios = [], []
    for name in cnn_zoo.builtin_names():
        t_ours, convs = ours(name)
        line = f"| {name} | {size_for(name)} | {convs} | {t_ours * 1000:.0f} |"
        if not args.no_baseline:
            t_base, hooked = baseline(name)
            ratios.append(t_base / t_ours)
            line += f" {t_base * 1000:.0f} | {t_base / t_ours:.1f}x |"
        rows.append(line)
        print(line, flush=True)
    started = time.perf_counter()
    deep = cnn_zoo.conv_layers_of(deep_network(1000), 32, 10)
    t_deep = time.perf_counter() - started
    print(f"1000-conv network: {deep.total} convs in {t_deep:.2f} s")
    times = [float(r.split("|")[4]) for r in rows]
    head = "| model | px | convs | ours (ms) |" + (" baseline (ms) | baseline / ours |" if ratios else "")
    sep = "|---|---|---|---|" + ("---|---|" if ratios else "")
    summary = (
        f"{len(rows)} models; ours: median {statistics.median(times):.0f} ms, max {max(times):.0f} ms"
        + (f"; baseline / ours: median {statistics.median(ratios):.1f}x, min {min(ratios):.1f}x" if ratios else "")
        + f". A plain 1000-conv network (32 px): {t_deep:.2f} s."
    )
    print(summary)
    cmd = "`.venv/bin/python bench/extract.py" + ("`" if ratios else " --no-baseline`")
    body = (
        f"Command: {cmd} on {platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}.\n\n"
        "Ours reads conv signatures and the workload of one training forward pass and the loss on the meta "
        "device; the baseline builds the model with real weights on the CPU and runs one hooked forward of "
        "batch 1 (what reading layers costs without the meta device).\n\n"
        f"{summary}\n\n{head}\n{sep}\n" + "\n".join(rows)
    )
    write_section("Extraction (bench/extract.py)", body)


if __name__ == "__main__":
    main()
