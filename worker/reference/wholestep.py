"""Whole-network public measurements (data/reference/whole_steps.csv) predicted by GPUs held out.

Reading a CNN's convs and workload needs torch (shared.cnn.zoo); it is imported only here, by the
fit and the benchmark, never by the worker's prediction path.
"""

import csv
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from shared.training import LEGACY_SGD_MOMENTUM, Precision, TrainConfig
from worker.features import family as cnn_family
from worker.reference import layerfit
from worker.reference.data import ROOT
from worker.reference.model import ReferenceModel
from worker.reference.specs import GpuSpecs, simt_tflops, tensor_tflops
from worker.reference.steps import cpu_ms, kernel_precision, optimizer_ms, other_ms

WHOLE_STEPS = ROOT / "data" / "reference" / "whole_steps.csv"
# Same silicon under two names: holding one out holds out the other too.
SAME_CHIP = {"Quadro-RTX-8000": "Quadro-RTX-6000", "H200-SXM-141GB": "H100"}


@dataclass(frozen=True)
class StepRow:
    """One public whole-network measurement."""

    set: str
    gpu: str
    cnn: str
    image_size: int
    batch: int
    precision: str
    framework: str
    optimizer: str
    includes: str
    step_ms: float
    input_bound: bool

    @property
    def category(self) -> str:
        """headline (PyTorch full steps, not input-bound), input_bound, partial_step or other_framework."""
        if not self.framework.lower().startswith("pytorch"):
            return "other_framework"
        if not self.includes.startswith("fwd+bwd+opt") or self.precision not in ("fp32", "amp_fp16"):
            return "partial_step"
        return "input_bound" if self.input_bound else "headline"


def load_rows() -> list[StepRow]:
    """Rows of whole_steps.csv (empty if it is absent)."""
    if not WHOLE_STEPS.exists():
        return []
    with open(WHOLE_STEPS, newline="") as fh:
        return [
            StepRow(
                r["set"],
                r["gpu"],
                r["cnn"],
                int(r["image_size"]),
                int(r["batch_size"]),
                r["precision"],
                r["framework"],
                (r["optimizer"] or "sgd").lower(),
                r["includes"],
                float(r["step_ms"]),
                r["input_bound"].strip().lower() == "true",
            )  # fmt: skip
            for r in csv.DictReader(fh)
            if r["step_ms"]
        ]


@cache
def network(cnn: str, image_size: int) -> tuple[tuple[tuple[dict[str, Any], int], ...], dict[str, Any]]:
    """(conv specs with counts, workload) of a torchvision CNN or the CIFAR ResNet-18."""
    from shared.cnn import zoo as cnn_zoo

    if cnn == "resnet18_cifar":
        import torch
        import torchvision

        with torch.device("meta"):
            model = torchvision.models.resnet18(num_classes=10)
            model.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        model.maxpool = torch.nn.Identity()
        layers = cnn_zoo.conv_layers_of(model, image_size, 10)
    else:
        layers = cnn_zoo.conv_layers(cnn, image_size)
    convs = tuple((s.to_json(), n) for s, n in zip(layers.signatures, layers.counts, strict=True))
    return convs, layers.workload


def row_config(row: StepRow) -> TrainConfig:
    """How a public row trained: SGD rows with momentum 0.9 (every public set's recipe), Adam, tf32 or AMP fp16.

    Public fp32 rows are costed as tf32 (TF32 matmuls where the GPU has them), as the fit always costed them:
    NGC containers (Lambda) and PyTorch before 1.12 allow TF32 matmuls, unlike PyTorch's own default since.
    """
    precision: Precision = "amp_fp16" if row.precision in ("amp_fp16", "fp16") else "tf32"
    if row.optimizer.startswith("adam"):
        return TrainConfig(optimizer="adam", precision=precision)
    return TrainConfig(optimizer="sgd", momentum=LEGACY_SGD_MOMENTUM, precision=precision)


def predict_row(model: ReferenceModel, row: StepRow, gpu: GpuSpecs) -> float:
    """Predicted ms of one row (the optimizer left out where the measurement leaves it out)."""
    convs, work = network(row.cnn, row.image_size)
    est = model.predict_steps(convs=convs, workload=work, batch_sizes=[row.batch], gpu=gpu, training=row_config(row))[0]
    return est.step_ms - (0.0 if "opt" in row.includes else est.optimizer_ms)


SCALES = ("scale_conv_simt", "scale_conv_tf32", "scale_conv_fp16", "scale_other_fp32", "scale_other_amp", "scale_cpu")
RIDGE = 1.0  # pulls every log-scale toward 0 with the weight of one whole set of rows


def row_parts(model: ReferenceModel, row: StepRow, gpu: GpuSpecs) -> np.ndarray:
    """Uncalibrated parts of one row: CUDA-core convs, TF32 convs, FP16 convs, other GPU work, CPU, sync (ms)."""
    convs, work = network(row.cnn, row.image_size)
    config = row_config(row)
    precision = config.precision
    gpu = gpu.filled()
    c = {k: v for k, v in model.params["step"].items() if not k.startswith("scale_")}
    paths = model.conv_paths(convs, [row.batch], gpu, kernel_precision(precision))[0].sum(axis=0)
    other = float(other_ms(work, np.array([float(row.batch)]), gpu, precision, c)[0])
    if "opt" in row.includes:
        other += optimizer_ms(work, gpu, config, c)
    amp = precision == "amp_fp16"
    tensor = (0.0, paths[1]) if amp else (paths[1], 0.0)
    others = (0.0, other) if amp else (other, 0.0)
    return np.array([paths[0], *tensor, *others, cpu_ms(work, config, c), c["step_sync_ms"]])


def combine(parts: np.ndarray, log_scales: np.ndarray) -> np.ndarray:
    """Step times (R,) from parts (R, 7) and log scales (6,): max(GPU, CPU) + sync."""
    s = np.exp(log_scales)
    gpu = parts[:, :5] @ s[:5]
    return np.maximum(gpu, parts[:, 5] * s[5]) + parts[:, 6]


def fit_scales(parts: np.ndarray, meas: np.ndarray, sets: list[str]) -> dict[str, float]:
    """Log scales minimising the squared log error, each set weighing the same, ridge toward 1x."""
    if not len(meas):
        return dict.fromkeys(SCALES, 1.0)
    counts = {k: sets.count(k) for k in set(sets)}
    w = np.sqrt(np.array([1.0 / counts[k] for k in sets]))

    def residual(theta: np.ndarray) -> np.ndarray:
        return np.concatenate([w * np.log(combine(parts, theta) / meas), np.sqrt(RIDGE) * theta])

    fitted = least_squares(residual, np.zeros(len(SCALES)), bounds=(-1.5, 1.5))
    return {k: float(np.exp(v)) for k, v in zip(SCALES, fitted.x, strict=True)}


def steps_only(row: StepRow) -> bool:
    """Whether the timer saw only the training step (synthetic data, or a loader whose wait is excluded)."""
    return row.category == "headline" and "loader concurrent" not in row.includes


def calibrate(model: ReferenceModel, gpus: dict[str, GpuSpecs], exclude: list[str]) -> dict[str, float]:
    """Scales fitted on the step-only headline rows of every GPU family not excluded.

    Rows timed while real-data loaders ran concurrently (Pollux, Sia) are left out of the fit: their
    step times include input-pipeline stalls the GPU model must not learn (they are still evaluated).
    """
    rows = [r for r in load_rows() if steps_only(r) and r.gpu in gpus and family_of(r.gpu) not in exclude and _known(r)]
    if not rows:
        return dict.fromkeys(SCALES, 1.0)
    parts = np.array([row_parts(model, r, gpus[r.gpu]) for r in rows])
    return fit_scales(parts, np.array([r.step_ms for r in rows]), [r.set for r in rows])


def family_of(gpu: str) -> str:
    """The GPU family held out together (board variants and same-chip products)."""
    return layerfit.gpu_family(SAME_CHIP.get(gpu, gpu))


def _known(row: StepRow) -> bool:
    try:
        network(row.cnn, row.image_size)
        return True
    except Exception:  # a CNN torchvision does not have (e.g. MXNet's BVLC AlexNet)
        return False


def flops_baseline(row: StepRow, gpu: GpuSpecs) -> float:
    """Forward + backward FLOPs (3x forward) at the GPU's peak for the precision: the roofline baseline."""
    _, work = network(row.cnn, row.image_size)
    precision = "amp_fp16" if row.precision in ("amp_fp16", "fp16") else "fp32"
    peak = tensor_tflops(gpu, precision) or simt_tflops(gpu, precision)
    return 3.0 * float(work["flops"]) * row.batch / (peak * 1e12) * 1e3


def _stats(pred: np.ndarray, meas: np.ndarray) -> dict[str, Any]:
    ape = np.abs(pred - meas) / meas * 100
    lr = np.log(meas / pred)
    return {
        "rows": int(len(meas)), "mape": float(ape.mean()), "median_ape": float(np.median(ape)),
        "max_ape": float(ape.max()), "log_ratio_p10": float(np.quantile(lr, 0.1)),
        "log_ratio_p90": float(np.quantile(lr, 0.9)),
    }  # fmt: skip


def _entry(items: list[dict[str, Any]]) -> dict[str, Any]:
    meas = np.array([i["row"].step_ms for i in items])
    pred, base = np.array([i["pred"] for i in items]), np.array([i["base"] for i in items])
    entry: dict[str, Any] = {**_stats(pred, meas), "baseline_mape": _stats(base, meas)["mape"]}
    keys: dict[str, Callable[[StepRow], str]] = {
        "by_set": lambda r: r.set, "by_gpu": lambda r: r.gpu, "by_family": lambda r: cnn_family(r.cnn),
    }  # fmt: skip
    for name, key in keys.items():
        groups: dict[str, list[int]] = defaultdict(list)
        for i, item in enumerate(items):
            groups[key(item["row"])].append(i)
        entry[name] = {
            g: {**_stats(pred[ix], meas[ix]), "baseline_mape": _stats(base[ix], meas[ix])["mape"]}
            for g, ix in sorted(groups.items())
        }
    entry["points"] = [
        [i["row"].set, i["row"].gpu, i["row"].cnn, i["row"].precision, i["row"].batch, i["row"].step_ms,
         round(i["pred"], 3), round(i["base"], 3)]
        for i in items
    ]  # fmt: skip
    return entry


def evaluate(
    gpus: dict[str, GpuSpecs],
    matrix: layerfit.LayerMatrix,
    fit_params: Callable[..., dict[str, Any]],
) -> dict[str, Any]:
    """Every row predicted by a model fitted without its GPU family's layer data; MAPE beside the FLOPs baseline."""
    rows = [r for r in load_rows() if r.gpu in gpus]
    layer_fam = np.array([layerfit.gpu_family(g) for g in matrix.gpu])
    models: dict[str, ReferenceModel] = {}
    table: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        fam = family_of(row.gpu)
        if fam not in models:
            keep = layer_fam != fam
            models[fam] = ReferenceModel(fit_params(gpus, matrix, keep, exclude=[fam]), f"without {fam}")
        gpu = gpus[row.gpu]
        if not _known(row):
            table["unsupported_cnn"].append({"row": row, "pred": row.step_ms, "base": row.step_ms})
            continue
        table[row.category].append(
            {"row": row, "pred": predict_row(models[fam], row, gpu), "base": flops_baseline(row, gpu)}
        )
    out: dict[str, Any] = {category: _entry(items) for category, items in sorted(table.items())}
    headline = table.get("headline", [])
    subsets = {
        "headline_step_only": [i for i in headline if steps_only(i["row"])],
        "headline_fp32": [i for i in headline if i["row"].precision == "fp32"],
    }
    out.update({name: _entry(items) for name, items in subsets.items() if items})
    head = out.get("headline", {"rows": 0, "mape": None, "log_ratio_p10": None, "log_ratio_p90": None})
    head["description"] = "PyTorch full steps (fwd+bwd+opt), fp32 and AMP, input-bound rows excluded"
    out["headline"] = head
    return out
