"""Assemble a job's result: per CNN × machine × batch size time and cost, and the best choices."""

import math
from typing import Any

from shared import layers, machines
from shared.schemas import JobRequest
from worker import predictor


def result(*, plan: dict[str, Any], request: JobRequest) -> dict[str, Any]:
    """The result document of a job whose layer benchmarks are all stored."""
    sizes = request.batch_size_list()
    predictions: list[dict[str, Any]] = []
    best: list[dict[str, Any]] = []
    models: dict[str, Any] = {}
    for machine in request.machines:
        spec = machines.get_by_name(name=machine)
        model = predictor.latest(machine=machine)
        models[machine] = _model_summary(model, machine)
        for cnn, members in plan["cnns"].items():
            pairs = [(int(s), int(c)) for s, c in members]
            rows = layers.newest(
                signature_ids=[s for s, _ in pairs], machine=machine, batch_sizes=sizes, precision=request.precision
            )
            points = [_point(cnn, machine, bs, pairs, rows, model, spec["price_usd_per_hour"], request) for bs in sizes]
            predictions.extend(points)
            best.append(_best(cnn, machine, points))
    return {"predictions": predictions, "best": best, "models": models}


def _point(
    cnn: str,
    machine: str,
    bs: int,
    members: list[tuple[int, int]],
    rows: dict[tuple[int, int], dict[str, Any]],
    model: dict[str, Any] | None,
    price: float,
    request: JobRequest,
) -> dict[str, Any]:
    conv = predictor.conv_ms(members=members, rows=rows, batch_size=bs)
    point: dict[str, Any] = {
        "cnn": cnn,
        "machine": machine,
        "batch_size": bs,
        "fits_in_memory": conv is not None,
        "conv_ms": conv,
        "iteration_seconds": None,
        "epoch_seconds": None,
        "total_seconds": None,
        "cost_usd": None,
    }
    if conv is None or model is None:
        return point
    iteration = predictor.predict_ms(model, conv) / 1000
    epoch = math.ceil(request.dataset_size / bs) * iteration
    total = epoch * request.epochs
    point.update(
        iteration_seconds=iteration,
        epoch_seconds=epoch,
        total_seconds=total,
        cost_usd=price * total / 3600,
    )
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
    }
