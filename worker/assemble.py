"""Assemble a job's result: per CNN × machine × batch size time, cost and energy, and the best choices."""

import math
from typing import Any

from shared import cnns, layers, machines
from shared.errors import TraincastError
from shared.schemas import JobRequest
from worker import features, predictor

ENERGY_NOTE = "energy_kwh is an upper bound: GPU board power × GPU count × time (GPUs rarely draw full power)"


def result(*, request: JobRequest) -> dict[str, Any]:
    """The result document of a job whose layer benchmarks are all stored."""
    sizes = request.batch_size_list()
    predictions: list[dict[str, Any]] = []
    best: list[dict[str, Any]] = []
    model_info: dict[str, Any] = {}
    for machine in request.machines:
        spec = machines.get_by_name(name=machine)
        model = predictor.latest(machine=machine)
        model_info[machine] = _model_summary(model, machine)
        for cnn in request.cnns:  # request order: the plan is jsonb, whose keys PostgreSQL reorders
            key: dict[str, Any] = {
                "name": cnn,
                "image_size": request.image_size,
                "num_classes": cnns.variant_classes(cnn, request.num_classes),
            }
            members = layers.members(**key)
            work = layers.workload(**key)
            rows = layers.newest(
                signature_ids=[m[0] for m in members], machine=machine, batch_sizes=sizes, precision=request.precision
            )
            points = []
            for bs in sizes:
                x = features.vector(
                    members=members, rows={sig: rows[(sig, bs)] for sig, _, _ in members}, workload=work,
                    batch_size=bs, image_size=request.image_size, optimizer=request.optimizer, machine=spec,
                )  # fmt: skip
                point = _point(cnn, machine, bs, x, model, spec, request)
                # Where this point's layer timings were measured (one environment unless some were missing).
                point["layer_environments"] = sorted({rows[(sig, bs)]["environment_id"] for sig, _, _ in members})
                points.append(point)
            predictions.extend(points)
            best.append(_best(cnn, machine, points))
    return {"predictions": predictions, "best": best, "models": model_info, "energy_note": ENERGY_NOTE}


def _point(
    cnn: str,
    machine: str,
    bs: int,
    x: list[float] | None,
    model: dict[str, Any] | None,
    spec: dict[str, Any],
    request: JobRequest,
) -> dict[str, Any]:
    conv = x[features.NAMES.index("conv_ms")] if x is not None else None
    point: dict[str, Any] = {"cnn": cnn, "machine": machine, "batch_size": bs, "fits_in_memory": x is not None}
    point["conv_ms"] = conv
    for name in ("iteration_seconds", "epoch_seconds", "total_seconds", "cost_usd", "energy_kwh"):
        point[name] = point[f"{name}_p10"] = point[f"{name}_p90"] = None
    if x is None or conv is None or model is None:
        return point
    try:
        low, mid, high = predictor.predict_ms(model, x, conv)
    except TraincastError:
        return point
    iterations = math.ceil(request.dataset_size / bs) * request.epochs
    power_kw = (spec.get("gpu_tdp_watts") or 0) * spec.get("gpu_count", 0) / 1000
    for suffix, ms in (("_p10", low), ("", mid), ("_p90", high)):
        total = ms / 1000 * iterations
        point[f"iteration_seconds{suffix}"] = ms / 1000
        point[f"epoch_seconds{suffix}"] = total / request.epochs
        point[f"total_seconds{suffix}"] = total
        point[f"cost_usd{suffix}"] = spec["price_usd_per_hour"] * total / 3600
        point[f"energy_kwh{suffix}"] = power_kw * total / 3600 if power_kw else None
    return point


def _best(cnn: str, machine: str, points: list[dict[str, Any]]) -> dict[str, Any]:
    usable = [p for p in points if p["total_seconds"] is not None]

    def pick(key: Any) -> dict[str, Any] | None:
        if not usable:
            return None
        p = min(usable, key=key)
        return {"batch_size": p["batch_size"], "total_seconds": p["total_seconds"], "cost_usd": p["cost_usd"]}

    return {
        "cnn": cnn,
        "machine": machine,
        "min_time": pick(lambda p: (p["total_seconds"], p["batch_size"])),
        # Ties in cost (a free machine) go to the faster batch size.
        "min_cost": pick(lambda p: (p["cost_usd"], p["total_seconds"], p["batch_size"])),
    }


def _model_summary(model: dict[str, Any] | None, machine: str) -> dict[str, Any]:
    if model is None:
        return {
            "status": "no_model",
            "detail": f"no predictor model for {machine} yet: run `traincast calibrate --machine {machine}`",
        }
    return {
        "status": "ok",
        "version": model["version"],
        "kind": model["kind"],
        "loco_mape": model["evaluation"].get("loco_mape"),
        # More than this machine type: the model also learnt from other types' steps (few of its own).
        "pooled_from": model["evaluation"].get("pooled_from", [machine]),
    }
