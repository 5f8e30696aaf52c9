"""Our own H200 steps (data/reference/h200/) held out by CNN: each configuration's error, and how far the model's
effect of swapping the optimizer or the precision is from the one measured in the same run (the crossed pairs)."""

from collections.abc import Callable
from typing import Any

import numpy as np

from prediction.reference.layerfit import gpu_family
from prediction.reference.measured import SET_PREFIX
from prediction.reference.model import ReferenceModel
from prediction.reference.specs import GpuSpecs
from prediction.reference.step_rows import (
    CONFIGS,
    CROSSED_PAIRS,
    GPU,
    H200_FILES,
    H200_GPU,
    SET,
    StepRow,
    config_name,
    crossed_pairs,
    load_own,
)
from prediction.reference.steps import precision_group
from prediction.reference.wholestep import calibrate, network, own_constants

PAIRS = CROSSED_PAIRS


def evaluate(
    model: ReferenceModel, gpus: dict[str, GpuSpecs], conv_of: Callable[[str], dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Leave-one-CNN-out on the H200 steps with the constants the H200 gets (its own: public rows and its steps),
    each CNN predicted by constants fitted without any of its steps of ours; conv_of as h100.evaluate's."""
    rows = [r for r in load_own() if r.set in H200_FILES and r.gpu in gpus]
    if not rows:
        return {}
    gpu = gpus[H200_GPU]
    predicted: dict[int, float] = {}
    for cnn in sorted({r.cnn for r in rows}):

        def held_out(r: StepRow, cnn: str = cnn) -> bool:
            return r.cnn == cnn and r.training is not None

        base = model if conv_of is None else ReferenceModel({**model.params, **conv_of(cnn)})
        step = own_constants(base, gpus, gpu_family(H200_GPU), [], held_out)
        fitted = ReferenceModel({**base.params, "step": {**base.params["step"], **step}, "step_families": {}})
        for r in (r for r in rows if r.cnn == cnn):
            convs, work = network(r.cnn, r.image_size)
            [est] = fitted.predict_steps(
                convs=convs, workload=work, batch_sizes=[r.batch], gpu=gpu, training=r.training
            )
            predicted[id(r)] = est.step_ms
    return summarise(rows, predicted)


def summarise(rows: list[StepRow], predicted: dict[int, float]) -> dict[str, Any]:
    """Per configuration and batch regime (16-64, 128-256) the mean error; per pair the mean error of the ratio."""
    by_config: dict[str, dict[str, float]] = {}
    for name in CONFIGS:
        for label, sizes in (("small", (16, 32, 64)), ("large", (128, 256))):
            errs = [abs(predicted[id(r)] / r.step_ms - 1) * 100 for r in rows
                    if config_name(r) == name and r.batch in sizes]  # fmt: skip
            if errs:
                by_config.setdefault(name, {})[f"mape_{label}"] = float(np.mean(errs))
    matched = crossed_pairs(rows)
    pairs: dict[str, Any] = {}
    for changed, reference in PAIRS:
        # CNN, batch, measured and predicted ratio
        points = [(r.cnn, r.batch, r.step_ms / d.step_ms, predicted[id(r)] / predicted[id(d)])
                  for r, d in matched if config_name(r) == changed and config_name(d) == reference]  # fmt: skip
        errs = [abs(p[3] / p[2] - 1) * 100 for p in points]
        pairs[f"{changed} / {reference}"] = {
            "rows": len(points), "ratio_mape": float(np.mean(errs)) if errs else None,
            "measured_mean": float(np.mean([p[2] for p in points])) if points else None,
            "predicted_mean": float(np.mean([p[3] for p in points])) if points else None,
            "points": [[c, b, round(m, 3), round(p, 3)] for c, b, m, p in points],
        }  # fmt: skip
    signed = [(predicted[id(r)] / r.step_ms - 1) * 100 for r in rows]  # +: predicted slower than measured
    # per CNN and configuration, the mean signed error: what an op class costed from the wrong thing shows as, the
    # same sign at every batch size
    per_cnn: dict[str, dict[str, list[float]]] = {}
    for r, e in zip(rows, signed, strict=True):
        per_cnn.setdefault(r.cnn, {}).setdefault(config_name(r), []).append(e)
    by_cnn = {cnn: {k: float(np.mean(v)) for k, v in sorted(c.items())} for cnn, c in sorted(per_cnn.items())}
    mape = float(np.mean(np.abs(signed)))
    return {"rows": len(rows), "mape": mape, "by_config": by_config, "pairs": pairs, "by_cnn": by_cnn}


def transfer(
    model: ReferenceModel, gpus: dict[str, GpuSpecs], gpu: str, other_too: bool
) -> dict[tuple[str, bool], list[float]]:
    """One of our machines (H100 or H200) as a GPU nobody measured: its default-setting steps predicted by the
    constants such a GPU gets (fitted as fit.fit_steps fits the shared ones) on the public rows alone, or on them and
    the other machine's steps; none of its own steps, nor any bundle's, in the fit. Errors (%) per (precision group,
    batch <= 64)."""
    ours = (SET, *H200_FILES)
    other = gpu_family(H200_GPU if gpu == GPU else GPU)

    def leave_out(r: StepRow) -> bool:
        kept = other_too and r.set in ours and gpu_family(r.gpu) == other
        return (r.training is not None or r.set.startswith(SET_PREFIX)) and not kept

    full = calibrate(model, gpus, [], leave_out)
    step = calibrate(model, gpus, [], leave_out, balance=True, held=full)
    fitted = ReferenceModel({**model.params, "step": {**model.params["step"], **step}, "step_families": {}})
    errs: dict[tuple[str, bool], list[float]] = {}
    for r in (r for r in load_own() if r.set in ours and r.gpu == gpu):
        convs, work = network(r.cnn, r.image_size)
        [est] = fitted.predict_steps(
            convs=convs, workload=work, batch_sizes=[r.batch], gpu=gpus[gpu], training=r.training
        )
        errs.setdefault((precision_group(r.precision), r.batch <= 64), []).append(
            abs(est.step_ms / r.step_ms - 1) * 100
        )
    return errs
