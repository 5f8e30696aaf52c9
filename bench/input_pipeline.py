"""The input pipeline: this host's JPEG decode and augmentation rate, measured as the agent measures it, and what it
means for GPUs whose steps we measured.

Three measurements of gpu_agent/input_bench.py on this host (the spread is the run-to-run noise). Then, for the H100
steps we measured ourselves (data/reference/h100/steps.jsonl, batch 256), the images per second one GPU takes, the CPUs
at this host's rate that would keep up, and prediction/input_pipeline.py's answer for 8 such GPUs fed by 192 vCPUs (a
p5.48xlarge's count) and for one fed by 4 vCPUs, with the echo factor that hides the input. This host's CPU is not a
p5's: the rate is the labelled reference a type without its own measurement gets, as the service gives it.

    .venv/bin/python bench/input_pipeline.py              # print and write docs/PERFORMANCE.md's section
    .venv/bin/python bench/input_pipeline.py --no-write   # print only

"""

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.perf_doc import write_section  # noqa: E402
from gpu_agent import input_bench  # noqa: E402
from prediction import input_pipeline  # noqa: E402
from shared.jobs.point import PointDict  # noqa: E402
from shared.jobs.request import JobRequest  # noqa: E402
from shared.machine_types import MachineTypeInfo  # noqa: E402

COMMAND = ".venv/bin/python bench/input_pipeline.py"
H100_STEPS = Path(__file__).resolve().parent.parent / "data" / "reference" / "h100" / "steps.jsonl"
RUNS = 3
BATCH = 256


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _machine(vcpus: int, gpus: int) -> MachineTypeInfo:
    figures = {"vcpus": vcpus, "gpu_count": gpus, "price_usd_per_hour": 55.04 * gpus / 8, "gpu_tdp_watts": 700}
    return figures  # type: ignore[return-value]


def _answer(step_ms: float, rate: input_pipeline.Sourced, *, vcpus: int, gpus: int) -> PointDict:
    """prediction/input_pipeline.py's figures for one point whose GPU step is step_ms."""
    point: PointDict = {"batch_size": BATCH, "gpus_used": gpus, "nodes": 1, "iteration_seconds": step_ms / 1000,
             "iteration_seconds_p10": step_ms / 1000, "iteration_seconds_p90": step_ms / 1000}  # fmt: skip
    request = JobRequest.stored({"cnns": ["resnet50"], "machines": ["x"], "batch_sizes": [BATCH],
                                 "input": {"source": "local_jpeg"}})  # fmt: skip
    input_pipeline.apply([point], info=_machine(vcpus, gpus), request=request, src=rate)
    return point


def main() -> None:
    """Measure, print, write."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    runs = [input_bench.measure(machine_type="local", environment_id=0) for _ in range(RUNS)]
    per_cpu = [r.per_cpu for r in runs]
    lines = [
        f"Command: `{COMMAND}`. Host: {_cpu()}, {runs[0].host_cpus} CPUs; Pillow {runs[0].stats['pillow']}.",
        "",
        f"### This host's rate ({RUNS} runs; {runs[0].stats['images']} JPEGs of {runs[0].jpeg_kb:.0f} KB, "
        f"500x375, to 224 px)",
        "",
        "| run | decode ms/image (1 worker) | augment ms/image (1 worker) | images/s, 1 worker | images/s, all CPUs "
        "| images/s per CPU, all busy |",
        "|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(runs, 1):
        lines.append(f"| {i} | {r.decode_ms:.2f} | {r.augment_ms:.2f} | {r.stats['solo_images_per_s']:.0f} | "
                     f"{r.images_per_s_all:.0f} | {r.per_cpu:.0f} |")  # fmt: skip
    spread = (max(per_cpu) - min(per_cpu)) / statistics.median(per_cpu) * 100
    lines += ["", f"Per-CPU rate: median {statistics.median(per_cpu):.0f} images/s, spread {spread:.1f}% of the median "
              "across the runs (noise of this host).", ""]  # fmt: skip
    median_run = sorted(runs, key=lambda r: r.per_cpu)[RUNS // 2]
    rate = input_pipeline.Sourced(median_run, "reference", "this host", median_run.per_cpu)
    steps = [json.loads(line) for line in H100_STEPS.read_text().splitlines() if line.strip()]
    rows = [s for s in steps if s["batch"] == BATCH and s["image"] == 224 and s.get("ms")]
    lines += [
        f"### Our H100 steps at batch {BATCH} fed from JPEGs at this host's rate",
        "",
        "GPU step: measured on an H100 SXM (data/reference/h100/steps.jsonl). CPUs to keep up = images/s the GPU "
        "takes / this host's per-CPU rate. The last columns are prediction/input_pipeline.py's answers for 8 GPUs on "
        "192 vCPUs (p5.48xlarge's count, 24 a GPU) and 1 GPU on 4 vCPUs: input over GPU step, and the echo factor.",
        "",
        "| CNN | config | GPU step ms | images/s | CPUs to keep up | 8 GPUs / 192 vCPUs | 1 GPU / 4 vCPUs |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in sorted(rows, key=lambda s: (s["cnn"], s["config"])):
        wide, narrow = _answer(s["ms"], rate, vcpus=192, gpus=8), _answer(s["ms"], rate, vcpus=4, gpus=1)
        ips = BATCH / s["ms"] * 1000

        def cell(p: PointDict) -> str:
            return f"{p['input_bound_ratio']:.2f}x" + (f", echo {p['echo_factor']}" if p["input_bound"] else "")

        lines.append(f"| {s['cnn']} | {s['config']} | {s['ms']:.1f} | {ips:.0f} | {ips / rate.per_cpu:.1f} | "
                     f"{cell(wide)} | {cell(narrow)} |")  # fmt: skip
    lines += ["", "Not checked against a public input-bound measurement (none with a per-CPU rate was found); the "
              "rate of a p5's own CPUs is measured by its agent when a job asks (bench_input)."]  # fmt: skip
    body = "\n".join(lines)
    print(body)
    if not args.no_write:
        write_section("Input pipeline", body)


if __name__ == "__main__":
    main()
