"""Noise floor of the agent's measurements: the same layers and whole steps in two separate processes.

Each run is a fresh process that measures the same points by two methods, alternating which
goes first from one item (a layer or a CNN) to the next:
  interleaved  the agent's own code (gpu_agent.layer_bench / step_bench.measure, as its tasks call
               it, with the agent's settings): a task's batch sizes timed round-robin, the minimum
               of the round medians kept
  consecutive  the baseline, the agent's previous method: warm-up, then consecutive runs of one
               point until their spread is under 5 % or the time cap, the median kept
Per method, the difference between the two runs of a point is |a - b| / mean(a, b); the median
over points is the noise floor. Nothing is stored: the runs use no database.

    .venv/bin/python bench/repeatability.py            # ~15 min on a 2-core CPU
    .venv/bin/python bench/repeatability.py --quick    # a few points, to try it
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.perf_doc import write_section  # noqa: E402
from gpu_agent import environment, layer_bench, step_bench  # noqa: E402
from gpu_agent.app import STEP_CAP_FACTOR  # noqa: E402
from gpu_agent.timing import Policy, Timing, sync  # noqa: E402
from gpu_agent.windows import Outcome  # noqa: E402
from shared.cnn import zoo as cnn_zoo  # noqa: E402
from shared.core.settings import get_settings  # noqa: E402
from shared.training import TrainConfig  # noqa: E402

LAYER_CNNS, LAYER_SIZE, LAYER_BATCHES = ("resnet18", "mobilenet_v2"), 112, (4, 16)
STEP_CNNS, STEP_SIZE, STEP_BATCHES = (
    ("resnet18", "mobilenet_v2", "squeezenet1_1", "densenet121", "alexnet"),
    64,
    (2, 4, 8, 16),
)
# The stored figure (minimum of round medians), and two other statistics of the same interleaved runs.
METHODS = ("consecutive", "interleaved", "interleaved-min", "interleaved-median")
LABELS = {
    "consecutive": "consecutive runs, median (baseline)",
    "interleaved": "interleaved, min of round medians (stored)",
    "interleaved-min": "interleaved, fastest run",
    "interleaved-median": "interleaved, median of all runs",
}
QUICK: dict[str, Any] = {
    "layer_cnns": ("resnet18",),
    "step_cnns": ("squeezenet1_1", "resnet18"),
    "step_batches": (2, 4),
}


def consecutive(fn: Callable[[], object], device: torch.device, *, time_cap_s: float, max_runs: int) -> float:
    """The baseline: the agent's previous timing of one operation (median of consecutive runs)."""
    fn()
    sync(device)
    samples: list[float] = []
    started = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        fn()
        sync(device)
        samples.append((time.perf_counter() - t0) * 1000)
        if len(samples) >= max_runs:
            break
        q = statistics.quantiles(samples, n=4, method="inclusive") if len(samples) >= 2 else None
        spread = (q[2] - q[0]) / statistics.median(samples) if q else float("inf")
        if len(samples) >= 3 and (spread <= 0.05 or time.perf_counter() - started >= time_cap_s):
            break
    return statistics.median(samples)


def record(t: Timing) -> dict[str, Any]:
    """What the comparison needs of one interleaved timing."""
    return {
        "interleaved": t.value_ms,
        "interleaved-min": t.min_ms,
        "interleaved-median": t.median_ms,
        "quiet": t.quiet_rounds >= 3,
        "wait": t.wait,
    }


def child(out: Path, run: int, quick: bool) -> None:
    """One run: measure every point by both methods and write the figures as JSON."""
    s = get_settings()
    dev = environment.device()
    policy, step_policy = Policy.from_settings(), Policy.from_settings(STEP_CAP_FACTOR)
    points: dict[str, dict[str, Any]] = {}  # "layer/<sig>/<bs>/<phase>" or "step/<cnn>/<bs>" → figures
    seconds = {"interleaved": 0.0, "consecutive": 0.0}
    load_before = os.getloadavg()[0]

    def both(i: int, new: Callable[[], None], old: Callable[[], None]) -> None:
        # Alternate which method goes first, so neither always meets the same machine state.
        for method, work in (("interleaved", new), ("consecutive", old))[:: 1 if (i + run) % 2 == 0 else -1]:
            started = time.perf_counter()
            work()
            seconds[method] += time.perf_counter() - started

    cnns = QUICK["layer_cnns"] if quick else LAYER_CNNS
    sigs = {sig.hash: sig for cnn in cnns for sig in cnn_zoo.conv_layers(cnn, LAYER_SIZE).signatures}
    for i, sig in enumerate(sigs.values()):

        def save_layer(bs: int, o: Outcome, sig: Any = sig) -> None:
            for phase, t in (o.timings or {}).items():
                points.setdefault(f"layer/{sig.hash[:12]}/{bs}/{phase}", {}).update(record(t))

        def new(sig: Any = sig, save: Any = save_layer) -> None:
            layer_bench.measure(
                sig,
                LAYER_BATCHES,
                "fp32",
                dev,
                policy=policy,
                window_points=s.bench_window_points,
                save=save,
                stop=lambda: False,
            )

        def old(sig: Any = sig) -> None:
            for bs in LAYER_BATCHES:
                for phase, fn in layer_bench.prepare(sig, bs, "fp32", dev).phases.items():
                    ms = consecutive(fn, dev, time_cap_s=s.bench_time_cap_s, max_runs=30)
                    points.setdefault(f"layer/{sig.hash[:12]}/{bs}/{phase}", {})["consecutive"] = ms

        both(i, new, old)

    step_batches = QUICK["step_batches"] if quick else STEP_BATCHES
    for i, cnn in enumerate(QUICK["step_cnns"] if quick else STEP_CNNS):

        def save_step(bs: int, o: Outcome, cnn: str = cnn) -> None:
            if o.timings:
                points.setdefault(f"step/{cnn}/{bs}", {}).update(record(o.timings["step"]))

        def new_steps(cnn: str = cnn, save: Any = save_step) -> None:
            step_bench.measure(
                cnn,
                step_batches,
                STEP_SIZE,
                TrainConfig(),
                dev,
                policy=step_policy,
                window_points=s.bench_window_points,
                save=save,
                stop=lambda: False,
            )

        def old_steps(cnn: str = cnn) -> None:
            model, opt = step_bench.build(cnn, TrainConfig(), dev)
            for bs in step_batches:
                step = step_bench.prepare(model, opt, bs, STEP_SIZE, TrainConfig(), dev).phases["step"]
                ms = consecutive(step, dev, time_cap_s=step_policy.time_cap_s, max_runs=20)
                points.setdefault(f"step/{cnn}/{bs}", {})["consecutive"] = ms

        both(i, new_steps, old_steps)

    report = {
        "environment": environment.describe(dev),
        "seconds": seconds,
        "points": points,
        "load": [load_before, os.getloadavg()[0]],
        "host": platform.node(),
    }
    out.write_text(json.dumps(report))


def differences(a: list[float], b: list[float]) -> list[float]:
    """|a - b| / mean(a, b) in %, point by point."""
    return [abs(x - y) / ((x + y) / 2) * 100 for x, y in zip(a, b, strict=True)]


def summary(runs: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The table for docs/PERFORMANCE.md and the figures behind it."""
    a, b = runs[0]["points"], runs[1]["points"]
    lines = [
        "| points | method | n | median abs. diff. | mean | 90th pct. | max | run 2 ÷ run 1 (median) "
        "| median abs. diff. without that shift |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    stats: dict[str, Any] = {}
    for kind in ("layer", "step"):
        every = sorted(k for k in a.keys() & b.keys() if k.startswith(kind + "/") and len(a[k]) == len(b[k]) == 6)
        quiet = [k for k in every if a[k]["quiet"] and b[k]["quiet"]]
        for subset, keys in (("all", every), ("quiet in both runs", quiet)):
            for method in METHODS:
                x, y = [a[k][method] for k in keys], [b[k][method] for k in keys]
                d = differences(x, y)
                if not d:
                    continue
                p90 = statistics.quantiles(d, n=10, method="inclusive")[-1] if len(d) >= 2 else d[0]
                # The machine as a whole can be faster or slower in the second run: that shift is
                # common to all points, the rest is the scatter of single points.
                shift = statistics.median(v / u for u, v in zip(x, y, strict=True))
                scatter = statistics.median(differences(x, [v / shift for v in y]))
                stats[f"{kind}/{subset}/{method}"] = {"median": statistics.median(d), "scatter": scatter}
                lines.append(
                    f"| {kind}s, {subset} | {LABELS[method]} | {len(d)} | {statistics.median(d):.1f} % "
                    f"| {statistics.mean(d):.1f} % | {p90:.1f} % | {max(d):.1f} % | {shift:.2f} | {scatter:.1f} % |"
                )
    return "\n".join(lines), stats


def waits(run: dict[str, Any]) -> str:
    """Median and 90th percentile of the CPU-wait share of a run's interleaved points."""
    w = sorted(p["wait"] for p in run["points"].values() if "wait" in p)
    return f"{statistics.median(w):.2f}/{w[int(0.9 * (len(w) - 1))]:.2f}" if w else "n/a"


def main() -> int:
    """Run two measuring processes back to back, compare them, write the Repeatability section."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a few points only")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--run", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.run, args.quick)
        return 0
    started = time.perf_counter()
    runs = []
    tmp = tempfile.mkdtemp(prefix="traincast-repeatability-")  # kept: the raw figures of both runs
    for run in (1, 2):
        out = Path(tmp) / f"run{run}.json"
        cmd = [sys.executable, __file__, "--child", str(out), "--run", str(run)] + (["--quick"] if args.quick else [])
        print(f"run {run}: a separate process measuring the same points…", file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True)
        runs.append(json.loads(out.read_text()))
    if runs[0]["environment"] != runs[1]["environment"]:
        print("error: the two runs measured in different environments; not comparing them", file=sys.stderr)
        return 1
    table, stats = summary(runs)
    ratios = []
    for kind in ("layer", "step"):
        for subset in ("all", "quiet in both runs"):
            old, new = stats.get(f"{kind}/{subset}/consecutive"), stats.get(f"{kind}/{subset}/interleaved")
            if old and new and new["median"] > 0 and new["scatter"] > 0:
                ratios.append(
                    f"{kind}s, {subset}: {old['median'] / new['median']:.2f}× "
                    f"({old['scatter'] / new['scatter']:.2f}× without the shift)"
                )
    time_ratio = [r["seconds"]["interleaved"] / r["seconds"]["consecutive"] for r in runs]
    env = runs[0]["environment"]
    command = "python bench/repeatability.py" + (" --quick" if args.quick else "")
    body = f"""Noise floor of the agent's measurements: the same points measured in two separate processes,
back to back, each by the agent's interleaved method and by the baseline (the previous agent's median of
consecutive runs), alternating which goes first. Difference of a point between the two runs:
|a − b| / mean(a, b). Layers: every distinct conv of {", ".join(QUICK["layer_cnns"] if args.quick else LAYER_CNNS)}
at {LAYER_SIZE} px, batch sizes {", ".join(map(str, LAYER_BATCHES))}, each phase a point. Whole steps (SGD):
{", ".join(QUICK["step_cnns"] if args.quick else STEP_CNNS)} at {STEP_SIZE} px, batch sizes
{", ".join(map(str, QUICK["step_batches"] if args.quick else STEP_BATCHES))}.

`{command}` — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {time.perf_counter() - started:.0f} s in all.
Environment (both runs): {env["cpu"]}, {env["threads"]} threads, torch {env["torch"]}, device {env["device_type"]},
agent {env["agent_version"]} ({env["timing_method"]}); time cap {get_settings().bench_time_cap_s} s per point,
target spread {get_settings().bench_target_spread}, {get_settings().bench_window_points} points per window.
1-minute load average at start/end of each run: {", ".join(f"{r['load'][0]:.1f}/{r['load'][1]:.1f}" for r in runs)}
(the machine is shared; other processes ran meanwhile).

{table}

"Run 2 ÷ run 1" is how much faster or slower the machine as a whole was in the second run (a shift
common to all points, which no method inside one process can remove); the last column takes it out
and leaves the scatter of single points. Ratio of the noise floors, baseline ÷ stored figure (median
differences): {"; ".join(ratios)}.
"Quiet": the interleaved timing of the point had at least 3 blocks in which the process waited for a
CPU under {get_settings().bench_quiet_wait:.0%} of the time, in both runs. Share of time the interleaved
timings waited for a CPU, median/90th percentile over points: {", ".join(waits(r) for r in runs)}
(run 1, run 2). Time spent by the interleaved method relative to the
baseline: {", ".join(f"{t:.2f}×" for t in time_ratio)} (run 1, run 2).
"""
    print(body)
    print(f"raw figures: {tmp}/run1.json, {tmp}/run2.json", file=sys.stderr)
    write_section("Repeatability", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
