"""Held-out accuracy of the reference predictor, beside a roofline baseline, into docs/PERFORMANCE.md.

Run: .venv/bin/python bench/reference_accuracy.py  (or --stored: format the figures the fit wrote into model.json)
1. Leave-one-GPU-out on the public layer data: every GPU family's rows (NeuSight, DeepBench, Benanza)
   predicted by conv models fitted without them; MAPE per phase beside max(FLOPs/peak, bytes/bandwidth).
2. Whole networks (data/reference/whole_steps.csv): each row predicted by a model fitted without its
   GPU family, beside 3 x forward FLOPs at the GPU's peak; by set, GPU and CNN family.
3. Our H100 steps (data/reference/h100/): each CNN predicted by whole-step constants fitted without its H100 rows,
   per configuration and regime, beside the same model fitted on public rows only and FLOPs at peak.
"""

import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.perf_doc import write_section  # noqa: E402
from prediction.reference import layerfit, load  # noqa: E402
from prediction.reference.convs import PHASES  # noqa: E402
from prediction.reference.fit import accuracy, fit_params, gpu_table, layer_table  # noqa: E402
from prediction.reference.h100 import repeatability  # noqa: E402
from prediction.reference.step_rows import load_h100  # noqa: E402

COMMAND = ".venv/bin/python bench/reference_accuracy.py"
NOTES = """Notes. Pollux and Sia time the step while 2-4 real-data loader workers decode images on the same
host (ImageNet JPEGs for ResNet-50): beyond the rows flagged input-bound, their ResNet-50 steps run at
roughly half the per-image speed Lambda measures with synthetic data on the same GPU models, so they
measure the input pipeline as much as the GPU; the step-only rows are the check of the GPU model. Whole-step
constants are fitted only on step-only rows, nested: each GPU family's rows are predicted by constants fitted
without them. A GPU's constants are the shared ones, fitted with every GPU family weighing at most the median
family (so our ~190 H100 steps do not set what other GPUs get) and the host's costs taken from the full fit; a
family with steps of our own (the H100) keeps constants fitted on all rows at full weight. GeForce boards are
costed at their chip's full tensor rate (the FP16-accumulate figure; prediction/reference/specs.py). What was
looked at: the author chose both of these with the held-out step-only errors of every set and our H100's
leave-one-CNN-out figures in view (per-family multipliers and three weightings were tried and dropped on the
same figures; no untouched final test set exists); the layer model's features were chosen on layer
leave-one-GPU-out. Before these two changes (model a4ee04911f8782ba, every constant fitted with our H100 steps at
full weight, GeForce at the halved rate): step-only rows 16.3% (RTX 3090 56%, RTX 4090 58%, RTX 2080 Ti 41%
held out), headline 19.4%; our H100 held out by CNN 10.3 / 11.2 / 13.2%. The headline's loader-concurrent rows
(Pollux, Sia) got worse (their input stalls had been absorbed by device constants that were too slow). Whole steps
our agent measured and committed as bundles (data/measured/: an H200's) fit only their own GPU's constants, never
the shared ones or our H100's; bench/measured_gpus.py scores them held out."""


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}%"


def layers_markdown(layers: dict[str, Any]) -> str:
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


REPEAT_NOTES = """What it shows: where the host sets the step (batch 32) a repeat of the same step on another
day and machine is 15-18% off on average, more than the model held out (8-12%: it answers a central value, a repeat
carries both runs' noise), so no predictor of one run gets far below ~10% there: the host's run-to-run speed is in
no input. Where the device sets the step (batch 128-256) repeats agree to 0.1-7% and the model held out is 4-15%
off: that gap is the model's own, and it is where the goal of 8% per configuration is lost for fp16 (bf16 is 8.8%).
Those errors follow the CNN (at batch 128-256: vgg16 +25% in AdamW fp16 alone, +3 to -6% otherwise; resnet50 +3 to
+16% in every configuration; mnasnet1_0 -14 to +14%). Batch norm costed by its channels' reduction length where it
has fewer channels than the GPU has SMs (docs/MODELS.md; the constant, 4.1 SM cycles per element, read from the H200
bundle's operator timings, not fitted to these steps) took the three configurations from 7.6 / 9.8 / 11.4% to 7.0 /
8.7 / 10.5% (fp32 / bf16 / fp16) and resnet18 at those batches from -1 to -22% to -11 to +5%; our H200's steps held
out by CNN went from 15.5% to 14.0%, the public rows held out by GPU family from 20.4% to 19.5% (step-only 7.4% to
7.2%). Its first form costed whole waves of channels past the SMs and read batch norm's bytes' passes from every
timing, narrow ones too; the form now (the channels' law below the SM count only, the passes from the timings over
as many channels as SMs or more: 6.6 where all read 8.2) was chosen on the H200 bundle's own 95 large batch norms,
28% off on average before and 14.5% after, not on steps. On steps it moved these three to 7.0 / 9.0 / 10.9% (vgg16
in AdamW fp16 from +21% to +27%), our H200's by CNN from 14.0% to 13.7% (fp16 at batch 128-256 7.7% to 6.2%), the
public step-only rows by GPU family from 7.2% to 6.3% (AMP 7.5% to 5.9%), the seven GPUs nobody measured from
6.4% to 4.8% (the B200's AMP step now outside its band: -20%), the H200 from public rows alone from 20.2%
to 14.6% (bench/crossed.py). bf16's channels' law at its own rate (PyTorch's kernels, 1.29x fp32's time on the same
few-channel batch norms in the bundle: 5.3 cycles, fp16 keeping cuDNN's 4.1) then took bf16 from 9.0% to 8.8%, our
H200's by CNN to 13.3% (bf16 at batch 128-256 14.7% to 12.6%), the H100 from public rows and the H200's to 10.1%.
What was looked at: resnet18's and resnet50's opposite signs in every configuration, then the bundle's batch-norm
timings by channel count; one try with the constant at 4 (what the 112x112 rows show) before it was computed from
the bundle (4.09); a try at 2 gave 7.5 / 9.8 / 11.0%. Depthwise
convs costed by SM cycles (depthwise.py) took mobilenet_v2's and mnasnet1_0's bf16 and fp32 errors from 11-20% to
5-15% (before: mobilenet_v2 +13 to +20% too slow, mnasnet1_0 -18 to -29% too
fast at those batches: the public conv model, which has seen no 5x5 depthwise layer, costed mnasnet's depthwise
convs at 0.7x mobilenet_v2's where the cycles per element make them alike). What was looked at: the per-CNN errors
above pointed at those two CNNs; the form (a launch time, cycles per input element and per multiply-add) was written
once from the H200 layers' per-element times and scored on these held-out figures (a quick check with every layer
in its fit, then this table, the held-out CNN's layer shapes out of it); no other form was tried.

Linear layers applied at every position (2026-12-01). A linear's weights were taken as its FLOPs / 2 per sample,
right for a classifier and wrong by the number of positions for ConvNeXt's MLPs (and Swin's and ViT's): ConvNeXt-T
read 4.2 billion "weights" a pass, so its 16-bit linear time was 14 ms whatever the batch. Held out by CNN on our H200
(bench/crossed.py's per-CNN table) convnext_tiny's bf16 steps were predicted +100 to +251% too slow, its fp16 ones
-18 to -44% (the fit had bent the linear multipliers to fit it: bf16's 0.42x, and 4.5x with convnext_tiny held out).
The weights are now at most the network's parameters (docs/MODELS.md), which took our H200's by CNN from 13.3% to
11.5% and our H100's from 7.0 / 8.8 / 11.0% to 7.1 / 9.4 / 11.2% (fp32 / bf16 / fp16; no H100 CNN of ours has such a
linear: the host's shared costs moved); bf16's and fp16's linear multipliers tied then (same cuBLAS rate, same
bytes; they had drifted 0.47x and 1.67x apart on the H100) gave 11.1% and 7.1 / 9.2 / 10.9%. The public step-only
rows by GPU family stayed at 6.3%. What was looked at: the H200 per-CNN table, then the parts of convnext_tiny's
held-out answer; the bound was written from the principle and scored once, the tie tried once after that score,
both with these held-out figures in view; bf16 on our H100 is 0.3 point worse than before the change, and kept for
the H200's 21 CNNs, nine of them outside our H100 set.

Layer norms under autocast in fp32, and operators' passes read by the bytes really moved (2026-12-01). Autocast runs
layer and group norms in fp32 behind casts, and they had been costed as 16-bit batch norms; bf16's operator timings
had been kept down to 64 MB really moved, where the backward's fixed cost read as passes (bf16 activations 4.9
against fp32's 2.7). Both were written from the principle (docs/MODELS.md, op_passes.MIN_BYTES) and refitted once:
our H100's three configurations 7.06 / 9.18 / 10.90% to 7.03 / 9.33 / 10.95%, our H200's by CNN 11.08% to 10.87%
(ConvNeXt-T's 16-bit steps 1-4 points nearer), the public step-only rows by GPU family 6.33% to 6.30%, the bands
holding 84% of our H100's held-out steps (82% before). Each of our machines from constants fitted without any of its
steps (bench/crossed.py) moved most where the device sets the step (batch 128-256: the H100 from public rows alone
8.7 / 8.9% to 6.6 / 6.6% in bf16 / fp16, the H200 12.3 / 13.5% to 6.5 / 7.1%) and got worse where the host does (the
H100's 16-64 from public rows alone 15-19% to 18-30%: public rows time large batches and teach no host cost). Two
ResNet-50 checks got worse: the seven GPUs nobody measured 4.8% to 5.6% (AMP 3.8% to 5.4%: GH200 0% to -4%, B200
-20% to -23%) and the AMP speedup over fp32 held out by GPU family 3.4% to 4.7% (A100s +2-3% to +6-7%): autocast's
memory-bound operators now cost less, and the shared constants carry it to every GPU. What was looked at: our H100's
in-sample parts per CNN at batch 256, which put its fitted 16-bit multiplier for memory-bound operators near 0.5x
and tensor-core convs' near 1.2x; then the H200's operator timings by size. Three structures tried on these same
held-out figures were not shipped (docs/MODELS.md): none separated the two multipliers, and none took bf16 or fp16
under 8%."""
H100_NOTES = """The H100 steps are ours (data/reference/h100/README.md: PyTorch 2.11, cuDNN 9.19, cudnn.benchmark
off, NCHW, synthetic data on the GPU); the reference's answers are for that setting. Before this model (model.json
at 648d0c0: flat 10 us per operator, six scales fitted on Lambda alone) the same rows were 31.8 / 46.5 / 49.0% off
(sgd/fp32, sgd+momentum/amp_bf16, adamw+wd/amp_fp16), every point too fast. What was looked at while designing: these
held-out figures (the model's parts and ridge strengths were chosen with them in view; there is no untouched H100
test set here; the team keeps other CNNs of the same run apart for that). The band is the 5th-95th percentile of
the held-out errors of a point's kind (precision group, host- or device-bound): the 10th-90th held only the share
in the table of a held-out CNN's steps, since errors cluster by CNN."""


def h100_section(own: dict[str, Any]) -> list[str]:
    """Markdown: leave-one-CNN-out on our H100 steps, per configuration, kind and CNN."""
    out = [
        "### Our H100 steps, CNN held out",
        "",
        f"{own['environment']}; batch 16-256 at 224 px, every figure predicted by whole-step constants fitted "
        "without that CNN's H100 rows (public rows and the other CNNs kept), and conv models without any layer our "
        "agent timed (data/measured/) of that CNN's layer shapes, at any input size.",
        "",
        "| configuration | steps | model MAPE | public-only fit | FLOPs at peak | predicted too fast "
        "| P10 / P90 log(meas/pred) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for name, v in own["by_config"].items():
        out.append(
            f"| {name} | {v['rows']} | **{_pct(v['mape'])}** | {_pct(v['public_only_mape'])} | "
            f"{_pct(v['flops_mape'])} | {v['under_pct']:.0f}% | {v['log_ratio_p10']:.2f} / {v['log_ratio_p90']:.2f} |"
        )
    grid = own["grid"]
    out.append(
        f"| all | {grid['rows']} | **{_pct(grid['mape'])}** | {_pct(grid['public_only_mape'])} | "
        f"{_pct(grid['flops_mape'])} | | {grid['log_ratio_p10']:.2f} / {grid['log_ratio_p90']:.2f} |"
    )
    if "sweep_only" in own:
        out += ["", f"The batch sweep's other sizes (vgg16, resnet50, sgd/fp32): {_pct(own['sweep_only']['mape'])}."]
    out += [
        "",
        "Per kind (what each point's `reference_error_pct` and band quote; a GPU of another family quotes the worse "
        "of this and the public leave-one-GPU-out figure):",
        "",
        "| precision group | regime | steps | MAPE | band (log meas/pred) |",
        "|---|---|---:|---:|---:|",
    ]
    for group, kinds in own["by_group_regime"].items():
        for regime, v in kinds.items():
            out.append(
                f"| {group} | {regime}-bound | {v['rows']} | {_pct(v['mape'])} | "
                f"{v['band_low']:.2f} … {v['band_high']:.2f} |"
            )
    tails = own.get("band_coverage_by_tail", {})
    out += [
        "",
        f"Share of a held-out CNN's steps inside the band (bands from the other CNNs' errors, nested): "
        f"**{own['band_coverage_pct']:.0f}%** (goal ~80%; with the 10th-90th percentiles: "
        f"{tails.get('0.1', float('nan')):.0f}%).",
        "",
        "Per held-out CNN: MAPE and, in brackets, the signed mean error (predicted over measured, %: + too slow):",
        "",
        "| held-out CNN | " + " | ".join(own["by_config"]) + " |",
        "|---|" + "---:|" * len(own["by_config"]),
    ]
    signed: dict[tuple[str, str], list[float]] = {}
    for cnn, config, _batch, measured, predicted, *_ in own["points"]:
        signed.setdefault((cnn, config), []).append((predicted / measured - 1) * 100)
    for cnn, by in own["by_cnn"].items():
        cells = [f"{_pct(by.get(c))} ({sum(signed[cnn, c]) / len(signed[cnn, c]):+.0f})" if (cnn, c) in signed
                 else _pct(by.get(c)) for c in own["by_config"]]  # fmt: skip
        out.append(f"| {cnn} | " + " | ".join(cells) + " |")
    out += ["", H100_NOTES, "", *repeat_section(own)]
    if own.get("settings"):
        out += ["", *settings_section(own["settings"])]
    return out


def repeat_section(own: dict[str, Any]) -> list[str]:
    """Markdown: the same steps measured twice, beside the held-out model on those steps (the floor under the goal)."""
    repeats = repeatability(load_h100())
    held = {(cnn, config, batch): abs(predicted - measured) / measured * 100
            for cnn, config, batch, measured, predicted, *_ in own["points"]}  # fmt: skip
    out = [
        "Repeatability: the same default-setting steps measured twice, in steps.jsonl and among the settings run's "
        "own default steps (H100 SXM machines, a day or more apart). *A repeat as the answer*: the mean error one "
        "run's step would have as the answer for the other's (both ways); the model column is the held-out model on "
        "the same steps (against steps.jsonl's).",
        "",
        "| configuration | batch | CNNs | a repeat as the answer | largest | model, CNN held out |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for config, by in repeats.items():
        for batch, v in by.items():
            model = [held[cnn, config, batch] for cnn, *_ in v["pairs"] if (cnn, config, batch) in held]
            out.append(
                f"| {config} | {batch} | {len(v['pairs'])} | {_pct(v['mape'])} | {_pct(v['largest'])} | "
                + (f"{_pct(sum(model) / len(model))} |" if model else "– |")
            )
    out += ["", REPEAT_NOTES]
    return out


def settings_section(settings: dict[str, Any]) -> list[str]:
    """Markdown: channels_last and cudnn.benchmark on our H100, held out by CNN, as effects on the same run's step."""
    out = [
        "### channels_last and cudnn.benchmark on our H100, CNN held out",
        "",
        "data/reference/h100/steps_settings.jsonl (bench/gpu_settings.py on H100 SXM 80GB machines, 2026-11-27, two "
        "runs: 12 CNNs at batch 32 and 128, resnet50 and resnet18 at 256, each configuration in the four settings, "
        "the default setting in the same run; its cudnn.benchmark rows are left out, below) and "
        "steps_cudnn_benchmark_on.jsonl (the team's, SGD fp32, batch 32 and "
        "128, 5 CNNs; its default-setting steps are those of steps.jsonl, two days earlier). The effect is a step's "
        "time over the same CNN's default-setting step; *ratio error* compares the predicted effect with the measured"
        " one, *no-effect error* is what answering the default-setting step (what the reference did before) errs by, "
        "*step error* is the held-out step itself. Every figure is predicted by constants fitted without that CNN's "
        "H100 rows.",
        "",
        "| setting | configuration | steps | measured effect (median) | ratio error | no-effect error | step error |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for key, v in settings.items():
        setting, config = key.split(" ", 1)
        measured = sorted(p[2] for p in v["points"])
        none = sum(abs(1 - p[2]) / p[2] for p in v["points"]) / len(v["points"]) * 100
        out.append(
            f"| {setting} | {config} | {v['rows']} | {measured[len(measured) // 2]:.2f}× | **{_pct(v['ratio_mape'])}**"
            f" | {_pct(none)} | {_pct(v['step_mape'])} |"
        )
    out += [
        "",
        "What it shows: channels_last is worth 0.4-0.8× the NCHW step wherever the device sets the step (batch 128 "
        "and up), in fp32 too (TF32 convs), and about nothing at batch 32, where the host's dispatch sets it; "
        "the settings run's rows with cudnn.benchmark on, in either layout, did not search: PyTorch reused the cuDNN "
        "plans the benchmark-off step just before them had cached (data/reference/h100/README.md), so they are "
        "repeats of the default, left out of the fit and of this table. cudnn.benchmark is scored on the team's "
        "steps with a real search alone (SGD fp32, a process of their own: 0.97-1.00x at batch 128), where the "
        "predicted effect errs about as much as answering no effect: 10 steps, half of them at batch 32, where the "
        "host sets the step and run-to-run noise is larger than the setting. The host-bound rows moved by up to "
        "±20% either way, run-to-run noise (the default steps of two runs two days apart differ that much at batch "
        "32). The multipliers are one GPU's: on another "
        "GPU the setting scales the same kinds of work by the same factors, which is an assumption no data here "
        "checks. The NHWC parts fitted (tensor-core convs, grouped convs, memory-bound operators) were chosen over "
        "fitting every part by these same held-out figures on the first run's 8 CNNs (two variants tried), so they "
        "flatter the model a little; the second run's 4 CNNs came after that choice.",
    ]
    return out


def body(acc: dict[str, Any], version: str, seconds: float) -> str:
    """The whole section text."""
    steps = acc["whole_steps"]
    head = steps["headline"]
    out = [
        f"Command: `{COMMAND}` (model `{version}`; the evaluation takes a few minutes on 2 cores"
        + (f", this run {seconds:.0f} s). " if seconds > 1 else ", run inside the fit). ")
        + "Fitted on public "
        "measurements (data/reference/LAYERS.md) and our own H100 and H200 steps (data/reference/h100/, h200/); "
        "every figure below is held out: the GPU family predicted (all its board variants, and our H100 and H200 "
        "steps for the H100 family) was left out of every fit that predicts it: layer models and the whole-step "
        "constants (nested leave-one-GPU-family-out); on our H100 steps, the CNN predicted (the H200's: "
        "bench/crossed.py).",
        "",
        "### Conv layers, leave-one-GPU-out (MAPE per phase; roofline = max(FLOPs/peak, bytes/bandwidth))",
        "",
        layers_markdown(acc["layers"]),
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
    if steps.get("step_only_bands"):
        out += [
            "",
            "The band a point on a GPU of another family than our H100 quotes (at least; wider where our "
            "H100's held-out steps of its kind were): P5-P95 of the step-only rows' log(measured / predicted), "
            "GPU held out, per precision; *inside* is the share of a GPU family's steps inside the band taken "
            "from the other families' errors (nested; the goal is ~80%):",
            "",
            "| precision | rows | MAPE | band (×low–×high of the answer) | inside |",
            "|---|---:|---:|---:|---:|",
        ]
        for group, b in steps["step_only_bands"].items():
            out.append(f"| {group} | {b['rows']} | {_pct(b['mape'])} | ×{math.exp(b['band_low']):.2f}–"
                       f"×{math.exp(b['band_high']):.2f} | {b['coverage_pct']:.0f}% |")  # fmt: skip
    # the headline sets are all ResNets; the other CNN families appear only in these rows
    for cat in ("partial_step", "other_framework"):
        if cat in steps:
            out += ["", f"{labels[cat]}, by CNN family:", "", group_table(steps[cat], "by_family", "CNN family")]
    out += ["", NOTES]
    if "h100" in acc:
        out += ["", *h100_section(acc["h100"])]
    return "\n".join(out)


def main(argv: list[str]) -> None:
    """Evaluate (or, with --stored, take the figures the fit stored in model.json), print, write the section."""
    global COMMAND
    start = time.time()
    if "--stored" in argv:
        # the same evaluation, run by `python -m prediction.reference.fit` when it wrote model.json
        model = load()
        acc, version = model.accuracy, model.version
        COMMAND = ".venv/bin/python -m prediction.reference.fit && " + COMMAND + " --stored"
    else:
        gpus = gpu_table()
        matrix = layerfit.layer_matrix(layer_table(), gpus)
        acc = accuracy(gpus, matrix, fit_params(gpus, matrix))
        try:
            version = load().version
        except FileNotFoundError:
            version = "not fitted"
    text = body(acc, version, time.time() - start)
    print(text)
    write_section("Reference predictor accuracy", text)


if __name__ == "__main__":
    main(sys.argv[1:])
