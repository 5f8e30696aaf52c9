"""Whole-network public measurements (data/reference/whole_steps.csv) predicted by GPUs held out.

Reading a CNN's convs and workload needs torch (shared.cnn.zoo); it is imported only here, by the
fit and the benchmark, never by the worker's prediction path.
"""

import csv
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from prediction.features import family as cnn_family
from prediction.reference import layerfit, measured, step_rows, stepfit
from prediction.reference.data import ROOT
from prediction.reference.model import ReferenceModel
from prediction.reference.specs import GpuSpecs, family_of, gpu_family, simt_tflops, tensor_tflops
from prediction.reference.step_rows import StepRow
from prediction.reference.steps import StepParts, band_group
from shared.cnn.workload import WorkloadJson
from shared.training import LEGACY_SGD_MOMENTUM, Precision, TrainConfig

WHOLE_STEPS = ROOT / "data" / "reference" / "whole_steps.csv"
# Public steps of GPUs that no fit reads (no row of theirs is in whole_steps.csv, our steps or a bundle): what the
# reference answers for a GPU it never saw, scored by bench/unseen_gpus.py.
UNSEEN_STEPS = ROOT / "data" / "reference" / "unseen_steps.csv"


def load_rows(path: Path = WHOLE_STEPS) -> list[StepRow]:
    """Rows of whole_steps.csv, or of another file of its columns (empty if it is absent)."""
    if not path.exists():
        return []
    with open(path, newline="") as fh:
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
def network(cnn: str, image_size: int) -> tuple[tuple[tuple[dict[str, Any], int], ...], WorkloadJson]:
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
    if row.training is not None:
        return row.training
    precision: Precision = "amp_fp16" if row.precision in ("amp_fp16", "fp16") else "tf32"
    if row.optimizer.startswith("adam"):
        return TrainConfig(optimizer="adam", precision=precision)
    return TrainConfig(optimizer="sgd", momentum=LEGACY_SGD_MOMENTUM, precision=precision)


def predict_row(model: ReferenceModel, row: StepRow, gpu: GpuSpecs) -> float:
    """Predicted ms of one row (the optimizer left out where the measurement leaves it out)."""
    convs, work = network(row.cnn, row.image_size)
    est = model.predict_steps(
        convs=convs, workload=work, batch_sizes=[row.batch], gpu=gpu, training=row_config(row), autotuned=row.autotuned
    )[0]
    return est.step_ms - (0.0 if "opt" in row.includes else est.optimizer_ms)


def row_parts(model: ReferenceModel, row: StepRow, gpu: GpuSpecs) -> StepParts:
    """Uncalibrated parts of one row's step (what the whole-step constants are fitted on)."""
    convs, work = network(row.cnn, row.image_size)
    return model.step_parts(
        convs=convs, workload=work, batch_sizes=[row.batch], gpu=gpu, training=row_config(row), autotuned=row.autotuned
    )


def steps_only(row: StepRow) -> bool:
    """Whether the timer saw only the training step (synthetic data, or a loader whose wait is excluded)."""
    return row.category == "headline" and "loader concurrent" not in row.includes


def fit_rows(gpus: dict[str, GpuSpecs], exclude: list[str], leave_out: Callable[[StepRow], bool]) -> list[StepRow]:
    """The rows the whole-step constants are fitted on: step-only public rows and our own steps, each of a GPU
    family not excluded and not left out (a held-out CNN's rows)."""
    rows = [*load_rows(), *step_rows.load_own(), *measured.load_rows()]
    return [
        r for r in rows
        if steps_only(r) and r.gpu in gpus and family_of(r.gpu) not in exclude and _known(r) and not leave_out(r)
    ]  # fmt: skip


def row_weights(rows: list[StepRow]) -> list[float]:
    """Each public set weighs as much as one of our (CNN, configuration) series, whatever its number of rows."""
    keys = [r.set if r.training is None else (r.set, r.cnn, row_config(r).cost_key()) for r in rows]
    counts: dict[Any, int] = defaultdict(int)
    for k in keys:
        counts[k] += 1
    return [1.0 / counts[k] for k in keys]


def settings_row(row: StepRow) -> bool:
    """Our own step in a setting other than PyTorch's defaults (channels_last, cudnn.benchmark)."""
    return row.training is not None and (row.training.channels_last or row.training.cudnn_benchmark)


def balanced(rows: list[StepRow], weights: list[float]) -> list[float]:
    """The weights with no GPU family above the median family's total: constants a GPU nobody measured gets must
    not be one well-measured GPU's (our many H100 steps would otherwise set them alone)."""
    totals: dict[str, float] = defaultdict(float)
    for r, w in zip(rows, weights, strict=True):
        totals[family_of(r.gpu)] += w
    cap = float(np.median(list(totals.values())))
    return [w * min(1.0, cap / totals[family_of(r.gpu)]) for r, w in zip(rows, weights, strict=True)]


def own_families(exclude: list[str], leave_out: Callable[[StepRow], bool] = lambda _: False) -> list[str]:
    """GPU models with whole steps of our own (board variants together; not excluded by family, not all left out):
    each gets constants fitted with its steps at full weight (model.json "step_families", ReferenceModel.step_of),
    where every other GPU gets the balanced ones."""
    rows = [*step_rows.load_own(), *measured.load_rows()]
    return sorted(
        {
            gpu_family(r.gpu)
            for r in rows
            if r.training is not None and not leave_out(r) and family_of(r.gpu) not in exclude
        }
    )


def of_another_gpu(own: str) -> Callable[[StepRow], bool]:
    """Whether a row is our own step on another GPU model than `own`: a GPU's own constants are fitted on the public
    rows and its own steps, never another GPU's, not even one of the same chip (each machine has its own host, which
    sets small-batch steps: our H200's ran up to twice as fast as our H100's at batch 16)."""
    return lambda r: r.training is not None and gpu_family(r.gpu) != own


def calibrate(
    model: ReferenceModel,
    gpus: dict[str, GpuSpecs],
    exclude: list[str],
    leave_out: Callable[[StepRow], bool] = lambda _: False,
    balance: bool = False,
    held: dict[str, float] | None = None,
    ratio_rows: Sequence[StepRow] = (),
    settings: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Whole-step constants fitted on the step-only rows of every GPU family not excluded, then the settings'
    multipliers on our own steps in those settings (stepfit.fit_settings). ratio_rows: our steps on another machine
    whose crossed pairs (step_rows.CROSSED_PAIRS) teach the ratios alone, not the times (its host is not this one's).
    settings: where the rows hold no step in a setting, the settings' multipliers taken from these instead of 1x.

    Rows timed while real-data loaders ran concurrently (Pollux, Sia) are left out of the fit: their
    step times include input-pipeline stalls the GPU model must not learn (they are still evaluated). The public
    sets ran with cudnn.benchmark on (DeepLearningExamples sets it); on our H100 it changed steps by 0-3% where
    the device sets the step (SGD fp32), so the base fit takes public rows as they are and only ratios measured in
    one run on one machine teach what a setting does. balance: each GPU family weighs at most the median family;
    held: host costs kept at these (stepfit.HOST_NAMES) instead of fitted.
    """
    rows = fit_rows(gpus, exclude, leave_out)
    # Our default-setting steps of the settings run are baselines for its ratios, not more rows for the base fit.
    base = [r for r in rows if not settings_row(r) and r.set != step_rows.SETTINGS_SET]

    def stack(some: list[StepRow], weights: list[float]) -> stepfit.Rows:
        return stepfit.Rows.stack([row_parts(model, r, gpus[r.gpu]) for r in some], [r.step_ms for r in some], weights)

    crossed = step_rows.crossed_pairs(list(ratio_rows))
    w = row_weights([r for r, _ in crossed])
    ratios = (stack([r for r, _ in crossed], w), stack([d for _, d in crossed], w)) if crossed else None
    step = stepfit.fit(stack(base, balanced(base, row_weights(base)) if balance else row_weights(base)), held, ratios)
    pairs = setting_pairs(rows, fallback=step_rows.SET)
    if pairs:
        w = row_weights([r for r, _ in pairs])
        step.update(stepfit.fit_settings(stack([r for r, _ in pairs], w), stack([d for _, d in pairs], w), step))
    elif settings is not None:
        step.update({k: settings[k] for k in stepfit.SETTINGS_NAMES})
    return step


def own_constants(
    model: ReferenceModel,
    gpus: dict[str, GpuSpecs],
    family: str,
    exclude: list[str],
    leave_out: Callable[[StepRow], bool] = lambda _: False,
    settings: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """A GPU model's own whole-step constants: the public rows and its own steps, never another GPU's times (each
    machine has its own host); our steps on another machine teach it only what swapping the optimizer or the
    precision does (their same-run ratios). leave_out: rows kept out of it all (a held-out CNN's). settings: the
    multipliers of channels_last and cudnn.benchmark where none of its own steps ran in those settings (the shared
    ones, what every GPU without such steps gets; else its answers would ignore both)."""
    another = of_another_gpu(family)
    ratio_rows = [r for r in step_rows.load_own() if another(r) and not leave_out(r)]
    return calibrate(
        model, gpus, exclude, lambda r: leave_out(r) or another(r), ratio_rows=ratio_rows, settings=settings
    )


def setting_pairs(rows: list[StepRow], fallback: str) -> list[tuple[StepRow, StepRow]]:
    """Each of our steps in a setting, with the same step in PyTorch's default setting from the same run (set), else
    from the fallback set (a run on the same machine kind and software)."""

    def key(r: StepRow, run: str) -> tuple[Any, ...]:
        default = row_config(r).model_copy(update={"channels_last": False, "cudnn_benchmark": False})
        return run, r.cnn, r.image_size, r.batch, default

    plain = {key(r, r.set): r for r in rows if r.training is not None and not settings_row(r)}
    out = []
    for r in filter(settings_row, rows):
        match = plain.get(key(r, r.set)) or plain.get(key(r, fallback))
        if match is not None:
            out.append((r, match))
    return out


def _known(row: StepRow) -> bool:
    try:
        network(row.cnn, row.image_size)
        return True
    except Exception:  # a CNN torchvision does not have (e.g. MXNet's BVLC AlexNet)
        return False


def flops_baseline(row: StepRow, gpu: GpuSpecs) -> float:
    """Forward + backward FLOPs (3x forward) at the GPU's peak for the precision: the roofline baseline."""
    _, work = network(row.cnn, row.image_size)
    precision = "amp_fp16" if row.precision in ("amp_fp16", "amp_bf16", "fp16") else "fp32"
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


# Errors cluster by GPU family as the H100's cluster by CNN: a family held out fell inside the other families'
# 10th-90th percentiles 71-72% of the time, inside their 5th-95th 82-83% (2026-11-27): the band meant to hold ~80%.
BAND_TAIL = 0.05


def bands(items: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per precision (fp32, autocast), the held-out step-only errors of GPUs the model never saw: mean error, the
    band (BAND_TAIL quantiles of log(measured / predicted)) a point on such a GPU quotes, and how many of a GPU
    family's steps fall inside a band taken from the other families' errors (nested: its worth on a new GPU)."""
    out = {}
    for group in ("amp", "fp32"):
        mine = [i for i in items if band_group(i["row"].precision) == group]
        if len(mine) < 5:
            continue
        lr = np.array([np.log(i["row"].step_ms / i["pred"]) for i in mine])
        fam = np.array([family_of(i["row"].gpu) for i in mine])
        inside = []
        for f in set(fam):
            lo, hi = np.quantile(lr[fam != f], [BAND_TAIL, 1 - BAND_TAIL])
            inside += list((lr[fam == f] >= lo) & (lr[fam == f] <= hi))
        out[group] = {
            "rows": len(mine), "mape": float(np.mean(np.abs(np.exp(-lr) - 1)) * 100),
            "band_low": float(np.quantile(lr, BAND_TAIL)), "band_high": float(np.quantile(lr, 1 - BAND_TAIL)),
            "coverage_pct": float(np.mean(inside) * 100),
        }  # fmt: skip
    return out


def evaluate(
    gpus: dict[str, GpuSpecs],
    matrix: layerfit.LayerMatrix,
    fit_params: Callable[..., dict[str, Any]],
) -> dict[str, Any]:
    """Every row predicted by a model fitted without its GPU family's layer data; MAPE beside the FLOPs baseline."""
    rows = [r for r in load_rows() if r.gpu in gpus]
    # Same chip together: holding out the H100s holds out our H200's layers (their correction) too.
    layer_fam = np.array([family_of(g) for g in matrix.gpu])
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
    out["step_only_bands"] = bands(subsets["headline_step_only"])
    head = out.get("headline", {"rows": 0, "mape": None, "log_ratio_p10": None, "log_ratio_p90": None})
    head["description"] = "PyTorch full steps (fwd+bwd+opt), fp32 and AMP, input-bound rows excluded"
    out["headline"] = head
    return out
