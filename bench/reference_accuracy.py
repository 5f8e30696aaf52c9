"""Held-out accuracy of the reference predictor, beside a roofline baseline, into docs/PERFORMANCE.md.

Run: .venv/bin/python bench/reference_accuracy.py  (or --stored: format the figures the fit wrote into model.json)
1. Leave-one-GPU-out on the public layer data: every GPU family's rows (NeuSight, DeepBench, Benanza)
   predicted by conv models fitted without them; MAPE per phase beside max(FLOPs/peak, bytes/bandwidth).
2. Whole networks (data/reference/whole_steps.csv): each row predicted by a model fitted without its
   GPU family, beside 3 x forward FLOPs at the GPU's peak; by set, GPU and CNN family.
"""

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.perf_doc import write_section  # noqa: E402
from worker.reference import data, layerfit, load  # noqa: E402
from worker.reference.convs import PHASES  # noqa: E402
from worker.reference.fit import accuracy, gpu_table  # noqa: E402

COMMAND = ".venv/bin/python bench/reference_accuracy.py"
NOTES = """Notes. Pollux and Sia time the step while 2-4 real-data loader workers decode images on the same
host (ImageNet JPEGs for ResNet-50): beyond the rows flagged input-bound, their ResNet-50 steps run at
roughly half the per-image speed Lambda measures with synthetic data on the same GPU models, so they
measure the input pipeline as much as the GPU. Whole-step scales (conv per path, other ops per precision,
CPU) are fitted only on step-only rows, nested: each GPU family's rows are predicted by scales fitted
without them. While designing, the author looked at the held-out whole-step errors of every set (no
untouched final test set exists); the layer model's features were chosen on layer leave-one-GPU-out."""


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}%"


def layer_table(layers: dict[str, Any]) -> str:
    """Markdown: per held-out GPU and phase, model MAPE / roofline MAPE (ratio)."""
    head = "| held-out GPU | " + " | ".join(f"{p} model / roofline (ratio, rows)" for p in PHASES) + " |"
    lines = [head, "|---|" + "---|" * len(PHASES)]
    for gpu, row in sorted(layers["per_gpu"].items()):
        cells = []
        for p in PHASES:
            v = row.get(p)
            cells.append(
                "–"
                if v is None
                else f"{v['mape']:.1f}% / {v['roofline_mape']:.1f}% ({v['mape'] / v['roofline_mape']:.2f}, {v['rows']})"
            )
        lines.append(f"| {gpu} | " + " | ".join(cells) + " |")
    mean = layers["mean_over_gpus"]
    cells = [f"**{mean[p]['mape']:.1f}% / {mean[p]['roofline_mape']:.1f}% "
             f"({mean[p]['mape'] / mean[p]['roofline_mape']:.2f})**" for p in PHASES]  # fmt: skip
    lines.append("| **mean over GPUs** | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def group_table(entry: dict[str, Any], key: str, label: str) -> str:
    """Markdown: MAPE of model and FLOPs baseline per group."""
    lines = [f"| {label} | rows | model MAPE | median APE | FLOPs-at-peak MAPE |", "|---|---:|---:|---:|---:|"]
    for name, v in entry[key].items():
        lines.append(
            f"| {name} | {v['rows']} | {_pct(v['mape'])} | {_pct(v['median_ape'])} | {_pct(v['baseline_mape'])} |"
        )
    return "\n".join(lines)


def body(acc: dict[str, Any], version: str, seconds: float) -> str:
    """The whole section text."""
    steps = acc["whole_steps"]
    head = steps["headline"]
    out = [
        f"Command: `{COMMAND}` (model `{version}`; the evaluation takes a few minutes on 2 cores"
        + (f", this run {seconds:.0f} s). " if seconds > 1 else ", run inside the fit). ")
        + "Fitted only on public "
        "measurements (data/reference/LAYERS.md); every figure below is held out: the GPU family predicted "
        "(all its board variants) was left out of every fit that predicts it: layer models and the six "
        "whole-step scales fitted on other GPUs' step-only rows (nested leave-one-GPU-family-out).",
        "",
        "### Conv layers, leave-one-GPU-out (MAPE per phase; roofline = max(FLOPs/peak, bytes/bandwidth))",
        "",
        layer_table(acc["layers"]),
        "",
        "### Whole training steps, GPU held out",
        "",
        f"Headline ({head['description']}): **{_pct(head['mape'])} MAPE** over {head['rows']} rows "
        f"(median {_pct(head['median_ape'])}; FLOPs-at-peak baseline {_pct(head['baseline_mape'])}); "
        f"log(measured/predicted) P10 {head['log_ratio_p10']:.2f}, P90 {head['log_ratio_p90']:.2f}.",
        "",
        group_table(head, "by_set", "set"),
        "",
        group_table(head, "by_gpu", "GPU"),
        "",
        group_table(head, "by_family", "CNN family"),
        "",
        "Subsets of the headline and rows outside it, predicted the same way:",
        "",
        "| rows | n | model MAPE | median APE | P10 / P90 log(meas/pred) | FLOPs-at-peak MAPE |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    labels = {
        "headline_step_only": "headline, step-only timers (synthetic data or loader wait excluded: Lambda)",
        "headline_fp32": "headline, fp32 only (what the service uses)",
        "input_bound": "flagged input-bound (excluded from headline)",
        "partial_step": "PyTorch without optimizer step or pure .half()",
        "other_framework": "other frameworks (MXNet, TensorFlow, Lua Torch)",
        "unsupported_cnn": "CNN not in torchvision (not predicted)",
    }
    for cat, label in labels.items():
        v = steps.get(cat)
        if v and "mape" in v and cat != "unsupported_cnn":
            out.append(
                f"| {label} | {v['rows']} | {_pct(v['mape'])} | {_pct(v['median_ape'])} | "
                f"{v['log_ratio_p10']:.2f} / {v['log_ratio_p90']:.2f} | {_pct(v['baseline_mape'])} |"
            )
        elif v:
            out.append(f"| {label} | {v['rows']} | – | – | – | – |")
    if "headline_step_only" in steps:
        out += ["", "Step-only headline rows by GPU:", "", group_table(steps["headline_step_only"], "by_gpu", "GPU")]
    # the headline sets are all ResNets; the other CNN families appear only in these rows
    for cat in ("partial_step", "other_framework"):
        if cat in steps:
            out += ["", f"{labels[cat]}, by CNN family:", "", group_table(steps[cat], "by_family", "CNN family")]
    out += ["", NOTES]
    return "\n".join(out)


def main(argv: list[str]) -> None:
    """Evaluate (or, with --stored, take the figures the fit stored in model.json), print, write the section."""
    global COMMAND
    start = time.time()
    if "--stored" in argv:
        # the same evaluation, run by `python -m worker.reference.fit` when it wrote model.json
        model = load()
        acc, version = model.accuracy, model.version
        COMMAND = ".venv/bin/python -m worker.reference.fit && " + COMMAND + " --stored"
    else:
        gpus = gpu_table()
        matrix = layerfit.layer_matrix(data.load_layers(), gpus)
        acc = accuracy(gpus, matrix)
        try:
            version = load().version
        except FileNotFoundError:
            version = "not fitted"
    text = body(acc, version, time.time() - start)
    print(text)
    write_section("Reference predictor accuracy", text)


if __name__ == "__main__":
    main(sys.argv[1:])
