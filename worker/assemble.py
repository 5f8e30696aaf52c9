"""Assemble a job's result: per CNN × machine × batch size time, cost and energy, and the best choices.

Each machine type is answered one of three ways, said in every point's `source`:
- "benchmarked": its layer benchmarks (or those of a machine type with the same GPU model) and a
  whole-step model fitted on its measurements;
- "reference": a GPU with no such benchmarks yet gets the reference predictor, learnt from public
  measurements only (worker/reference), with the error it showed on held-out public data;
- a machine type with neither (a CPU with no model yet) gets null times and `no_model`.
"""

import contextlib
import math
from collections.abc import Collection
from typing import Any

from shared import cnns, layers, machines, ops
from shared.errors import TraincastError
from shared.schemas import JobRequest
from worker import features, memory, predictor, reference

ENERGY_NOTE = "energy_kwh is an upper bound: GPU board power × GPU count × time (GPUs rarely draw full power)"
GPU_NOTE = (
    "a point is training on one GPU of the machine (gpus_used); cost_usd is the machine's price for that time, "
    "cost_per_gpu_usd its share per GPU"
)
CHANNELS_LAST_NOTE = (
    "channels_last is not modelled by the reference predictor (no public measurements of it): its answers are "
    "those of the default NCHW layout; benchmarked answers come from steps measured in channels_last"
)
TIMES = ("iteration_seconds", "epoch_seconds", "total_seconds", "cost_usd", "energy_kwh")


def result(
    *, request: JobRequest, plan: dict[str, Any] | None = None, incomplete: Collection[str] = ()
) -> dict[str, Any]:
    """The result document of a job: every machine type it names, by its best source.

    incomplete: machine types some of whose layer benchmarks are missing (they get reference answers).
    """
    sizes = request.batch_size_list()
    peers: dict[str, list[str]] = (plan or {}).get("peers") or {m: [m] for m in request.machines}
    specs = {m["name"]: m for m in machines.list_all()}
    variants = {cnn: _variant(cnn, request) for cnn in request.cnns}
    training = request.training()
    everyone = sorted({p for m in request.machines for p in peers[m]})
    # Only a model fitted for this training configuration's work answers it (shared/training.py).
    models = predictor.latest_of(machines=everyone, cost_key=training.cost_key())
    other_keys = predictor.keys_of(machines=everyone)
    # Machine types with the same GPU figures get the same reference answer: computed once per CNN.
    reference_cache: dict[tuple[Any, str], list[Any]] = {}
    predictions: list[dict[str, Any]] = []
    best: list[dict[str, Any]] = []
    model_info: dict[str, Any] = {}
    for machine in request.machines:
        spec = specs[machine]
        fitted_on = next((p for p in peers[machine] if p in models), None)
        model = models.get(fitted_on) if fitted_on else None
        measured = machine not in incomplete and (model is not None or spec["gpu"] is None)
        if measured:
            model_info[machine] = _model_summary(model, machine, fitted_on, request)
        else:
            keys = sorted({k for p in peers[machine] for k in other_keys.get(p, [])})
            model_info[machine] = _reference_summary(
                machine, spec, layers_measured=machine not in incomplete, request=request, other_keys=keys
            )
        for cnn in request.cnns:  # request order: the plan is jsonb, whose keys PostgreSQL reorders
            members, work = variants[cnn]
            if measured:
                points = _measured(cnn, machine, peers[machine], members, work, model, spec, request, sizes)
            else:
                points = _reference(cnn, machine, members, work, spec, request, sizes, reference_cache)
            oom = [p["batch_size"] for p in points if p["fits_in_memory"] is False]  # measured: before the model
            memory.annotate(points, work, spec, request)
            predictions.extend(points)
            best.append(_best(cnn, machine, points, memory.max_batch_size(work, spec, request, measured_oom=oom)))
    out = {
        "training": training.model_dump(),
        "predictions": predictions,
        "best": best,
        "models": model_info,
        "energy_note": ENERGY_NOTE,
        "gpu_note": GPU_NOTE,
    }
    if training.channels_last and any(m["source"] == "reference" for m in model_info.values()):
        out["channels_last_note"] = CHANNELS_LAST_NOTE
    return out


def _variant(cnn: str, request: JobRequest) -> tuple[list[tuple[int, dict[str, Any], int]], dict[str, Any]]:
    key: dict[str, Any] = {
        "name": cnn,
        "image_size": request.image_size,
        "num_classes": cnns.variant_classes(cnn, request.num_classes),
    }
    return layers.members(**key), layers.workload(**key)


def _measured(
    cnn: str,
    machine: str,
    peers: list[str],
    members: list[tuple[int, dict[str, Any], int]],
    work: dict[str, Any],
    model: dict[str, Any] | None,
    spec: dict[str, Any],
    request: JobRequest,
    sizes: list[int],
) -> list[dict[str, Any]]:
    training = request.training()
    rows = layers.newest(
        signature_ids=[m[0] for m in members], machines=peers, batch_sizes=sizes,
        precision=training.layer_precision, channels_last=training.channels_last,
    )  # fmt: skip
    op_members = ops.members(
        name=cnn, image_size=request.image_size, num_classes=cnns.variant_classes(cnn, request.num_classes)
    )
    op_rows = ops.newest(signature_ids=[m[0] for m in op_members], machines=peers, batch_sizes=sizes, config=training)
    points = []
    for bs in sizes:
        x = features.vector(
            members=members, rows={sig: rows[(sig, bs)] for sig, _, _ in members}, workload=work,
            batch_size=bs, image_size=request.image_size, optimizer=request.optimizer, machine=spec,
            op_members=op_members, op_rows={sig: r for (sig, b), r in op_rows.items() if b in (bs, 0)},
        )  # fmt: skip
        conv = x[features.NAMES.index("conv_ms")] if x is not None else None
        point = _blank(cnn, machine, bs, spec, source="benchmarked", fits=x is not None, conv_ms=conv)
        if x is not None and conv is not None and model is not None:
            # A model of an older kind raises: the point stays without times, the summary says to retrain it.
            with contextlib.suppress(TraincastError):
                _fill(point, predictor.predict_ms(model, x, conv), spec, request)
        used = [rows[(sig, bs)] for sig, _, _ in members]
        # Where this point's layer timings were measured (one environment unless some were missing).
        point["layer_environments"] = sorted({r["environment_id"] for r in used})
        point["measured_on"] = sorted({r["machine_type"] for r in used})
        points.append(point)
    return points


def _reference(
    cnn: str,
    machine: str,
    members: list[tuple[int, dict[str, Any], int]],
    work: dict[str, Any],
    spec: dict[str, Any],
    request: JobRequest,
    sizes: list[int],
    cache: dict[tuple[Any, str], list[Any]],
) -> list[dict[str, Any]]:
    model = reference.load()
    gpu = reference.GpuSpecs.from_row(spec)
    if (gpu, cnn) not in cache:
        cache[(gpu, cnn)] = model.predict_steps(
            convs=[(layer, count) for _sig, layer, count in members], workload=work, batch_sizes=sizes,
            gpu=gpu, training=request.training(),
        )  # fmt: skip
    estimates = cache[(gpu, cnn)]
    low = math.exp(model.accuracy["whole_step_log_ratio_p10"])
    high = math.exp(model.accuracy["whole_step_log_ratio_p90"])
    points = []
    for e in estimates:
        conv = e.conv_forward_ms + e.conv_backward_data_ms + e.conv_backward_weight_ms
        if not (math.isfinite(e.step_ms) and math.isfinite(conv)):
            # GPU figures far outside what the model learnt from: no number, never NaN in a result.
            points.append(_blank(cnn, machine, e.batch_size, spec, source="reference", fits=None, conv_ms=None))
            continue
        # Whether it fits is the memory model's answer (worker/memory.py), filled in by the caller.
        point = _blank(cnn, machine, e.batch_size, spec, source="reference", fits=None, conv_ms=conv)
        point["reference_error_pct"] = model.accuracy["whole_step_mape"]
        point["launch_bound"] = e.launch_bound
        _fill(point, (e.step_ms * low, e.step_ms, e.step_ms * high), spec, request)
        points.append(point)
    return points


def _blank(
    cnn: str, machine: str, bs: int, spec: dict[str, Any], *, source: str, fits: bool | None, conv_ms: float | None
) -> dict[str, Any]:
    point: dict[str, Any] = {
        "cnn": cnn,
        "machine": machine,
        "batch_size": bs,
        "source": source,
        "fits_in_memory": fits,
        "conv_ms": conv_ms,
        "gpus_used": 1 if spec.get("gpu_count") else 0,
        "layer_environments": [],
        "measured_on": [],
        "cost_per_gpu_usd": None,
    }
    for name in TIMES:
        point[name] = point[f"{name}_p10"] = point[f"{name}_p90"] = None
    return point


def _fill(point: dict[str, Any], ms: tuple[float, float, float], spec: dict[str, Any], request: JobRequest) -> None:
    """Times, cost and energy of a point from its (P10, median, P90) iteration time in ms."""
    iterations = math.ceil(request.dataset_size / point["batch_size"]) * request.epochs
    gpus = spec.get("gpu_count") or 0
    power_kw = (spec.get("gpu_tdp_watts") or 0) * gpus / 1000
    for suffix, value in zip(("_p10", "", "_p90"), ms, strict=True):
        total = value / 1000 * iterations
        point[f"iteration_seconds{suffix}"] = value / 1000
        point[f"epoch_seconds{suffix}"] = total / request.epochs
        point[f"total_seconds{suffix}"] = total
        point[f"cost_usd{suffix}"] = spec["price_usd_per_hour"] * total / 3600
        point[f"energy_kwh{suffix}"] = power_kw * total / 3600 if power_kw else None
    if gpus:
        point["cost_per_gpu_usd"] = point["cost_usd"] / gpus


def _best(cnn: str, machine: str, points: list[dict[str, Any]], max_batch_size: int | None) -> dict[str, Any]:
    # A point that does not fit is never best; one whose fit is unknown may be.
    usable = [p for p in points if p["total_seconds"] is not None and p["fits_in_memory"] is not False]

    def pick(key: Any) -> dict[str, Any] | None:
        if not usable:
            return None
        p = min(usable, key=key)
        return {
            "batch_size": p["batch_size"],
            "total_seconds": p["total_seconds"],
            "cost_usd": p["cost_usd"],
            "source": p["source"],
        }

    return {
        "cnn": cnn,
        "machine": machine,
        "max_batch_size": max_batch_size,
        "min_time": pick(lambda p: (p["total_seconds"], p["batch_size"])),
        # Ties in cost (a free machine) go to the faster batch size.
        "min_cost": pick(lambda p: (p["cost_usd"], p["total_seconds"], p["batch_size"])),
    }


def _model_summary(
    model: dict[str, Any] | None, machine: str, fitted_on: str | None, request: JobRequest
) -> dict[str, Any]:
    training = request.training()
    if model is None:
        return {
            "status": "no_model",
            "source": "benchmarked",
            "training": training.cost_key(),
            "detail": (
                f"no predictor model for {machine} trained with {training.cost_key()} yet: run "
                f"`{training.calibrate_command(machine)}`"
            ),
        }
    summary = {
        "status": "ok",
        "source": "benchmarked",
        "version": model["version"],
        "kind": model["kind"],
        "training": model["cost_key"],
        "loco_mape": model["evaluation"].get("loco_mape"),
        "interval_coverage": model["evaluation"].get("interval_coverage"),
        # More than this machine type: the model also learnt from other types' steps (few of its own).
        "pooled_from": model["evaluation"].get("pooled_from", [machine]),
    }
    if fitted_on != machine:
        summary["measured_on"] = fitted_on  # another machine type with the same GPU model
    return summary


def _reference_summary(
    machine: str, spec: dict[str, Any], *, layers_measured: bool, request: JobRequest, other_keys: list[str]
) -> dict[str, Any]:
    model = reference.load()
    mape = model.accuracy["whole_step_mape"]
    training = request.training()
    if other_keys:
        why = (
            f"has whole-step models for {', '.join(other_keys)} only, none for {training.cost_key()} "
            f"(`{training.calibrate_command(machine)}`)"
        )
    elif layers_measured:
        why = f"has layer benchmarks but no whole-step model yet (`{training.calibrate_command(machine)}`)"
    else:
        why = "has no benchmarks of its own yet"
    return {
        "status": "reference",
        "source": "reference",
        "kind": "reference",
        "training": training.cost_key(),
        "version": model.version,
        "whole_step_mape": mape,
        "evaluated_on": model.accuracy.get("evaluated_on"),
        "detail": (
            f"{machine} ({spec['gpu']}) {why}: reference prediction from public "
            f"measurements of other GPUs, {mape:.1f}% mean error on held-out public whole training steps"
        ),
    }
