"""Fitting the conv part: the measured layer table → features and targets → LightGBM boosters.

Forward: log(measured / roofline) from every public forward measurement (NeuSight, Benanza, DeepBench).
Backward: log(backward / forward) - log(roofline ratio) from DeepBench, the only public source that
times both backward passes of the same layers; a backward time is the predicted forward times that.
A GPU family our agent timed layers of (data/measured/) gets a correction of its own learnt from them.
"""

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import lightgbm as lgb
import numpy as np

from prediction.reference import convs
from prediction.reference.data import LayerTable
from prediction.reference.specs import GpuSpecs, family_of, gpu_family

# Source weights: NeuSight is PyTorch 2.1 / cuDNN 8.9 (closest to what users run); Benanza is cuDNN 7
# inference kernels but the only real-CNN layers (depthwise, grouped, strided) on 8 GPUs, so it counts
# less per row; DeepBench has few rows but real layers, so each row counts more. Our agent's rows
# ("measured", data/measured/) are not among them: they correct their own GPU family (_fit_families).
SOURCE_WEIGHT = {"neusight": 1.0, "benanza": 0.3, "deepbench": 3.0}
FORWARD_PARAMS: dict[str, Any] = {
    "objective": "huber", "alpha": 0.5, "learning_rate": 0.1, "num_leaves": 15, "min_data_in_leaf": 40,
    "feature_fraction": 0.9, "lambda_l2": 1.0, "verbose": -1, "deterministic": True, "force_col_wise": True,
    "num_threads": 2, "seed": 7,
}  # fmt: skip
RATIO_PARAMS: dict[str, Any] = {
    **FORWARD_PARAMS, "objective": "regression", "learning_rate": 0.05, "num_leaves": 7, "min_data_in_leaf": 20,
}  # fmt: skip
FORWARD_ROUNDS, RATIO_ROUNDS = 150, 120


@dataclass
class LayerMatrix:
    """Features (3, R, F), rooflines (3, R), measured (R, 3), GPU, source and precision of every row."""

    x: np.ndarray
    roof: np.ndarray
    ms: np.ndarray
    gpu: np.ndarray
    source: np.ndarray
    precision: np.ndarray
    shape: np.ndarray  # layer_shape of each row's spec

    def ours_shaped_as(self, shapes: set[str]) -> np.ndarray:
        """Rows our agent measured (source "measured") of a layer shape among these."""
        return (self.source == "measured") & np.isin(self.shape, sorted(shapes))


def layer_shape(spec: dict[str, Any]) -> str:
    """A conv's channels, kernel, stride and groups, whatever its input size: a layer a CNN has at any size."""
    kh, kw = spec["kernel"]
    sh, sw = spec["stride"]
    return f"{spec['in_channels']}x{spec['out_channels']} k{kh}x{kw} s{sh}x{sw} g{spec['groups']}"


def layer_matrix(table: LayerTable, gpus: dict[str, GpuSpecs]) -> LayerMatrix:
    """Features of every measured row on its own GPU."""
    n = len(table.gpu)
    x = np.empty((3, n, len(convs.FEATURES)))
    roof = np.empty((3, n))
    groups: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for i, key in enumerate(zip(table.source, table.gpu, table.precision, strict=True)):
        groups[key].append(i)
    for (source, gpu, precision), idx in groups.items():
        specs = [table.specs[i] for i in idx]
        tensor = None
        if source == "neusight":
            # its A100 kernels are all SIMT (sgemm, winograd, FFT): random odd channel counts keep TF32 off
            tensor = np.zeros(len(idx), dtype=bool)
        f, r, _ = convs.features(specs, [table.batch[i] for i in idx], gpus[gpu], precision, tensor, paired=True)
        x[:, idx] = f[:, :, 0]
        roof[:, idx] = r[:, :, 0]
    shapes = np.array([layer_shape(s) for s in table.specs])
    return LayerMatrix(
        x, roof, table.array(), np.array(table.gpu), np.array(table.source), np.array(table.precision), shapes
    )


def _train(params: dict[str, Any], x: np.ndarray, y: np.ndarray, w: np.ndarray, rounds: int) -> lgb.Booster:
    data = lgb.Dataset(x, y, weight=w, feature_name=list(convs.FEATURES), free_raw_data=True)
    return lgb.train(params, data, rounds)


def fit_conv(m: LayerMatrix, rows: np.ndarray | None = None) -> dict[str, Any]:
    """Boosters (LightGBM model text) and their output clips, fitted on the given rows (all by default): the public
    rows for every GPU, and per GPU family our agent measured layers of, a correction learnt from them ("families")."""
    keep = np.ones(len(m.gpu), dtype=bool) if rows is None else rows
    out = _fit_public(m, keep & (m.source != "measured"))
    out["families"] = _fit_families(m, keep & (m.source == "measured"), out)
    return out


def _fit_families(m: LayerMatrix, ours: np.ndarray, public: dict[str, Any]) -> dict[str, Any]:
    """Per GPU family (same chip together), boosters of log(measured / public model's prediction) per phase, on our
    agent's layers of it: a GPU family we measured is answered from its own layers, and no other GPU's answer moves
    (with our H200's layers in the public model's fit, other GPUs' held-out layers and steps got worse)."""
    from prediction.reference.model import ReferenceModel

    if not ours.any():
        return {}
    base = ReferenceModel({"conv": public, "step": {}})
    family = np.array([family_of(g) for g in m.gpu])
    out: dict[str, Any] = {}
    for name in sorted(set(family[ours])):
        ix = ours & (family == name)
        predicted = base.log_multipliers(m.x[:, ix]) + np.log(m.roof[:, ix])
        entry: dict[str, Any] = {"clip": {}}
        for p, phase in enumerate(convs.PHASES):
            ok = np.isfinite(m.ms[ix, p]) & (m.ms[ix, p] > 0)
            y = np.log(m.ms[ix, p][ok]) - predicted[p][ok]
            entry["clip"][phase] = _clip(y)
            entry[phase] = _train(RATIO_PARAMS, m.x[p, ix][ok], y, np.ones(len(y)), RATIO_ROUNDS).model_to_string()
        out[name] = entry
    return out


def _fit_public(m: LayerMatrix, keep: np.ndarray) -> dict[str, Any]:
    w = np.array([SOURCE_WEIGHT.get(s, 0.0) for s in m.source])  # our rows are kept out by `keep`
    fwd_ok = keep & np.isfinite(m.ms[:, 0]) & (m.ms[:, 0] > 0)
    y_fwd = np.log(m.ms[fwd_ok, 0] / m.roof[0, fwd_ok])
    out: dict[str, Any] = {"clip": {"forward": _clip(y_fwd)}}
    out["forward"] = _train(FORWARD_PARAMS, m.x[0, fwd_ok], y_fwd, w[fwd_ok], FORWARD_ROUNDS).model_to_string()
    for p, phase in enumerate(convs.PHASES[1:], start=1):
        ok = fwd_ok & np.isfinite(m.ms[:, p]) & (m.ms[:, p] > 0)
        y = np.log(m.ms[ok, p] / m.ms[ok, 0]) - np.log(m.roof[p, ok] / m.roof[0, ok])
        out["clip"][phase] = _clip(y)
        out[phase] = _train(RATIO_PARAMS, m.x[p, ok], y, w[ok], RATIO_ROUNDS).model_to_string()
    return out


def _clip(y: np.ndarray) -> list[float]:
    # predictions stay within what was measured: bounded by physics, never an extrapolated efficiency
    return [float(np.min(y)), float(np.max(y))]


def mape(pred: np.ndarray, meas: np.ndarray) -> float:
    """Mean absolute percentage error."""
    return float(np.mean(np.abs(pred - meas) / meas) * 100)


def logo_layers(m: LayerMatrix, predict: Any) -> dict[str, Any]:
    """Leave-one-GPU-out per phase: MAPE of the model and of the roofline baseline, per held-out GPU."""
    fam = np.array([gpu_family(g) for g in m.gpu])
    per: dict[str, Any] = {}
    for held in sorted(set(fam)):
        test = fam == held
        fitted = fit_conv(m, ~test)
        pred = predict(fitted, m.x[:, test], m.roof[:, test])
        row: dict[str, Any] = {}
        for p, phase in enumerate(convs.PHASES):
            ok = np.isfinite(m.ms[test, p])
            if ok.sum() == 0:
                continue
            meas = m.ms[test, p][ok]
            row[phase] = {
                "rows": int(ok.sum()),
                "mape": mape(pred[ok, p], meas),
                "roofline_mape": mape(m.roof[p, test][ok], meas),
            }
        per[held] = row
    summary = {}
    for phase in convs.PHASES:
        vals = [(v[phase]["mape"], v[phase]["roofline_mape"], v[phase]["rows"]) for v in per.values() if phase in v]
        summary[phase] = {
            "mape": float(np.mean([a for a, _, _ in vals])),
            "roofline_mape": float(np.mean([b for _, b, _ in vals])),
        }
    return {"per_gpu": per, "mean_over_gpus": summary}
