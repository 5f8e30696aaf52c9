"""Memory error of the training-step peak model (shared/cnn/step_memory.py) against measured peaks.

Two sets of measured peaks:
  cpu   whole training steps of eight torchvision CNNs on this CPU, each point in a fresh process
        (bench/memory_probe.py: the most bytes torch's CPU allocator held at once, from
        torch.profiler's allocation records; the counterpart of torch.cuda.max_memory_allocated)
  V100  CDECatapult's VGG-16 memory column, batch 1..64, SGD and Adam (TensorFlow 1.10)
The model's CPU constant (bytes kept per byte autograd saves) is fitted leaving each CNN out in
turn and its error reported on the CNN left out; the GPU terms are fitted on the SGD file and
reported on the Adam file. Baselines: parameters × 4 bytes, and the agent's old guard estimate
(gpu_agent/memory.py step_bytes before this model).

    .venv/bin/python bench/memory.py            # ~5 min on a 2-core CPU; writes docs/PERFORMANCE.md
    .venv/bin/python bench/memory.py --quick    # three CNNs, to try it
    .venv/bin/python bench/memory.py --agent-peaks [DATABASE_URL]   # only: the model against the peaks agents
                                                # stored with their steps (bench/memory_agent.py); its own section
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.memory_public import (  # noqa: E402
    ape,
    gpu_report,
    lambda_report,
    old_guard,
    saved_over_activation,
    workload,
)
from bench.perf_doc import write_section  # noqa: E402
from shared.cnn import step_memory  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CNNS = (
    "resnet18", "resnet50", "vgg11", "mobilenet_v2", "densenet121", "alexnet", "efficientnet_b0", "squeezenet1_1",
)  # fmt: skip
# (image size, batch size, optimizer, precision) measured for every CNN.
POINTS = (
    (64, 4, "sgd", "fp32"), (128, 16, "sgd", "fp32"), (96, 16, "sgd_momentum", "fp32"), (128, 8, "adamw", "fp32"),
    (128, 16, "sgd", "amp_bf16"),
)  # fmt: skip
QUICK_CNNS = ("resnet18", "alexnet", "mobilenet_v2")


def measure(cnns: tuple[str, ...], parallel: int, cache: Path | None) -> list[dict[str, Any]]:
    """Every point of every CNN, each in a fresh process (points already in the cache file are reused)."""
    jobs = [(cnn, *p) for cnn in cnns for p in POINTS]
    stored = json.loads(cache.read_text()) if cache and cache.exists() else []
    known = {_key(r): r for r in stored}

    def run(job: tuple[Any, ...]) -> dict[str, Any]:
        cmd = [sys.executable, str(ROOT / "bench" / "memory_probe.py"), *map(str, job)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        return dict(json.loads(out.strip().splitlines()[-1]))

    with ThreadPoolExecutor(parallel) as pool:
        out = list(pool.map(lambda job: known.get(job) or run(job), jobs))
    if cache:
        known.update((_key(r), r) for r in out)  # kept with the points other runs measured
        cache.write_text(json.dumps(list(known.values()), indent=1))
    return out


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["cnn"], r["image_size"], r["batch_size"], r["optimizer"], r["precision"])


def predict(r: dict[str, Any], saved_scale: float, amp_scale: float, *, fallback: bool = False) -> float:
    """The model's CPU peak for a measured point, with the two activation constants given."""
    work = workload(r["cnn"], r["image_size"])
    if fallback:  # as a CNN read without autograd (ONNX, layer list) is modelled
        work = work | {"saved_bytes": None}
    step_memory.SAVED_SCALE, step_memory.AMP_ACTIVATION_SCALE = saved_scale, amp_scale
    peak = step_memory.step_peak(work, r["batch_size"], optimizer=r["optimizer"], precision=r["precision"], gpu=False)
    assert peak is not None
    return peak.total


def fit_1d(points: list[dict[str, Any]], error: Any, lo: float, hi: float) -> float:
    """The constant in [lo, hi] (steps of 0.01) with the least mean error over the points."""
    grid = [lo + i * 0.01 for i in range(int(round((hi - lo) / 0.01)) + 1)]
    return min(grid, key=lambda c: statistics.fmean(error(r, c) for r in points))


def fit(points: list[dict[str, Any]]) -> tuple[float, float]:
    """SAVED_SCALE on the fp32 points, then AMP_ACTIVATION_SCALE on the AMP ones (given the first)."""
    fp32 = [r for r in points if r["precision"] == "fp32"]
    amp = [r for r in points if r["precision"] != "fp32"]
    saved = fit_1d(fp32, lambda r, c: ape(predict(r, c, 0.5), r["peak_bytes"]), 0.3, 2.0)
    amp_scale = fit_1d(amp, lambda r, c: ape(predict(r, saved, c), r["peak_bytes"]), 0.2, 1.0) if amp else 0.5
    return saved, amp_scale


def cpu_report(rows: list[dict[str, Any]]) -> tuple[list[str], dict[str, float]]:
    """Leave-one-CNN-out error per CNN beside the baselines; the constants fitted on all CNNs."""
    cnns = list(dict.fromkeys(r["cnn"] for r in rows))
    lines = [
        "| CNN | points | model, held out | model, op outputs × constant | parameters × 4 | old guard estimate |",
        "|---|---|---|---|---|---|",
    ]
    errs: dict[str, list[float]] = {"model": [], "fallback": [], "params": [], "old": []}
    for cnn in cnns:
        train = [r for r in rows if r["cnn"] != cnn]
        held = [r for r in rows if r["cnn"] == cnn]
        saved, amp = fit(train)
        ratio = statistics.median(saved_over_activation(r["cnn"], r["image_size"]) for r in train)
        step_memory.SAVED_PER_OUTPUT = ratio
        e = {
            "model": [ape(predict(r, saved, amp), r["peak_bytes"]) for r in held],
            "fallback": [ape(predict(r, saved, amp, fallback=True), r["peak_bytes"]) for r in held],
            "params": [ape(4.0 * r["parameters"], r["peak_bytes"]) for r in held],
            "old": [ape(old_guard(r), r["peak_bytes"]) for r in held],
        }
        for k, v in e.items():
            errs[k].extend(v)
        cells = " | ".join(f"{statistics.fmean(e[k]):.1f}%" for k in ("model", "fallback", "params", "old"))
        lines.append(f"| {cnn} | {len(held)} | {cells} |")
    cells = " | ".join(f"**{statistics.fmean(errs[k]):.1f}%**" for k in ("model", "fallback", "params", "old"))
    lines.append(f"| all (MAPE) | {len(rows)} | {cells} |")
    saved, amp = fit(rows)
    ratios = [saved_over_activation(r["cnn"], r["image_size"]) for r in rows]
    constants = {
        "SAVED_SCALE": saved,
        "AMP_ACTIVATION_SCALE": amp,
        "SAVED_PER_OUTPUT": round(statistics.median(ratios), 2),
        "max_ape": max(errs["model"]),
        "mape": statistics.fmean(errs["model"]),
    }
    step_memory.SAVED_SCALE, step_memory.AMP_ACTIVATION_SCALE = saved, amp  # what the GPU part builds on
    step_memory.SAVED_PER_OUTPUT = constants["SAVED_PER_OUTPUT"]
    return lines, constants


def main() -> None:
    """Measure, fit, print and write the Memory section of docs/PERFORMANCE.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three CNNs; nothing written to the docs")
    parser.add_argument("--parallel", type=int, default=2, help="probes at once (each a fresh process)")
    parser.add_argument("--cache", type=Path, help="JSON file of measured points to reuse and extend")
    parser.add_argument(
        "--agent-peaks", nargs="?", const="", metavar="DATABASE_URL",
        help="only compare the model with the step peaks agents stored (default: DATABASE_URL's database)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.agent_peaks is not None:
        agent_peaks(args.agent_peaks or None)
        return
    started = time.monotonic()
    rows = measure(QUICK_CNNS if args.quick else CNNS, args.parallel, args.cache)
    cpu_lines, cpu = cpu_report(rows)
    gpu_lines, gpu = gpu_report()
    gpu_lines += ["", *lambda_report()]
    print("\n".join(cpu_lines), "\n", cpu, "\n\n" + "\n".join(gpu_lines), "\n", gpu, sep="")
    print(f"{time.monotonic() - started:.0f} s")
    if args.quick:
        return
    took = f"{(time.monotonic() - started) / 60:.0f} min on the 2-core CPU"
    if args.cache:  # say so: a run that reused points did not take the measuring time
        took = f"with `--cache {args.cache}`, reusing points an earlier run measured; measuring all takes ~7 min"
    write_section("Memory", _doc(rows, cpu_lines, cpu, gpu_lines, gpu, took))


def agent_peaks(database_url: str | None) -> None:
    """The model against the step peaks stored by agents; printed and written to its own section."""
    from bench import memory_agent

    lines, summary = memory_agent.report(memory_agent.stored_peaks(database_url))
    print("\n".join(lines), "\n", summary, sep="")
    if not summary["steps"]:
        print("no stored step peaks: calibrate a machine type with an agent of this version first")
        return
    write_section(
        "Memory: peaks the agent stored",
        f"""
`.venv/bin/python bench/memory.py --agent-peaks` over a database the agent calibrated (the one the Accuracy
section's run filled). The agent stores each whole step's peak with its timing (`step_measurements.peak_memory_bytes`,
gpu_agent/step_bench.py): the allocator's peak of an untimed step with the optimizer's state in place,
counting the weights, optimizer state and its own batch (`torch.cuda.max_memory_allocated` after
`reset_peak_memory_stats` on a GPU; on a CPU torch.profiler's allocation records, as `bench/memory_probe.py`
reads them). The model (`shared/cnn/step_memory.py`, its `tensors_only` peak) was fitted on other measurements (the
section above) and is not refitted here.

{chr(10).join(lines)}

Over all {summary["steps"]} stored peaks: MAPE **{summary["mape"]:.1f}%**, largest error {summary["max"]:.1f}%
(the model's largest held-out error on the probe's points, `CPU_HELD_OUT_MAX_ERROR`:
{step_memory.CPU_HELD_OUT_MAX_ERROR:.1%}).
The agent runs its configured threads; some CPU kernels keep a buffer per thread, which the model does not count.
""",
    )


def _doc(
    rows: list[dict[str, Any]],
    cpu_lines: list[str],
    cpu: dict[str, float],
    gpu_lines: list[str],
    gpu: dict[str, float],
    took: str,
) -> str:
    rss = statistics.median(r["rss_above_baseline"] / r["peak_bytes"] for r in rows)
    settings = ", ".join(f"{s} px batch {b} {o} {p}" for s, b, o, p in POINTS)
    return f"""
`.venv/bin/python bench/memory.py` ({took}, torch {rows[0]["torch"]}, torchvision
{rows[0]["torchvision"]}). The peak-memory model is `shared/cnn/step_memory.py`; the figures below are its error
against measured peaks.

**On this CPU:** {len(rows)} whole training steps ({len({r["cnn"] for r in rows})} torchvision CNNs × {settings}),
each in a fresh process (`bench/memory_probe.py`). The measured peak is the most bytes torch's CPU allocator
held at once during two steps (the second with its optimizer state), summed from torch.profiler's allocation
records from before the model is built: the same quantity as `torch.cuda.max_memory_allocated` on a GPU.
Peak RSS above the post-import baseline is a median {rss:.2f}× that (it also holds oneDNN's primitive caches,
glibc's retained heap and the profiler's records), so it is not what the model is checked against. The
model's one CPU constant, bytes held per byte autograd saves, is fitted on the other CNNs' points and the
error reported on the CNN left out (the AMP activation factor likewise, on the `amp_bf16` points, with CPU
autocast); "op outputs × constant" is the same model for a CNN read without autograd (ONNX, layer lists),
which knows only every op's output bytes. Baselines: parameters × 4 bytes, and the estimate the agent's
memory guard used before (`(2 + states) × parameters + 4 × every conv's input and output`).

{chr(10).join(cpu_lines)}

Fitted on all {len(rows)} points: `SAVED_SCALE` {cpu["SAVED_SCALE"]:.2f}, `AMP_ACTIVATION_SCALE`
{cpu["AMP_ACTIVATION_SCALE"]:.2f}, `SAVED_PER_OUTPUT` {cpu["SAVED_PER_OUTPUT"]:.2f} (the values in
`shared/cnn/step_memory.py`). Largest held-out error of the model: {cpu["max_ape"]:.1f}%. The optimizer's share is
exact by construction and checked here: PyTorch on a CPU runs the per-tensor optimizer (two temporaries the
size of the largest tensor for Adam, e.g. AlexNet's 151 MB classifier weight), on a GPU the foreach one (a
temporary as large as all parameters).

**On a V100 (public):** CDECatapult's VGG-16 training steps (TensorFlow 1.10, fp32, 224 px, batch 1..64).
Their script reads `tf.contrib.memory_stats.MaxBytesInUse()`: the peak of TensorFlow's BFC allocator in
bytes (written ÷ 10^6), so without the CUDA context or reserved-but-free memory, like PyTorch's allocated
peak. TensorFlow is not PyTorch: the graph holds the input batch as a constant, runs convolutions in NHWC
with cuDNN's autotuned workspaces inside the same allocator (about 1.8 GB at batch 1, where the forward-only
file is within 5% of the training one), and its Adam keeps about one more parameter-sized buffer than the
model's two states (Adam − SGD is a constant 1.62 GB = 2.9 × the 553 MB of weights at every batch size). So
the GPU terms are fitted on the SGD file (`GPU_SCALE` {gpu["GPU_SCALE"]:.2f} on the tensors the model counts,
`GPU_WORKSPACE` {gpu["GPU_WORKSPACE"] / 1e9:.2f} GB fixed: workspace and framework reserve) and the error is
reported on the Adam file, which the fit never saw: **{gpu["adam_mape"]:.1f}%** MAPE (SGD, fitted:
{gpu["sgd_mape"]:.1f}%).

{chr(10).join(gpu_lines)}

The second table is a check of the GPU terms on PyTorch: the batch size Lambda's PyTorch benchmark ran
ResNet-50 at per GPU (it ran, so it fits; their harness picks it, so it is a lower bound of the largest
that fits, not the largest) beside the model's largest batch that fits (SGD with momentum, 224 px).

`fits_in_memory` adds the CUDA context to a GPU point: 781 MB, what nvidia-smi shows for a process that only
initialised CUDA with PyTorch (pytorch/pytorch#34323); no public figure here measures PyTorch's caching
allocator's reserve on these CNNs, so `GPU_SCALE` (TensorFlow's) stands for it.
"""


if __name__ == "__main__":
    main()
