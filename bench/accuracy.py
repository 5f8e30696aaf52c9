"""Accuracy of the whole-step predictor on `local` per training configuration, held out by CNN, by image
size and by batch size, with the P10-P90 interval's coverage, beside every baseline.

Needs the stack running (`make up`: its local agent measures). It calibrates the CNN set at the machine
type's spread of settings for each configuration (what is stored already is not measured again; the
default set and configurations take about 15 minutes on 2 idle cores), trains a model per configuration,
re-measures a sample of the same whole steps in this process to get the noise floor (two independent
measurements of the same points), prints everything and writes docs/PERFORMANCE.md and docs/img/accuracy.png.

    .venv/bin/python bench/accuracy.py [--machine local] [--set default] [--configs sgd,adamw] [--noise-cnns 3]
"""

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.perf_doc import DOC, agent_settings, write_section  # noqa: E402
from calibration import run as calibrate  # noqa: E402
from worker.predictor import PredictorModel  # noqa: E402

IMG = DOC.parent / "img" / "accuracy.png"
MODELS = ("model", "lightgbm", "base_only", "base_shrunk", "conv_scale", "flops_scale")
# The precisions a CPU runs (autocast to fp16 on a CPU is not how anyone trains), each optimizer's work.
CPU_CONFIGS = "sgd,sgd+momentum,adamw,sgd+momentum/amp_bf16"
SPLITS = (
    ("loco", "CNN held out"), ("sizes", "CNN and image size held out"),
    ("batches", "CNN and batches > {cut} held out"), ("lofo", "family held out"),
)  # fmt: skip
SELECT_STEPS = """
SELECT cnn_name, batch_size, step_ms FROM step_measurements
WHERE machine_type = %(machine_type)s AND precision = %(precision)s AND image_size = %(image_size)s
  AND optimizer = %(optimizer)s AND momentum = %(momentum)s AND weight_decay = %(weight_decay)s
  AND channels_last = %(channels_last)s AND cudnn_benchmark = %(cudnn_benchmark)s AND NOT oom
ORDER BY measured_at"""


def noise_floor(plan: calibrate.Plan, cnns: list[str]) -> dict[str, Any]:
    """Measure the steps of `cnns` again at every setting of the plan's first configuration; APE between the two."""
    from gpu_agent import app, environment, step_bench
    from gpu_agent.timing import Policy
    from gpu_agent.windows import Outcome

    pairs: list[tuple[float, float]] = []
    for unit in plan.units():
        if unit.config != plan.every_config()[0]:
            continue
        rows = _stored_steps(unit)
        for cnn in cnns:
            again: dict[int, float] = {}

            def save(bs: int, outcome: Outcome, again: dict[int, float] = again) -> None:
                if outcome.timings:
                    again[bs] = outcome.timings["step"].value_ms

            step_bench.measure(
                cnn, list(unit.batch_sizes), unit.image_size, unit.config, environment.device(),
                policy=Policy.from_settings(app.STEP_CAP_FACTOR), window_points=len(unit.batch_sizes), save=save,
                stop=lambda: False,
            )  # fmt: skip
            pairs += [(ms, rows[(cnn, bs)]) for bs, ms in again.items() if (cnn, bs) in rows]
    apes = [abs(again - stored) / stored * 100 for again, stored in pairs]
    return {
        "points": len(apes),
        "mape": statistics.fmean(apes),
        "median_ape": statistics.median(apes),
        # A shift of the whole machine between the two measurements (clock, neighbours) shows as a
        # ratio away from 1 common to all points; scatter around it is the noise of single points.
        "shift": statistics.median(again / stored for again, stored in pairs),
    }


def _stored_steps(plan: calibrate.Plan) -> dict[tuple[str, int], float]:
    from shared.core.db import transaction

    with transaction() as cur:
        cur.execute(SELECT_STEPS, plan.params())
        return {(r["cnn_name"], r["batch_size"]): r["step_ms"] for r in cur.fetchall()}


def plot(ev: dict[str, Any], key: str) -> None:
    """Predicted (CNN and image size held out) against measured step time, the model and the conv-time baseline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    split = "sizes" if ev.get("sizes") else "loco"
    fig, ax = plt.subplots(figsize=(6.5, 6))
    for name, marker in (("model", "o"), ("conv_scale", "x")):
        groups = ev[split][name]["groups"].values()
        measured = [m for g in groups for m in g["measured_ms"]]
        predicted = [q for g in groups for q in g["predicted_ms"]]
        ax.scatter(measured, predicted, marker=marker, label=f"{name} (MAPE {ev[split][name]['mape']:.1f}%)", alpha=0.7)
    every = [m for g in ev[split]["model"]["groups"].values() for m in g["measured_ms"]]
    ax.plot([min(every), max(every)], [min(every), max(every)], color="grey", linewidth=1)
    ax.set(xscale="log", yscale="log", xlabel="measured step (ms)", ylabel="predicted, held out (ms)")
    ax.set_title(f"Whole training step on local ({key}): {_labels(ev)[split]}")
    ax.legend()
    IMG.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(IMG, dpi=110, bbox_inches="tight")


def _labels(ev: dict[str, Any]) -> dict[str, str]:
    return {split: label.format(cut=ev.get("batch_cut")) for split, label in SPLITS}


def _pct(value: float | None) -> str:
    return f"{value:.1f}%" if value is not None else "-"


def report(
    models: list[PredictorModel], noise: dict[str, Any] | None, plan: calibrate.Plan, command: str, run: str
) -> str:
    """The markdown section; `run` says how long it took and how loaded the machine was."""
    first = models[0]["evaluation"]
    lines = [
        f"Command: `{command}` (a local agent up; {run}). "
        f"Whole steps of {first['cnns']} CNNs ({', '.join(plan.cnns)}) at "
        f"{'; '.join(f'{s} px batch {chr(44).join(map(str, b))}' for s, b in plan.grid())}, one model per training "
        "configuration. Every figure is held out: a point is predicted by a model fitted without its CNN (and, "
        f"for the setting splits, without any step at its image size, or with batch sizes up to {first['batch_cut']} "
        "only). `model` is what a machine type stores: the base alone, the base pulled toward the plain sum of "
        "the measured parts (its strength chosen leaving each training CNN out) or LightGBM on the base's ratio, "
        "chosen "
        "inside each fit on inner folds of its own training points (CNN groups left out, alone or with a setting), "
        "with its P10-P90 interval from those folds' errors (at batch sizes beyond the fitted ones widened per "
        "doubling, by a scale learnt on inner folds that fitted smaller batch sizes and predicted larger ones); "
        "the held-out points were never looked at for any choice. `lightgbm` is always LightGBM (no choice); "
        "the others are the baselines.",
        "",
        "| training | split | model | P10-P90 coverage | lightgbm | base only | base shrunk | conv×k | flops×k "
        "| steps |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in models:
        ev = m["evaluation"]
        for split, label in _labels(ev).items():
            if not ev.get(split):
                continue
            e = ev[split]
            cov = e["model"]["coverage"]
            inside = f"{cov:.0%}" if cov is not None else "-"
            lines.append(
                f"| {m['cost_key']} | {label} | {_pct(e['model']['mape'])} | {inside} | "
                + " | ".join(_pct(e[n]["mape"]) for n in MODELS[1:])
                + f" | {e['model']['points']} |"
            )
    if noise:
        lines += [
            "",
            f"Noise floor: the same {noise['points']} whole steps ({models[0]['cost_key']}) measured again in a "
            f"separate run differ from the stored ones by {noise['mape']:.1f}% on average (median "
            f"{noise['median_ape']:.1f}%; the second ÷ the stored, median over points: {noise['shift']:.2f}). An "
            "error cannot be told apart from measurement noise below that.",
        ]
    lines += ["", "Target: MAPE ≤ 5% with CNNs held out, also at image sizes and batch sizes held out; "
              "P10-P90 holding about 80% of held-out steps."]  # fmt: skip
    for m in models:
        ev = m["evaluation"]
        worst = max((ev[s]["model"]["mape"], s) for s in ("loco", "sizes", "batches") if ev.get(s))
        verdict = "met" if worst[0] <= 5 else f"not met: {worst[0]:.1f}% ({_labels(ev)[worst[1]]})"
        groups = sorted(ev["loco"]["model"]["groups"].items(), key=lambda kv: -kv[1]["mape"])
        lines.append(
            f"- {m['cost_key']}: {verdict}; leave-one-CNN-out {_pct(ev['loco']['model']['mape'])}; worst held-out "
            "CNNs " + ", ".join(f"{c} {g['mape']:.1f}%" for c, g in groups[:3]) + "."
        )
    lines += [
        "",
        f"Per held-out CNN, {models[0]['cost_key']} (MAPE over its steps; how many fell inside P10-P90; what the "
        "inner folds chose):",
        "",
        "| held-out CNN | model | in P10-P90 | chosen | image size held out | base only | conv×k | flops×k | steps |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for cnn, g in first["loco"]["model"]["groups"].items():
        b, c, f = (first["loco"][n]["groups"][cnn] for n in ("base_only", "conv_scale", "flops_scale"))
        sizes = [
            v
            for k, v in (first.get("sizes") or {}).get("model", {}).get("groups", {}).items()
            if k.startswith(f"{cnn} @")
        ]
        held = _pct(statistics.fmean(v["mape"] for v in sizes)) if sizes else "-"
        lines.append(
            f"| {cnn} | {g['mape']:.1f}% | {g['inside']}/{g['rows']} | {g['chosen']} | {held} | {b['mape']:.1f}% | "
            f"{c['mape']:.1f}% | {f['mape']:.1f}% | {g['rows']} |"
        )
    lines += ["", "![predicted vs measured](img/accuracy.png)"]
    return "\n".join(lines)


def main() -> None:
    """Calibrate what is missing, train a model per configuration, measure the noise floor, write the figures."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--machine", dest="machine_type", default="local")
    parser.add_argument("--set", choices=list(calibrate.SETS), default="default")
    parser.add_argument("--configs", default=CPU_CONFIGS, help="training configurations, as `traincast calibrate`")
    parser.add_argument("--noise-cnns", type=int, default=3, help="CNNs re-measured for the noise floor (0: skip)")
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args()
    plan = calibrate.Plan(
        machine_type=args.machine_type,
        cnns=calibrate.SETS[args.set],
        settings=calibrate.default_settings(args.machine_type),
        configs=tuple(calibrate.config_from_key(k) for k in args.configs.split(",")),
    )
    command = (
        f".venv/bin/python bench/accuracy.py --machine {args.machine_type} --set {args.set} --configs {args.configs}"
    )

    def show(done: int, needed: int) -> None:
        print(f"\rcalibrating {plan.machine_type}: {done}/{needed}", end="", file=sys.stderr, flush=True)

    started, load = time.monotonic(), os.getloadavg()[0]
    models = calibrate.run(plan, timeout_s=args.timeout, on_progress=show)
    print(file=sys.stderr)
    noise = noise_floor(plan, list(plan.cnns[: args.noise_cnns])) if args.noise_cnns else None
    # Other processes share the cores (the agent's timings wait for quiet, but not forever): say how busy it was.
    run = (
        f"{os.cpu_count()} cores, 1-minute load average {load:.1f} at the start and {os.getloadavg()[0]:.1f} at the "
        f"end, {time.monotonic() - started:.0f} s in all, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; the "
        f"{agent_settings()}"
    )
    body = report(models, noise, plan, command, run)
    print(body)
    plot(models[0]["evaluation"], models[0]["cost_key"])
    write_section("Accuracy (bench/accuracy.py)", body)


if __name__ == "__main__":
    main()
