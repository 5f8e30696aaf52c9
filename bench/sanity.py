"""ResNet-50 images/s the shipped reference predicts for every GPU it knows, beside every public figure we can cite.

Run: .venv/bin/python bench/sanity.py  (no database; seconds; writes its section of docs/PERFORMANCE.md)
Predictions: batch 256, 224 px, SGD with momentum (DeepLearningExamples' recipe), cudnn.benchmark off, in fp32,
amp_fp16 and amp_bf16, NCHW and NHWC (prediction/reference/sanity.py). Beside them: Lambda's measured ResNet-50
throughput for the same GPU model (DeepLearningExamples, synthetic data, NCHW, cudnn.benchmark on, each at its
largest batch, data/reference/whole_steps.csv) and our own H100 steps at batch 256 (data/reference/h100/).
The orderings tests/unit/test_reference_sanity.py holds are checked here too and any break is listed.
"""

import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.perf_doc import write_section  # noqa: E402
from prediction.reference import load, sanity, step_rows  # noqa: E402
from prediction.reference.wholestep import WHOLE_STEPS  # noqa: E402

COMMAND = ".venv/bin/python bench/sanity.py"


def lambda_figures() -> dict[tuple[str, str], tuple[float, int, int]]:
    """(GPU, fp32 | amp_fp16) → (median images/s, batch, runs) of Lambda's ResNet-50 rows (step-only timers)."""
    found: dict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
    with open(WHOLE_STEPS, newline="") as fh:
        for r in csv.DictReader(fh):
            if not r["set"].startswith("lambda") or r["cnn"] != "resnet50" or r["input_bound"] == "true":
                continue
            if r["precision"] not in ("fp32", "amp_fp16") or "synthetic" not in r["includes"]:
                continue
            batch = int(r["batch_size"])
            found[(r["gpu"], r["precision"])].append((batch / float(r["step_ms"]) * 1e3, batch))
    return {
        k: (statistics.median(v for v, _ in rows), rows[0][1], len(rows)) for k, rows in found.items()
    }  # fmt: skip


def our_h100() -> dict[str, float]:
    """'<config> NCHW|NHWC' → images/s of resnet50 at batch 256 in our H100 settings run (cudnn.benchmark off)."""
    out = {}
    for r in step_rows.load_h100():
        ours = r.set == step_rows.SETTINGS_SET and r.cnn == "resnet50" and r.batch == 256
        if ours and r.training is not None and not r.training.cudnn_benchmark:
            precision = r.training.precision
            config = next(k for k, v in step_rows.CONFIGS.items() if v.precision == precision)
            out[f"{config} {'NHWC' if r.training.channels_last else 'NCHW'}"] = 256 / r.step_ms * 1e3
    return out


def report() -> str:
    """The markdown section."""
    catalog = set(sanity.catalog_gpus())
    # The catalog's GPUs first, then those only a user's own machine type (or `local`'s agent) names.
    rows = sanity.table(load(), sorted(sanity.gpu_rows(), key=lambda g: (g not in catalog, g)))
    public = lambda_figures()
    labels = list(sanity.SETTINGS)
    lines = [
        f"Command: `{COMMAND}` (no database; seconds). Predicted images/s, ResNet-50 at batch 256, 224 px, SGD with "
        "momentum, cudnn.benchmark off, by the shipped reference model (GPUs in its fit: these are not held out), "
        "for every GPU data/gpus.csv knows: those of a catalog machine type first, then the ones only your own "
        "machine type names (in italics). "
        "Lambda: measured images/s for the same GPU model at its own largest batch (DeepLearningExamples, synthetic "
        "data, NCHW, cudnn.benchmark on; median over systems).",
        "",
        "| GPU | " + " | ".join(labels) + " | Lambda fp32 | Lambda AMP |",
        "|---|" + "---:|" * (len(labels) + 2),
    ]
    for r in rows:
        cells = ["–" if r.images_per_s[k] is None else f"{r.images_per_s[k]:,.0f}" for k in labels]
        measured = []
        for precision in ("fp32", "amp_fp16"):
            figure = public.get((r.gpu, precision))
            measured.append("–" if figure is None else f"{figure[0]:,.0f} (b{figure[1]})")
        name = r.gpu if r.gpu in catalog else f"*{r.gpu}*"
        lines.append(f"| {name} | " + " | ".join(cells) + " | " + " | ".join(measured) + " |")
    ours = our_h100()
    if ours:
        lines += ["", "Our H100 SXM 80GB, measured at batch 256 (data/reference/h100/steps_settings.jsonl; its "
                  "configurations, not the table's SGD with momentum):", "",
                  "| configuration | NCHW | NHWC | NHWC ÷ NCHW step |", "|---|---:|---:|---:|"]  # fmt: skip
        for config in step_rows.CONFIGS:
            nchw, nhwc = ours.get(f"{config} NCHW"), ours.get(f"{config} NHWC")
            if nchw and nhwc:
                lines.append(f"| {config} | {nchw:,.0f} | {nhwc:,.0f} | {nchw / nhwc:.2f}× |")
    lines += ["", "Every GPU Lambda measured, predicted as Lambda ran it (its batch, NCHW, cudnn.benchmark on, SGD "
              "with momentum, TF32 matmuls in fp32 as NGC allows) by the shipped model, GPU not held out:", "",
              "| GPU | fp32 measured | predicted | error | AMP measured | predicted | error |",
              "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    errors: list[tuple[str, str, float]] = []
    for gpu in sorted({g for g, _ in public}):
        cells = []
        for precision in ("fp32", "amp_fp16"):
            figure = public.get((gpu, precision))
            if figure is None:
                cells += ["–", "–", "–"]
                continue
            predicted = sanity.as_lambda(load(), gpu, "tf32" if precision == "fp32" else "amp_fp16", figure[1])
            errors.append((gpu, precision, (predicted / figure[0] - 1) * 100))
            cells += [f"{figure[0]:,.0f}", f"{predicted:,.0f}", f"{errors[-1][2]:+.0f}%"]
        lines.append(f"| {gpu} | " + " | ".join(cells) + " |")
    broken = sanity.violations(rows)
    lines += [
        "",
        "Orderings (tests/unit/test_reference_sanity.py): autocast not slower than fp32 on tensor-core GPUs; within a "
        "GPU model, a variant with at least as much of every figure (SMs, fp32 and fp16 peaks, bandwidth, power) not "
        "slower. " + ("All hold." if not broken else "Broken: " + "; ".join(broken) + "."),
        "",
        "Read with care. Only the H100's NHWC column rests on a measurement of NHWC; on every other GPU it is the "
        "H100's measured effect applied per kind of work. The H100 and the H200 answer with constants of their own "
        "(fitted on our steps of each), every other GPU with the shared ones; a GPU no public set and no step of ours "
        "measured (the Blackwell B200 and RTX 5090 among them) rests on its spec sheet's figures alone. "
        "An H100 NVL has 16% more bandwidth and 16% fewer tensor "
        "TFLOPS than an H100 SXM, so neither must be faster (no ordering), and ResNet-50 training here leans on "
        "bandwidth; an A100 PCIe 80GB against an A100 SXM4 40GB likewise (more bandwidth, less power). Lambda's "
        f"figures: {sum(abs(e) <= 10 for *_, e in errors)} of {len(errors)} within 10% (these GPUs are in the fit; "
        "held out, see Reference predictor accuracy); beyond it: "
        + (", ".join(f"{g} {'AMP' if p == 'amp_fp16' else p} {e:+.0f}%" for g, p, e in errors if abs(e) > 10) or "none")
        + ".",
    ]
    return "\n".join(lines)


def main() -> None:
    """Print the figures and write them into docs/PERFORMANCE.md."""
    text = report()
    print(text)
    write_section("ResNet-50 on every catalog GPU (sanity table)", text)


if __name__ == "__main__":
    main()
