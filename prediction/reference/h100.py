"""Our own whole training steps on an H100 (data/reference/h100/): rows for the fit, and their held-out scores.

Every CNN's rows are predicted by whole-step constants fitted without that CNN's H100 rows (leave-one-CNN-out), and
conv models fitted without our agent's layers of its shapes where evaluate is given them (fit.conv_without),
and the errors are kept per precision group and regime (host-bound or device-bound, as the model itself says):
each reference point quotes the figure of its own kind, and its P10-P90 band is those errors' quantiles.
"""

from collections import defaultdict
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from prediction.reference.model import ReferenceModel
from prediction.reference.specs import GpuSpecs
from prediction.reference.step_rows import (
    CONFIGS,
    ENVIRONMENT,
    FAMILY,
    GPU,
    GRID,
    SET,
    SETTINGS_SET,
    StepRow,
    config_name,
    load_h100,
)
from prediction.reference.steps import precision_group
from prediction.reference.wholestep import calibrate, flops_baseline, network, own_constants, setting_pairs

# A point's band: these quantiles of the held-out errors of its kind. The 10th and 90th held 71% of a held-out
# CNN's steps (errors cluster by CNN), the 5th and 95th 82% (nested, 2026-11-25): the band meant to hold ~80%.
BAND_TAIL = 0.05


def _stats(pred: np.ndarray, meas: np.ndarray) -> dict[str, Any]:
    lr = np.log(meas / pred)
    return {
        "rows": int(len(meas)), "mape": float(np.mean(np.abs(pred - meas) / meas) * 100),
        "log_ratio_p10": float(np.quantile(lr, 0.1)), "log_ratio_p90": float(np.quantile(lr, 0.9)),
    }  # fmt: skip


def _coverage(lr: np.ndarray, cnn: np.ndarray, kind: np.ndarray, tail: float = 0.1) -> float:
    """Share of rows inside bands taken from the other CNNs' held-out errors of the same kind (nested)."""
    inside = []
    for i in range(len(lr)):
        others = lr[(cnn != cnn[i]) & (kind == kind[i])]
        if len(others) >= 5:
            lo, hi = np.quantile(others, [tail, 1 - tail])
            inside.append(lo <= lr[i] <= hi)
    return float(np.mean(inside) * 100) if inside else float("nan")


def evaluate(
    model: ReferenceModel, gpus: dict[str, GpuSpecs], conv_of: Callable[[str], dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Leave-one-CNN-out on the H100 steps: figures per configuration, regime and CNN, beside the baseline fitted
    on public rows only (what the reference knew before our H100 steps). conv_of(cnn): the conv parameters to
    predict that CNN with (fitted without the layers our agent timed of its shapes: fit.conv_without); model's
    otherwise."""
    rows = [r for r in load_h100() if r.gpu in gpus]
    gpu = gpus[GPU]
    public = calibrate(model, gpus, [], leave_out=lambda r: r.training is not None)  # none of our own steps
    baseline = ReferenceModel(
        {**model.params, "step": {**model.params["step"], **public}, "step_families": {}}, "public rows only"
    )
    preds: list[tuple[StepRow, float, bool, float, float]] = []
    tuned: list[tuple[StepRow, float]] = []  # every row of ours in the held-out CNN's fit, predicted held out
    for cnn in sorted({r.cnn for r in rows}):

        def held_out(r: StepRow, cnn: str = cnn) -> bool:
            return r.cnn == cnn and r.training is not None

        base = model if conv_of is None else ReferenceModel({**model.params, **conv_of(cnn)})
        # As the H100's own constants are fitted, less the CNN's steps on every GPU.
        step = own_constants(base, gpus, FAMILY, [], held_out)
        fitted = ReferenceModel(
            {**base.params, "step": {**base.params["step"], **step}, "step_families": {}}, f"without {cnn}"
        )
        for r in (r for r in rows if r.cnn == cnn):
            convs, work = network(r.cnn, r.image_size)
            predict = partial(
                ReferenceModel.predict_steps, convs=convs, workload=work, batch_sizes=[r.batch], gpu=gpu,
                training=r.training,
            )  # fmt: skip
            [est] = predict(fitted)
            tuned.append((r, est.step_ms))
            if r.set == SET:  # the default-setting steps are also scored against the public-only fit
                [prior] = predict(baseline)
                preds.append((r, est.step_ms, est.launch_bound, prior.step_ms, flops_baseline(r, gpu)))
    out = summarise(preds)
    out["settings"] = settings_summary(tuned)
    return out


def _config_named(precision: str) -> str:
    """The name in CONFIGS of our configuration trained in this precision (each has its own)."""
    return next(k for k, v in CONFIGS.items() if v.precision == precision)


def settings_summary(tuned: list[tuple[StepRow, float]]) -> dict[str, Any]:
    """Held out by CNN: how far each setting's predicted effect (its step over the same CNN's default-setting step
    of the same run) is from the measured one, and the error of the steps themselves, per setting and configuration.
    """
    predicted = {id(r): ms for r, ms in tuned}
    out: dict[str, Any] = {}
    for r, d in setting_pairs([r for r, _ in tuned], fallback=SET):
        assert r.training is not None  # our own rows say how they trained
        setting = ("channels_last" if r.training.channels_last else "nchw") + (
            "+cudnn_benchmark" if r.training.cudnn_benchmark else ""
        )
        config = _config_named(r.training.precision)
        key = f"{setting} {config}"
        measured, modelled = r.step_ms / d.step_ms, predicted[id(r)] / predicted[id(d)]
        entry = out.setdefault(key, {"ratio_errors": [], "step_errors": [], "points": []})
        entry["ratio_errors"].append(abs(modelled - measured) / measured * 100)
        entry["step_errors"].append(abs(predicted[id(r)] - r.step_ms) / r.step_ms * 100)
        entry["points"].append([r.cnn, r.batch, round(measured, 3), round(modelled, 3)])
    return {
        k: {"rows": len(v["points"]), "ratio_mape": float(np.mean(v["ratio_errors"])),
            "step_mape": float(np.mean(v["step_errors"])), "points": v["points"]}
        for k, v in sorted(out.items())
    }  # fmt: skip


def summarise(preds: list[tuple[StepRow, float, bool, float, float]]) -> dict[str, Any]:
    """Figures of held-out predictions (row, predicted, launch-bound, public-only and FLOPs-at-peak baselines)."""
    meas = np.array([p[0].step_ms for p in preds])
    pred = np.array([p[1] for p in preds])
    base = np.array([p[3] for p in preds])
    flops = np.array([p[4] for p in preds])
    grid = np.array([p[0].batch in GRID for p in preds])
    group = np.array([precision_group(p[0].precision) for p in preds])
    regime = np.array(["host" if p[2] else "device" for p in preds])
    cnn = np.array([p[0].cnn for p in preds])
    config = np.array([config_name(p[0]) for p in preds])
    out: dict[str, Any] = {
        "environment": ENVIRONMENT, "family": FAMILY, "by_config": {}, "by_group_regime": defaultdict(dict),
    }  # fmt: skip
    for name in (n for n in CONFIGS if (grid & (config == n)).any()):  # the H100 ran three of them
        ix = grid & (config == name)
        out["by_config"][name] = {
            **_stats(pred[ix], meas[ix]), "public_only_mape": _stats(base[ix], meas[ix])["mape"],
            "flops_mape": _stats(flops[ix], meas[ix])["mape"], "under_pct": float(np.mean(pred[ix] < meas[ix]) * 100),
        }  # fmt: skip
    for g in sorted(set(group)):
        for reg in ("host", "device"):
            ix = (group == g) & (regime == reg)
            if ix.sum() >= 3:
                lr_kind = np.log(meas[ix] / pred[ix])
                out["by_group_regime"][g][reg] = {
                    **_stats(pred[ix], meas[ix]),
                    "band_low": float(np.quantile(lr_kind, BAND_TAIL)),
                    "band_high": float(np.quantile(lr_kind, 1 - BAND_TAIL)),
                }
    out["by_group_regime"] = dict(out["by_group_regime"])
    lr = np.log(meas / pred)
    kind = np.char.add(np.char.add(group, "/"), regime)
    out["band_coverage_pct"] = _coverage(lr[grid], cnn[grid], kind[grid], BAND_TAIL)
    out["band_coverage_by_tail"] = {str(t): _coverage(lr[grid], cnn[grid], kind[grid], t) for t in (0.1, 0.05)}
    out["grid"] = {
        **_stats(pred[grid], meas[grid]), "public_only_mape": _stats(base[grid], meas[grid])["mape"],
        "flops_mape": _stats(flops[grid], meas[grid])["mape"],
    }  # fmt: skip
    if (~grid).any():
        out["sweep_only"] = _stats(pred[~grid], meas[~grid])
    out["by_cnn"] = {
        c: {name: _stats(pred[grid & (cnn == c) & (config == name)], meas[grid & (cnn == c) & (config == name)])["mape"]
            for name in CONFIGS if (grid & (cnn == c) & (config == name)).any()}
        for c in sorted(set(cnn))
    }  # fmt: skip
    out["points"] = [
        [
            p[0].cnn,
            config[i],
            p[0].batch,
            round(p[0].step_ms, 3),
            round(p[1], 3),
            regime[i],
            round(p[3], 3),
            round(p[4], 3),
        ]
        for i, p in enumerate(preds)
    ]
    return out


def repeatability(rows: list[StepRow]) -> dict[str, dict[int, dict[str, Any]]]:
    """How far the same default-setting step, measured in two runs (STEPS and the settings run's own default steps,
    on H100 SXM machines a day or more apart), lands from itself: per configuration and batch size, the mean error
    a repeat measurement would have as the answer (|a - b| over each run, both ways), the largest, and the pairs.
    It bounds what any predictor of one run can reach: the host's run-to-run speed is not in any input."""

    def default(r: StepRow) -> bool:
        return r.training is not None and not r.training.channels_last and not r.training.cudnn_benchmark

    first = {(r.cnn, r.training, r.batch): r.step_ms for r in rows if r.set == SET and default(r)}
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for r in sorted((r for r in rows if r.set == SETTINGS_SET and default(r)), key=lambda r: (r.batch, r.cnn)):
        a = first.get((r.cnn, r.training, r.batch))
        if a is None:
            continue
        config = _config_named(r.training.precision)  # type: ignore[union-attr]
        entry = out.setdefault(config, {}).setdefault(r.batch, {"errors": [], "pairs": []})
        entry["errors"] += [abs(a - r.step_ms) / a * 100, abs(a - r.step_ms) / r.step_ms * 100]
        entry["pairs"].append([r.cnn, round(a, 3), round(r.step_ms, 3)])
    return {
        config: {b: {"pairs": v["pairs"], "mape": float(np.mean(v["errors"])), "largest": float(max(v["errors"]))}
                 for b, v in sorted(by.items())}
        for config, by in sorted(out.items())
    }  # fmt: skip
