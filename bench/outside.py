"""The benchmarked path on CNNs outside its calibration set, at an image size and batch sizes of their own.

Needs the stack running (`make up`; with `TRAINCAST_EMBEDDED=1` its servers are private) and `local` calibrated
(`traincast calibrate --machine local`, which `make run` does: the default set, calibration/run.py DEFAULT_CNNS,
none of which is asked here). For each CNN it submits a job for `local` through the API, as a user would (the job
waits for the agent to measure the layers and ops it lacks), then, once every job has ended and the agent is idle,
times the same whole steps in this process with gpu_agent/step_bench.measure (as bench/accuracy.py's noise floor
does). Beside the model's answer, in the same run: the baseline "summed", the measured conv, op and optimizer times
of the same points (the rows the job used, features.table's conv_ms + other_ms + optimizer_ms), no model. Prints
per CNN and batch size predicted vs measured with the APE and the mean, and writes docs/PERFORMANCE.md's section
(the full run only: `--quick`, 2 CNNs at batch 4, and runs of other CNNs or batch sizes print alone).

`--sums` needs no stack: it measures every conv, op and optimizer step of each CNN in this process (layer_bench,
op_bench) and prints their sum against the whole step, a sanity check with no model involved.

    .venv/bin/python bench/outside.py [--quick] [--cnns a,b] [--image-size 96] [--batch-sizes 4,16] [--sums]
"""

import argparse
import math
import os
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Hashable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.perf_doc import agent_settings, write_section  # noqa: E402

CNNS = (
    "convnext_tiny", "shufflenet_v2_x1_5", "regnet_x_400mf", "resnet101", "efficientnet_b0", "mobilenet_v3_large",
    "resnext50_32x4d", "densenet169", "mnasnet1_0", "googlenet",
)  # fmt: skip
QUICK = ("convnext_tiny", "shufflenet_v2_x1_5")
TITLE = "Outside the calibration set (bench/outside.py)"
MACHINE = "local"


def load_services() -> None:
    """The URLs of the servers `make up` started the stack with (.run/services.env), as scripts/run.sh reads them."""
    path = Path(os.environ.get("TRAINCAST_RUN_DIR", ROOT / ".run")) / "services.env"
    if not path.exists():
        return
    for line in path.read_text().splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, value = words[1].split("=", 1)
            os.environ[name] = value


def predict(
    cnns: list[str],
    image_size: int,
    batch_sizes: list[int],
    config: Any,
    *,
    wait: bool = False,
    deadline: float | None = None,
) -> dict[str, Any]:
    """Submit a job per CNN for `local` (all at once), follow each to its end; the jobs as the API answered them.

    wait: have each job wait for the agent's benchmarks even where the reference could answer (a GPU `local`).
    deadline: a time.monotonic() after which the jobs still running are cancelled (and answered as cancelled)."""
    from cli.client import Api
    from cli.jobs import follow
    from shared.jobs.models import JobStatus

    port = os.environ.get("API_PORT", "8000")
    api = Api(os.environ.get("TRAINCAST_API_URL", f"http://127.0.0.1:{port}"), timeout=60)
    body = {"machines": [MACHINE], "batch_sizes": batch_sizes, "image_size": image_size, **config.model_dump()}
    body |= {"wait_for_benchmarks": True} if wait else {}
    ids = {cnn: api.call("POST", "/v1/jobs", json=body | {"cnns": [cnn]})["id"] for cnn in cnns}
    jobs = {}
    for cnn, job_id in ids.items():
        jobs[cnn] = follow(api, job_id, show=False, deadline=math.inf if deadline is None else deadline)
        if not JobStatus(jobs[cnn]["status"]).terminal:  # the deadline passed: its work is not wanted any more
            api.call("POST", f"/v1/jobs/{job_id}/cancel")
            jobs[cnn] = api.call("GET", f"/v1/jobs/{job_id}")
        print(f"{cnn}: job {job_id} {jobs[cnn]['status']} {jobs[cnn].get('error') or ''}", file=sys.stderr)
    return jobs


def summed(cnn: str, image_size: int, batch_sizes: list[int], config: Any) -> dict[int, float | None]:
    """Per batch size, the measured conv, op and optimizer times summed as the job's features sum them (None where
    one ran out of memory or an op is not measured)."""
    from prediction import features
    from shared import machine_types
    from shared.measurements import layers, ops

    key: dict[str, Any] = {"name": cnn, "image_size": image_size, "num_classes": 1000}
    members, op_members = layers.members(**key), ops.members(**key)
    rows = layers.newest(
        signature_ids=[m[0] for m in members], machine_types=[MACHINE], batch_sizes=batch_sizes,
        precision=config.layer_precision, channels_last=config.channels_last,
    )  # fmt: skip
    op_rows = ops.newest(
        signature_ids=[m[0] for m in op_members], machine_types=[MACHINE], batch_sizes=batch_sizes, config=config
    )
    x, usable = features.table(
        members=members, rows=rows, workload=layers.workload(**key), batch_sizes=batch_sizes, image_size=image_size,
        optimizer=config.optimizer, machine_info=machine_types.get_by_name(name=MACHINE), op_members=op_members,
        op_rows=op_rows,
    )  # fmt: skip
    total = x["conv_ms"] + x["other_ms"] + x["optimizer_ms"]
    complete = usable & (x["ops_measured"] == 1) & (x["optimizer_measured"] == 1)
    return {bs: float(total[i]) if complete[i] else None for i, bs in enumerate(batch_sizes)}


def measure_steps(cnn: str, image_size: int, batch_sizes: list[int], config: Any) -> dict[int, float]:
    """The whole steps timed in this process by the agent's own code and policy (a whole step's longer cap)."""
    from gpu_agent import app, environment, step_bench
    from gpu_agent.timing import Policy
    from gpu_agent.windows import Outcome

    got: dict[int, float] = {}

    def save(bs: int, outcome: Outcome) -> None:
        if outcome.timings:
            got[bs] = outcome.timings["step"].value_ms

    step_bench.measure(
        cnn, batch_sizes, image_size, config, environment.device(), policy=Policy.from_settings(app.STEP_CAP_FACTOR),
        window_points=len(batch_sizes), save=save, stop=lambda: False,
    )  # fmt: skip
    return got


def ape(predicted: float | None, measured: float | None) -> float | None:
    """Absolute percentage error, where both are known."""
    return abs(predicted - measured) / measured * 100 if predicted is not None and measured else None


def points(cnns: list[str], image_size: int, batch_sizes: list[int], config: Any) -> list[dict[str, Any]]:
    """Every (CNN, batch size): the model's answer (with P10-P90), the summed baseline and the measured step."""
    jobs = predict(cnns, image_size, batch_sizes, config)
    out = []
    # Timed twice, a pass over every CNN each: the two passes' gap is the noise floor of the measurements themselves
    # (how far the same step moves between two timings minutes apart), against which the errors are read.
    first = {cnn: measure_steps(cnn, image_size, batch_sizes, config) for cnn in cnns}  # the agent is idle now
    second = {cnn: measure_steps(cnn, image_size, batch_sizes, config) for cnn in cnns}
    for cnn in cnns:
        job, sums = jobs[cnn], None
        steps = {b: statistics.fmean([first[cnn][b], second[cnn][b]]) for b in first[cnn] if b in second[cnn]}
        if job["status"] == "succeeded":
            sums = summed(cnn, image_size, batch_sizes, config)
        answers = {p["batch_size"]: p for p in (job.get("result") or {}).get("predictions", [])}
        for bs in batch_sizes:
            p = answers.get(bs) or {}
            seconds = [p.get(k) for k in ("iteration_seconds", "iteration_seconds_p10", "iteration_seconds_p90")]
            model, low, high = (s * 1000 if s is not None else None for s in seconds)
            out.append({
                "cnn": cnn, "batch_size": bs, "measured_ms": steps.get(bs), "model_ms": model, "p10_ms": low,
                "p90_ms": high, "summed_ms": (sums or {}).get(bs), "error": job.get("error"),
                "first_ms": first[cnn].get(bs), "second_ms": second[cnn].get(bs),
            })  # fmt: skip
    return out


def _ms(v: float | None) -> str:
    return f"{v:.1f}" if v is not None else "-"


def _pct(v: float | None) -> str:
    return f"{v:.1f}%" if v is not None else "-"


def report(rows: list[dict[str, Any]], command: str, run: str, image_size: int) -> str:
    """The markdown section: a row per point, the means, the baseline beside the model."""
    lines = [
        f"Command: `{command}` ({run}). Each CNN is outside the calibration set of `local`'s model and asked at "
        f"{image_size} px, a size and batch sizes the default calibration did not fit. `model`: the job's answer "
        "through the API (P10-P90 in brackets); `summed`: the same points' measured conv, op and optimizer times "
        "added up, no model (the baseline); `measured`: the whole step timed afterwards in this process by the "
        "agent's step_bench, twice (a pass over every CNN each; `measured` is their mean, and how far the two passes "
        "differ is the noise floor). APE: |predicted - measured| / measured.",
        "",
        "| CNN | batch | measured ms | model ms (P10-P90) | model APE | summed ms | summed APE |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        band = f" ({_ms(r['p10_ms'])}-{_ms(r['p90_ms'])})" if r["p10_ms"] is not None else ""
        lines.append(
            f"| {r['cnn']} | {r['batch_size']} | {_ms(r['measured_ms'])} | {_ms(r['model_ms'])}{band} | "
            f"{_pct(ape(r['model_ms'], r['measured_ms']))} | {_ms(r['summed_ms'])} | "
            f"{_pct(ape(r['summed_ms'], r['measured_ms']))} |"
        )
    model = [e for r in rows if (e := ape(r["model_ms"], r["measured_ms"])) is not None]
    base = [e for r in rows if (e := ape(r["summed_ms"], r["measured_ms"])) is not None]
    inside = [
        r["p10_ms"] <= r["measured_ms"] <= r["p90_ms"]
        for r in rows
        if r["p10_ms"] is not None and r["p90_ms"] is not None and r["measured_ms"]
    ]
    widths = [r["p90_ms"] / r["p10_ms"] for r in rows if r["p10_ms"] and r["p90_ms"]]
    # The gap of one timing from the other, relative to their mean: the error a perfect model would still show.
    noise = [
        abs(r["first_ms"] - r["second_ms"]) / r["measured_ms"] * 50
        for r in rows
        if r["first_ms"] is not None and r["second_ms"] is not None and r["measured_ms"]
    ]
    lines += [
        "",
        f"Mean APE: model {_pct(statistics.fmean(model) if model else None)} over {len(model)} points; summed "
        f"(baseline) {_pct(statistics.fmean(base) if base else None)} over {len(base)}. Goal: 6% or less, in two runs. "
        "Noise floor (each pass's distance from the two passes' mean): "
        f"{_pct(statistics.fmean(noise) if noise else None)}, largest {_pct(max(noise) if noise else None)}. "
        f"P10-P90 holds {sum(inside)} of {len(inside)} measured steps (about 80% when it means what it says); "
        f"median P90/P10 {statistics.median(widths) if widths else math.nan:.2f}.",
    ]
    lines += [f"- {r['cnn']}: {r['error']}" for r in rows if r["error"] and r["batch_size"] == rows[0]["batch_size"]]
    return "\n".join(lines)


def sums(cnns: list[str], image_size: int, batch_size: int, config: Any) -> None:
    """Print, per CNN, the sum of its convs, ops and optimizer step measured one by one against its whole step."""
    import torch

    from gpu_agent import environment, layer_bench, op_bench, step_bench
    from gpu_agent.timing import Policy, time_rounds
    from shared.cnn import zoo

    dev, timed = environment.device(), dict[Any, float]()

    def ms(phases: dict[str, Any], factor: float = 1.0) -> float:
        """The phases' times summed, each timed as the agent times it."""
        ops: dict[Hashable, Callable[[], object]] = {k: v for k, v in phases.items()}  # noqa: C416 (its key type)
        timings = time_rounds(ops, dev, Policy.from_settings(factor))
        return float(sum(t.value_ms for t in timings.values()))

    for cnn in cnns:
        read = zoo.conv_layers(cnn, image_size)
        model, opt = step_bench.build(cnn, config, dev)
        step = ms(step_bench.prepare(model, opt, batch_size, image_size, config, dev).phases, 4.0)
        del model, opt
        parts: dict[str, float] = {"conv": 0.0}
        for sig, count in zip(read.signatures, read.counts, strict=True):
            if sig not in timed:
                timed[sig] = ms(
                    layer_bench.prepare(sig, batch_size, config.layer_precision, dev, config.channels_last).phases
                )
            parts["conv"] += count * timed[sig]
        for op, count in zip(read.ops, read.op_counts, strict=True):
            if op not in timed:
                timed[op] = ms(op_bench.prepare(op, 0 if op.op == "optimizer" else batch_size, config, dev).phases)
            parts[op.op] = parts.get(op.op, 0.0) + count * timed[op]
        total = sum(parts.values())
        top = ", ".join(f"{k} {v:.1f}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1])[:6])
        print(f"{cnn} at {image_size} px, batch {batch_size}: step {step:.1f} ms, summed {total:.1f} ms "
              f"(ratio {total / step:.2f}; {top}; torch {torch.__version__})")  # fmt: skip


def main() -> None:
    """Predict through the API, measure the same steps here, print and write the figures (or --sums)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help=f"{' and '.join(QUICK)} at batch 4 only")
    parser.add_argument("--cnns", default=None, help="comma-separated CNNs instead of the ten")
    parser.add_argument("--image-size", type=int, default=96)
    parser.add_argument("--batch-sizes", default=None, help="comma-separated (default 4,16; --quick: 4)")
    parser.add_argument("--sums", action="store_true", help="no stack: summed convs and ops vs the step, in-process")
    args = parser.parse_args()
    from shared.training import TrainConfig

    cnns = args.cnns.split(",") if args.cnns else list(QUICK if args.quick else CNNS)
    batch_sizes = [int(b) for b in (args.batch_sizes or ("4" if args.quick else "4,16")).split(",")]
    config = TrainConfig()  # what the default calibration fits: SGD, fp32, NCHW
    if args.sums:
        sums(cnns, args.image_size, batch_sizes[0], config)
        return
    load_services()
    from worker import predictor

    model = predictor.latest(machine_type=MACHINE, cost_key=config.cost_key())
    if model is None:
        sys.exit(f"no model for {MACHINE}: run `traincast calibrate --machine {MACHINE}` (or `make run`) first")
    started, load = time.monotonic(), os.getloadavg()[0]
    rows = points(cnns, args.image_size, batch_sizes, config)
    run = (
        f"{MACHINE}'s model v{model['version']}, {os.cpu_count()} cores, 1-minute load average {load:.1f} at the "
        f"start and {os.getloadavg()[0]:.1f} at the end, {time.monotonic() - started:.0f} s in all, "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; the {agent_settings()}"
    )
    command = "python bench/outside.py" + (" --quick" if args.quick else "")
    command += f" --cnns {args.cnns}" if args.cnns else ""
    command += f" --batch-sizes {args.batch_sizes}" if args.batch_sizes else ""
    body = report(rows, command, run, args.image_size)
    print(body)
    if not args.quick and not args.cnns and not args.batch_sizes:  # a trial run's figures replace nothing
        write_section(TITLE, body)


if __name__ == "__main__":
    main()
