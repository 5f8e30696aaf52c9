"""`python -m prediction.reference.fit`: fit the reference model on the public data in the repo, write model.json.

Deterministic: LightGBM runs with deterministic=True and fixed seeds, JSON is written with sorted keys; model.json's
"provenance" holds the sha256 of every input file, the library versions and this command, and
tests/unit/test_reference_rebuild.py refits the whole-step constants and checks them against it.
Where each whole-step constant comes from:
- memory_efficiency: median fraction of the spec bandwidth NeuSight relu/add reach on tensors far
  larger than L2 (PyTorch 2.1 elementwise kernels); isolated_op_floor_ms: their median time on tiny
  tensors (~25 us, event timing included: informational; whole steps use the back-to-back floor below);
- linear_efficiency: fitted here on NeuSight linear (cuBLAS, PyTorch 2.1);
- kernel_floor_ms 0.004: a small kernel back to back in one stream (launch latency 2-5 us, NVIDIA's
  CUDA best-practices guide); passes_<kind>_<group> (fp32, fp16): each memory-bound kind's forward + backward
  passes over its counted bytes, timed by our agent (prediction/reference/op_passes.py, data/measured/ bundles);
  backward_bytes_ratio 2, for a kind never timed: backward reads the saved input and the output gradient and
  writes the input gradient;
- dev_*, host_*, smooth_max_q: device multipliers per part and precision group, host dispatch costs and the
  overlap of host and device, fitted by prediction/reference/stepfit.py on the step-only public whole-network rows
  (Lambda) and our own H100 steps (data/reference/h100/), ridge toward their priors (stepfit.PRIORS: PyTorch
  eager's ~10 us per operator and pass, "overheads of ~10us per op" in the PyTorch 2 docs' motivation for
  torch.compile); the accuracy figures refit them without the GPU family, or the CNN, predicted (nested).
"""

import gzip
import hashlib
import json
import platform
import sys
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from prediction.reference import data, depthwise, layerfit, measured, op_passes, step_rows, stepfit
from prediction.reference.convs import FEATURES
from prediction.reference.model import MODEL_JSON, ReferenceModel, from_json_text
from prediction.reference.specs import GpuSpecs, family_of

STEP_DEFAULTS: dict[str, float] = {
    "kernel_floor_ms": 0.004,
    "backward_bytes_ratio": 2.0,
    "backward_kernels_per_op": 1.0,
    "optimizer_kernels": 12.0,
    **stepfit.PRIORS,
}


def layer_table() -> data.LayerTable:
    """The conv layers the fit learns from: the public ones and our agent's (data/measured/)."""
    return measured.with_layers(data.load_layers())


def gpu_table() -> dict[str, GpuSpecs]:
    """data/gpus.csv as GpuSpecs by name."""
    return {row["gpu"]: GpuSpecs.from_row(row).filled() for row in data.gpu_rows()}


def fit_memory_ops(gpus: dict[str, GpuSpecs], exclude: Sequence[str] = ()) -> dict[str, float]:
    """Memory efficiency and isolated-op floor from NeuSight relu/add, linear efficiency from NeuSight linear."""
    names = data.alias_map()
    streaming, small = [], []
    for op, tensors in (("relu", 2.0), ("add", 3.0)):
        for r in data._read(data.LAYERS / f"neusight_{op}.csv.gz"):
            gpu = names[r["Device"].lower()]
            if layerfit.gpu_family(gpu) in exclude:
                continue
            t = float(r["Latency"])
            nbytes = float(r["B"]) * float(r["H"]) * 4 * tensors
            spec = gpus[gpu]
            # only tensors far larger than L2 show DRAM bandwidth (training activations are that large)
            if nbytes > 4 * float(spec.l2_mib or 6) * 2**20 and nbytes > 64e6:
                streaming.append(nbytes / (spec.mem_bandwidth_gbs * 1e9) * 1e3 / t)
            elif nbytes < 64e3:
                small.append(t)
    ratios = []
    for r in data._read(data.LAYERS / "neusight_linear.csv.gz"):
        gpu = names[r["Device"].lower()]
        if layerfit.gpu_family(gpu) in exclude:
            continue
        b, m, n, k = (float(r[c]) for c in ("B", "M", "N", "K"))
        spec = gpus[gpu]
        roof = max(
            2 * b * m * n * k / (spec.fp32_tflops * 1e12),
            4 * b * (m * k + k * n + m * n) / (spec.mem_bandwidth_gbs * 1e9),
        )
        if roof * 1e3 > 0.2:  # only GEMMs long enough that the launch floor does not hide the efficiency
            ratios.append(roof * 1e3 / float(r["Latency"]))
    return {
        "memory_efficiency": float(np.median(streaming)) if streaming else 0.8,
        "isolated_op_floor_ms": float(np.median(small)) if small else 0.02,
        "linear_efficiency": float(np.median(ratios)) if ratios else 0.5,
    }


def base_step(gpus: dict[str, GpuSpecs], exclude: Sequence[str] = ()) -> dict[str, float]:
    """The whole-step constants measured apart from whole steps: the defaults, the public ReLU/add/linear
    efficiencies and each operator kind's passes over memory (from the bundles' operators, op_passes.py)."""
    step = dict(STEP_DEFAULTS)
    step.update(fit_memory_ops(gpus, exclude))
    step.update(op_passes.from_bundles(measured.files(), gpus))
    return step


def fit_params(
    gpus: dict[str, GpuSpecs],
    matrix: layerfit.LayerMatrix,
    rows: np.ndarray | None = None,
    exclude: Sequence[str] = (),
    calibrate: bool = True,
) -> dict[str, Any]:
    """Every fitted parameter except accuracy, optionally without some rows / GPU families."""
    step = base_step(gpus, exclude)
    params: dict[str, Any] = {
        "format": 1, "features": list(FEATURES), "conv": layerfit.fit_conv(matrix, rows), "step": step,
        "depthwise": fit_depthwise(gpus, measured.depthwise_fit_rows(), exclude),
    }  # fmt: skip
    if calibrate:
        shared, params["step_families"] = fit_steps(ReferenceModel(params), gpus, exclude)
        step.update(shared)
    return params


def fit_steps(
    model: ReferenceModel,
    gpus: dict[str, GpuSpecs],
    exclude: Sequence[str] = (),
    leave_out: Callable[[step_rows.StepRow], bool] = lambda _: False,
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """The whole-step constants every GPU gets (device multipliers with each GPU family weighing at most the median
    family, host costs from the full fit), and for each GPU model with steps of our own, its own (the public rows and
    its steps at full weight): model.json "step" and "step_families". leave_out: rows kept out of every fit.

    A bundle's steps (data/measured/) teach their own GPU's constants, not yet the shared ones: bf16's device costs
    are learnt from Hopper steps alone, and those of our H200 bundle moved every Ampere GPU's bf16 answer by 9% (the
    L4's below its fp32). Our H200 steps of data/reference/h200/ do join the shared fit: they alone cross the
    optimizer with the precision, and constants fitted on them predict our H100 better than the public rows alone
    (bench/crossed.py), where the H100's steps, which tie AdamW to fp16, teach constants that predict the H200 worse."""
    from prediction.reference import measured, wholestep

    skip = list(exclude)

    def shared_out(r: step_rows.StepRow) -> bool:
        return leave_out(r) or r.set.startswith(measured.SET_PREFIX)

    full = wholestep.calibrate(model, gpus, skip, shared_out)
    # The host's costs come from our own steps alone (public sets time large batches): the full fit's.
    shared = wholestep.calibrate(model, gpus, skip, shared_out, balance=True, held=full)
    families = {
        family: {
            **model.params["step"],
            **wholestep.own_constants(model, gpus, family, skip, leave_out, settings=shared),
        }
        for family in wholestep.own_families(skip, leave_out)
    }
    return shared, families


def fit_depthwise(
    gpus: dict[str, GpuSpecs], rows: Sequence[depthwise.LayerRow], exclude: Sequence[str] = (),
    shapes: frozenset[str] = frozenset(),
) -> dict[str, list[list[float]]]:  # fmt: skip
    """Depthwise convs' issue costs (depthwise.py) from the bundles' layers, less those of excluded GPU families (same
    chip together, as wholestep.evaluate holds them out) and of these layer shapes (layerfit.layer_shape)."""
    kept = [r for r in rows if family_of(r[0]) not in exclude and layerfit.layer_shape(r[2]) not in shapes]
    return depthwise.fit(kept, gpus)


def conv_without(
    matrix: layerfit.LayerMatrix, params: dict[str, Any], gpus: dict[str, GpuSpecs]
) -> Callable[[str], dict[str, Any]]:
    """cnn → the conv parameters ("conv" models, "depthwise" costs) fitted without any layer our agent timed that
    has one of the CNN's layer shapes (at any input size), so a CNN held out from the whole-step fit is held out
    from the conv fit too; params' own where no such layer was timed."""
    from prediction.reference import wholestep

    timed = measured.depthwise_fit_rows()

    @cache  # the H100's and the H200's evaluations hold out many of the same CNNs
    def conv_of(cnn: str) -> dict[str, Any]:
        layers, _ = wholestep.network(cnn, 224)
        shapes = frozenset(layerfit.layer_shape(spec) for spec, _ in layers)
        drop = matrix.ours_shaped_as(set(shapes))
        if not drop.any():
            return {"conv": params["conv"], "depthwise": params.get("depthwise", {})}
        return {"conv": layerfit.fit_conv(matrix, ~drop), "depthwise": fit_depthwise(gpus, timed, (), shapes)}

    return conv_of


def _layer_predict(fitted: dict[str, Any], x: np.ndarray, roof: np.ndarray) -> np.ndarray:
    return ReferenceModel({"conv": fitted, "step": STEP_DEFAULTS}).conv_from_features(x, roof)


def accuracy(gpus: dict[str, GpuSpecs], matrix: layerfit.LayerMatrix, params: dict[str, Any]) -> dict[str, Any]:
    """Held-out figures: leave-one-GPU-out on layers and public whole steps, leave-one-CNN-out on our H100 and H200
    steps (see bench/reference_accuracy.py, bench/crossed.py)."""
    from prediction.reference import h100, h200, wholestep

    layers = layerfit.logo_layers(matrix, _layer_predict)
    steps = wholestep.evaluate(gpus, matrix, fit_params)
    conv_of = conv_without(matrix, params, gpus)
    own = h100.evaluate(ReferenceModel(params), gpus, conv_of)
    head = steps["headline"]
    return {
        "whole_step_mape": head["mape"],
        "whole_step_log_ratio_p10": head["log_ratio_p10"],
        "whole_step_log_ratio_p90": head["log_ratio_p90"],
        "whole_step_rows": head["rows"],
        **{
            f"whole_step_{key}_step_only": steps.get("headline_step_only", {}).get(key)
            for key in ("mape", "log_ratio_p10", "log_ratio_p90", "rows")
        },
        "whole_step_bands": steps.get("step_only_bands", {}),
        "layer_logo_mape": {p: v["mape"] for p, v in layers["mean_over_gpus"].items()},
        "layer_logo_roofline_mape": {p: v["roofline_mape"] for p, v in layers["mean_over_gpus"].items()},
        "evaluated_on": (
            "leave-one-GPU-out: each GPU's layer rows (NeuSight, DeepBench, Benanza) and whole steps "
            f"(data/reference/whole_steps.csv: {head['description']}) predicted by a model fitted without that GPU"
        ),
        "layers": layers,
        "whole_steps": steps,
        "h100": own,
        "h200": h200.evaluate(ReferenceModel(params), gpus, conv_of),
    }


def _round(obj: Any) -> Any:
    if isinstance(obj, float):
        return float(f"{obj:.6g}")
    if isinstance(obj, dict):
        return {k: _round(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_round(v) for v in obj]
    return obj


COMMAND = "python -m prediction.reference.fit"


def inputs() -> list[Path]:
    """Every file the fit reads, in a fixed order: GPU figures, layer timings, whole steps, our own steps."""
    from prediction.reference import measured, wholestep

    ours = (step_rows.STEPS, *step_rows.SETTINGS_FILES.values(), *step_rows.H200_FILES.values())
    own = [p for p in ours if p.exists()]
    return [data.GPUS_CSV, *sorted(data.LAYERS.glob("*.csv.gz")), wholestep.WHOLE_STEPS, *own,
            *measured.cudnn_depthwise_files()]  # fmt: skip


def provenance() -> dict[str, Any]:
    """What model.json was fitted from and with: each input's sha256 and row count, their digest together, the
    libraries whose arithmetic it depends on, and the command that rebuilds it."""
    import lightgbm
    import scipy

    files = {}
    for path in inputs():
        raw = path.read_bytes()
        text = gzip.decompress(raw) if path.suffix == ".gz" else raw
        files[str(path.relative_to(data.ROOT))] = {
            "sha256": hashlib.sha256(raw).hexdigest(), "rows": text.count(b"\n"),
        }  # fmt: skip
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    return {
        "command": COMMAND, "inputs": files, "inputs_sha256": digest,
        "libraries": {"python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__,
                      "lightgbm": lightgbm.__version__},
    }  # fmt: skip


def main(argv: Sequence[str] = ()) -> ReferenceModel:
    """Fit on everything, evaluate held out, write data/reference/model.json with its provenance."""
    gpus = gpu_table()
    matrix = layerfit.layer_matrix(layer_table(), gpus)
    params = fit_params(gpus, matrix)
    params["accuracy"] = {} if "--no-accuracy" in argv else accuracy(gpus, matrix, params)
    params["provenance"] = provenance()
    text = json.dumps(_round(params), sort_keys=True, indent=None, separators=(",", ":")) + "\n"
    MODEL_JSON.parent.mkdir(parents=True, exist_ok=True)
    MODEL_JSON.write_text(text)
    print(f"wrote {MODEL_JSON} ({len(text) // 1024} KiB, sha256 {hashlib.sha256(text.encode()).hexdigest()[:16]})")
    return from_json_text(text)


if __name__ == "__main__":
    main(sys.argv[1:])
