"""Accuracy of the whole-step predictor on `local`, held out by CNN and by family, beside baselines.

Needs the stack running (`make up`: its local agent measures). It calibrates the full CNN set
if the measurements are missing (long on a CPU), trains a model, re-measures a sample of the
same whole steps in this process to get the noise floor (two independent measurements of the
same points), prints everything and writes docs/PERFORMANCE.md and docs/img/accuracy.png.

    .venv/bin/python bench/accuracy.py [--machine local] [--noise-cnns 6] [--batch-sizes 2,4,8,16]
"""

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.perf_doc import DOC, write_section  # noqa: E402
from worker import calibrate  # noqa: E402

IMG = DOC.parent / "img" / "accuracy.png"
MODELS = ("lightgbm", "base_only", "conv_scale", "flops_scale")
SELECT_STEPS = """
SELECT cnn_name, batch_size, step_ms FROM step_measurements
WHERE machine_type = %(machine)s AND precision = %(precision)s AND image_size = %(image_size)s
  AND optimizer = %(optimizer)s AND momentum = %(momentum)s AND weight_decay = %(weight_decay)s
  AND channels_last = %(channels_last)s AND NOT oom
ORDER BY measured_at"""


def noise_floor(plan: calibrate.Plan, cnns: list[str]) -> dict[str, Any]:
    """Measure the steps of `cnns` again, independently of the agent's run; APE between the two."""
    from gpu_agent import app, environment, step_bench
    from gpu_agent.timing import Policy
    from gpu_agent.windows import Outcome

    by_cnn: dict[str, dict[int, float]] = {}
    rows = _stored_steps(plan)
    for cnn in cnns:
        again: dict[int, float] = {}

        def save(bs: int, outcome: Outcome, again: dict[int, float] = again) -> None:
            if outcome.timings:
                again[bs] = outcome.timings["step"].value_ms

        step_bench.measure(
            cnn, list(plan.batch_sizes), plan.image_size, plan.config, environment.device(),
            policy=Policy.from_settings(app.STEP_CAP_FACTOR), window_points=len(plan.batch_sizes), save=save,
            stop=lambda: False,
        )  # fmt: skip
        by_cnn[cnn] = again
    pairs = [
        (again, rows[(cnn, bs)]) for cnn, sizes in by_cnn.items() for bs, again in sizes.items() if (cnn, bs) in rows
    ]
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
    from shared.db import transaction

    with transaction() as cur:
        cur.execute(SELECT_STEPS, plan.params())
        return {(r["cnn_name"], r["batch_size"]): r["step_ms"] for r in cur.fetchall()}


def plot(ev: dict[str, Any]) -> None:
    """Predicted (held-out CNN) against measured step time, LightGBM and the conv-time baseline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 6))
    for name, marker in (("lightgbm", "o"), ("conv_scale", "x")):
        groups = ev["loco"][name]["groups"].values()
        measured = [m for g in groups for m in g["measured_ms"]]
        predicted = [q for g in groups for q in g["predicted_ms"]]
        ax.scatter(
            measured, predicted, marker=marker, label=f"{name} (MAPE {ev['loco'][name]['mape']:.1f}%)", alpha=0.7
        )
    lo = min(min(g["measured_ms"]) for g in ev["loco"]["lightgbm"]["groups"].values())
    hi = max(max(g["measured_ms"]) for g in ev["loco"]["lightgbm"]["groups"].values())
    ax.plot([lo, hi], [lo, hi], color="grey", linewidth=1)
    ax.set(xscale="log", yscale="log", xlabel="measured step (ms)", ylabel="predicted, CNN held out (ms)")
    ax.set_title("Whole training step on local: leave-one-CNN-out")
    ax.legend()
    IMG.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(IMG, dpi=110, bbox_inches="tight")


def report(model: dict[str, Any], noise: dict[str, Any] | None, plan: calibrate.Plan) -> str:
    """The markdown section."""
    ev = model["evaluation"]
    lines = [
        f"Command: `.venv/bin/python bench/accuracy.py --machine {plan.machine} --batch-sizes "
        f"{','.join(map(str, plan.batch_sizes))}` (stack up). Model "
        f"{model['kind']} v{model['version']}, {ev['rows']} whole steps of {ev['cnns']} CNNs at "
        f"{plan.image_size} px, batch sizes {', '.join(map(str, plan.batch_sizes))}, {plan.config.cost_key()}.",
        "",
        "| split | model | MAPE | median APE | max APE | vs conv×k |",
        "|---|---|---|---|---|---|",
    ]
    for split, label in (("loco", "leave one CNN out"), ("lofo", "leave one family out")):
        base = ev[split]["conv_scale"]["mape"]
        for name in MODELS:
            e = ev[split][name]
            lines.append(
                f"| {label} | {name} | {e['mape']:.1f}% | {e['median_ape']:.1f}% | {e['max_ape']:.1f}% | "
                f"{e['mape'] / base:.2f}x |"
            )
    if noise:
        lines += [
            "",
            f"Noise floor: the same {noise['points']} whole steps measured again in a separate run differ from the "
            f"stored ones by {noise['mape']:.1f}% on average (median {noise['median_ape']:.1f}%; the second "
            f"measurement ÷ the stored one, median over points: {noise['shift']:.2f}). An error cannot be told "
            "apart from measurement noise below that.",
        ]
    loco = ev["loco"]["lightgbm"]["mape"]
    groups = ev["loco"]["lightgbm"]["groups"]
    lines += [
        "",
        f"Target (issue 5): leave-one-CNN-out MAPE ≤ 5% and below both baselines. Measured {loco:.1f}%: "
        + ("reached." if loco <= 5 else f"missed by {loco - 5:.1f} points ({loco / 5:.1f}× the target).")
        + (f" That is {loco / noise['mape']:.1f}× the noise floor." if noise else "")
        + " Worst held-out CNNs: "
        + ", ".join(f"{c} {g['mape']:.1f}%" for c, g in sorted(groups.items(), key=lambda kv: -kv[1]["mape"])[:3])
        + ".",
    ]
    lines += [
        "",
        "Per held-out CNN (MAPE; for LightGBM also the median and max APE over its batch sizes):",
        "",
        "| held-out CNN | lightgbm | median | max | base only | conv×k | flops×k | steps |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for cnn, g in ev["loco"]["lightgbm"]["groups"].items():
        b, c = ev["loco"]["base_only"]["groups"][cnn], ev["loco"]["conv_scale"]["groups"][cnn]
        f = ev["loco"]["flops_scale"]["groups"][cnn]
        lines.append(
            f"| {cnn} | {g['mape']:.1f}% | {g['median_ape']:.1f}% | {g['max_ape']:.1f}% | {b['mape']:.1f}% | "
            f"{c['mape']:.1f}% | {f['mape']:.1f}% | {g['rows']} |"
        )
    lines += ["", "![predicted vs measured](img/accuracy.png)"]
    return "\n".join(lines)


def main() -> None:
    """Calibrate if needed, train, evaluate, measure the noise floor, write the figures."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--machine", default="local")
    parser.add_argument("--noise-cnns", type=int, default=6, help="CNNs re-measured for the noise floor (0: skip)")
    parser.add_argument("--batch-sizes", default="2,4,8,16", help="comma-separated; more points per CNN")
    parser.add_argument("--timeout", type=float, default=4 * 3600)
    args = parser.parse_args()
    plan = calibrate.Plan(
        machine=args.machine,
        cnns=calibrate.FULL_CNNS,
        batch_sizes=tuple(int(b) for b in args.batch_sizes.split(",")),
        image_size=calibrate.default_image_size(args.machine),
    )

    def show(done: int, needed: int) -> None:
        print(f"\rcalibrating {plan.machine}: {done}/{needed}", end="", file=sys.stderr, flush=True)

    model = calibrate.run(plan, timeout_s=args.timeout, on_progress=show)
    print(file=sys.stderr)
    noise = noise_floor(plan, list(plan.cnns[: args.noise_cnns])) if args.noise_cnns else None
    body = report(model, noise, plan)
    print(body)
    plot(model["evaluation"])
    write_section("Accuracy (bench/accuracy.py)", body)


if __name__ == "__main__":
    main()
