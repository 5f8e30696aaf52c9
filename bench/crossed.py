"""Optimizer and precision crossed on our H200 (data/reference/h200/): how the reference answers them.

Run: .venv/bin/python bench/crossed.py  (no database; writes its section of docs/PERFORMANCE.md)
1. Held out: the figures the last `python -m prediction.reference.fit` stored (model.json accuracy "h200":
   each CNN predicted by the H200's constants fitted without any of its steps).
2. The shipped model as it is, on the same steps: with the H200's own constants, and with the shared constants
   every GPU nobody measured gets; the crossed pairs' ratios (one thing swapped, one run) beside the measured.
3. Between our two machines, held out: each one's steps predicted by the constants a GPU nobody measured gets
   (wholestep.calibrate as fit.fit_steps runs it), fitted on the public rows alone, or on them and the other
   machine's steps; none of the predicted machine's own steps (nor bundles) in the fit.
4. The fixed device cost of a conv call per precision group, shared and the H200's, and what it adds to a
   resnet50 step (53 convs).
A model fitted before these steps existed scores them out of sample: run this with that model.json in place
(`--label` names the column).
"""

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.perf_doc import write_section  # noqa: E402
from prediction.reference import h200, load  # noqa: E402
from prediction.reference.fit import gpu_table  # noqa: E402
from prediction.reference.h200 import PAIRS, summarise  # noqa: E402
from prediction.reference.model import ReferenceModel  # noqa: E402
from prediction.reference.step_rows import CONFIGS, GPU, H200_FILES, H200_GPU, load_own  # noqa: E402
from prediction.reference.steps import PRECISION_GROUPS  # noqa: E402
from prediction.reference.wholestep import network  # noqa: E402

COMMAND = ".venv/bin/python bench/crossed.py"


def shipped(model: ReferenceModel, shared: bool) -> dict[str, Any]:
    """The model's answers for the H200 steps (its own constants, or the shared ones), summarised."""
    gpu = gpu_table()[H200_GPU]
    use = ReferenceModel({**model.params, "step_families": {}}) if shared else model
    rows = [r for r in load_own() if r.set in H200_FILES]
    predicted = {}
    for r in rows:
        convs, work = network(r.cnn, r.image_size)
        [est] = use.predict_steps(convs=convs, workload=work, batch_sizes=[r.batch], gpu=gpu, training=r.training)
        predicted[id(r)] = est.step_ms
    return summarise(rows, predicted)


def transfer(model: ReferenceModel) -> str:
    """Markdown: each machine's default-setting steps predicted from public rows, and from them and the other's."""
    gpus = gpu_table()
    lines = ["| predicted | fitted on | fp32 16-64 | fp32 128-256 | bf16 16-64 | bf16 128-256 | fp16 16-64 | "
             "fp16 128-256 | all |", "|---|---|" + "---:|" * 7]  # fmt: skip
    for gpu, other in ((GPU, H200_GPU), (H200_GPU, GPU)):
        for label, other_too in (("public rows", False), (f"public rows + our {other} steps", True)):
            errs = h200.transfer(model, gpus, gpu, other_too)
            cells = [_fmt(float(np.mean(errs[(g, small)]))) if (g, small) in errs else "–"
                     for g in ("fp32", "bf16", "fp16") for small in (True, False)]  # fmt: skip
            every = [e for v in errs.values() for e in v]
            lines.append(
                f"| {gpu} ({len(every)} steps) | {label} | " + " | ".join(cells) + f" | {np.mean(every):.1f} |"
            )
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    return "–" if v is None else f"{v:.1f}"


def table(results: dict[str, dict[str, Any]]) -> str:
    """Markdown: per configuration (small and large batches) and per pair, one column per result."""
    names = list(results)
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    lines.append("| all steps, MAPE % | " + " | ".join(_fmt(results[n].get("mape")) for n in names) + " |")
    for config in CONFIGS:
        for label in ("small", "large"):
            cells = [_fmt(results[n].get("by_config", {}).get(config, {}).get(f"mape_{label}")) for n in names]
            sizes = "16-64" if label == "small" else "128-256"
            lines.append(f"| {config}, batch {sizes}, MAPE % | " + " | ".join(cells) + " |")
    for changed, reference in PAIRS:
        key = f"{changed} / {reference}"
        cells = []
        for n in names:
            p = results[n].get("pairs", {}).get(key, {})
            cells.append(
                "–" if not p.get("rows") else
                f"{p['ratio_mape']:.1f}% (mean {p['measured_mean']:.2f}x measured, {p['predicted_mean']:.2f}x model)"
            )  # fmt: skip
        lines.append(f"| ratio {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def by_cnn(held: dict[str, Any]) -> str:
    """Markdown: held out by CNN, each configuration's mean signed error (+: predicted slower than measured)."""
    cnns = held.get("by_cnn", {})
    if not cnns:
        return "(no per-CNN figures stored: refit with `python -m prediction.reference.fit`)"
    lines = ["| CNN | " + " | ".join(CONFIGS) + " |", "|---|" + "---:|" * len(CONFIGS)]
    for cnn, errs in cnns.items():
        lines.append(f"| {cnn} | " + " | ".join("–" if c not in errs else f"{errs[c]:+.0f}%" for c in CONFIGS) + " |")
    return "\n".join(lines)


def conv_costs(model: ReferenceModel) -> str:
    """The fixed device time of a conv call per precision group: shared, and the H200's own."""
    fam = model.params.get("step_families", {}).get("H200", {})
    rows = ["| constants | " + " | ".join(PRECISION_GROUPS) + " |", "|---|---|---|---|"]
    for name, p in (("shared (GPUs nobody measured)", model.params["step"]), ("the H200's own", fam)):
        cells = [f"{p[f'dev_conv_calls_{g}']:.3f} ms ({53 * p[f'dev_conv_calls_{g}']:.1f} ms in resnet50)"
                 for g in PRECISION_GROUPS] if p else ["–"] * 3  # fmt: skip
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Score, print, write the section."""
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--label", default="this model")
    a.add_argument("--no-write", action="store_true", help="print only (e.g. for an older model.json)")
    args = a.parse_args(argv)
    model = load()
    held = model.params.get("accuracy", {}).get("h200", {})
    results = {
        f"{args.label}: held out by CNN (H200 constants)": held,
        f"{args.label}: as shipped, H200 constants": shipped(model, shared=False),
        f"{args.label}: as shipped, shared constants": shipped(model, shared=True),
    }
    body = "\n\n".join([
        "Our H200's steps in five configurations (data/reference/h200/): the H100's three and the two that cross "
        "optimizer and precision. Ratios are one step over the other of the same CNN, batch and run.",
        table(results),
        "Held out by CNN, the mean signed error of each configuration's steps (+: predicted slower than measured; "
        "steps_more.jsonl's nine CNNs, at batch 16, 64 and 256, are in no H100 set of ours):",
        by_cnn(held),
        "Between our two machines (MAPE %, each machine's steps held out of the fit that predicts them):",
        transfer(model), "A conv call's fixed device time:", conv_costs(model),
    ])  # fmt: skip
    print(body)
    if not args.no_write:
        write_section("Optimizer and precision crossed on an H200", body + f"\n\n`{COMMAND}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
