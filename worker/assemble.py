"""Assemble a job's result: per CNN × machine × batch size time, cost and energy, and the best choices.

Each machine type is answered one of three ways, said in every point's `source`:
- "benchmarked": its layer benchmarks (or those of a machine type with the same GPU model) and a
  whole-step model fitted on its measurements;
- "reference": a GPU with no such benchmarks yet gets the reference predictor, learnt from public
  measurements only (worker/reference), with the error it showed on held-out public data;
- a machine type with neither (a CPU with no model yet) gets null times and `no_model`.
"""

import contextlib
from collections.abc import Collection
from typing import Any

import numpy as np

from shared import machine_types
from shared.cnn import registry as cnns
from shared.core.errors import TraincastError
from shared.jobs.request import JobRequest
from shared.machine_types import MachineTypeInfo
from shared.measurements import environments, layers, ops
from shared.measurements import inputs as input_rates
from shared.measurements.environments import Row
from worker import features, inputs, layouts, memory, predictor, reference, reference_store, schedules, step_cache
from worker.points import best_of, blank, blanks, fill_many, significant

GIB = 2**30
ENERGY_NOTE = "energy_kwh is an upper bound: GPU board power × GPUs used × time (GPUs rarely draw full power)"
GPU_NOTE = (
    "a point trains on gpus_used GPUs of the machine (nodes machines of it); cost_usd is their price for that time, "
    "cost_per_gpu_usd each of their GPUs' share"
)
CHANNELS_LAST_NOTE = (
    "channels_last is not modelled by the reference predictor (no public measurements of it): its answers are "
    "those of the default NCHW layout; benchmarked answers come from steps measured in channels_last"
)


def result(
    *, request: JobRequest, peers: dict[str, list[str]] | None = None, incomplete: Collection[str] = ()
) -> dict[str, Any]:
    """The result document of a job: every machine type it names, by its best source.

    incomplete: machine types some of whose layer benchmarks are missing (they get reference answers).
    """
    sizes = request.batch_size_list()
    peers = peers or {m: [m] for m in request.machines}
    infos = machine_types.by_names(names=list(request.machines))
    classes = {cnn: cnns.variant_classes(cnn, request.num_classes) for cnn in request.cnns}
    variants = layers.variants(classes=classes, image_size=request.image_size)
    training = request.training()
    everyone = sorted({p for m in request.machines for p in peers[m]})
    # Only a model fitted for this training configuration's work answers it (shared/training.py).
    models = predictor.latest_of(machine_types=everyone, cost_key=training.cost_key())
    other_keys = predictor.keys_of(machine_types=everyone)
    # By CNN: its workload's digest, and its peaks and largest batch sizes (kept by this process for later jobs).
    digests = {cnn: step_cache.digest(variants[cnn][1]) for cnn in request.cnns}
    memos = {cnn: memory.memo(digests[cnn], request) for cnn in request.cnns}
    op_members: dict[str, list[tuple[int, dict[str, Any], int]]] | None = None
    predictions: list[dict[str, Any]] = []
    best: list[dict[str, Any]] = []
    priced: list[dict[str, Any]] = []
    model_info: dict[str, Any] = {}
    pipeline: dict[str, Any] = {}
    rates = input_rates.newest() if request.input is not None and request.input.decodes else None
    for machine_type in request.machines:
        info = infos[machine_type]
        fed = inputs.sourced(machine_type, rates) if rates is not None else None
        if fed is not None and request.input is not None:
            pipeline[machine_type] = inputs.summary(fed, info, request.input)
        fitted_on = next((p for p in peers[machine_type] if p in models), None)
        model = models.get(fitted_on) if fitted_on else None
        measured = machine_type not in incomplete and (
            model is not None or not machine_types.reference_can_answer(info)
        )
        if measured:
            model_info[machine_type] = _model_summary(model, machine_type, fitted_on, request)
            if op_members is None:
                op_members = ops.members_of(classes=classes, image_size=request.image_size)
            by_cnn = _measured(machine_type, peers[machine_type], variants, op_members, model, info, request, sizes)
        else:
            keys = sorted({k for p in peers[machine_type] for k in other_keys.get(p, [])})
            model_info[machine_type] = _reference_summary(
                machine_type, info, layers_measured=machine_type not in incomplete, request=request, other_keys=keys
            )
        for cnn in request.cnns:  # request order: the plan is jsonb, whose keys PostgreSQL reorders
            members, work = variants[cnn]
            if measured:
                points = by_cnn[cnn]
            else:
                points = _reference(cnn, machine_type, members, work, info, request, sizes, digest=digests[cnn])
            oom = [p["batch_size"] for p in points if p["fits_in_memory"] is False]  # measured: before the model
            weights = float(work.get("parameters") or 0)
            points = layouts.spread(points, machine_type=machine_type, info=info, request=request, parameters=weights)
            if fed is not None:
                inputs.apply(points, info=info, request=request, src=fed)
            memo = memos[cnn]
            memory.annotate(points, work, info, request, peaks=memo.peaks)
            predictions.extend(points)
            largest = memory.max_batch_size(work, info, request, measured_oom=oom, largest=memo.largest)
            capacity = memory.capacity_bytes(info)
            best.append(best_of(cnn, machine_type, points, largest, capacity / GIB if capacity else None))
            if (schedule := schedules.priced(cnn, machine_type, points, request)) is not None:
                priced.append(schedule)
    out = {
        "training": training.model_dump(),
        "predictions": predictions,
        "best": best,
        "models": model_info,
        "energy_note": ENERGY_NOTE,
        "gpu_note": GPU_NOTE,
    }
    if pipeline:
        out["inputs"], out["input_note"] = pipeline, inputs.NOTE
    if priced:
        out["schedules"], out["schedule_note"] = priced, schedules.NOTE
    if any(p["gpus_used"] > 1 or p["nodes"] > 1 for p in predictions):
        out["parallel_note"] = layouts.NOTE
    if training.channels_last and any(m["source"] == "reference" for m in model_info.values()):
        out["channels_last_note"] = CHANNELS_LAST_NOTE
    return out


Members = list[tuple[int, dict[str, Any], int]]


def _measured(
    machine_type: str,
    peers: list[str],
    variants: dict[str, tuple[Members, dict[str, Any]]],
    op_members: dict[str, Members],
    model: predictor.PredictorModel | None,
    info: MachineTypeInfo,
    request: JobRequest,
    sizes: list[int],
) -> dict[str, list[dict[str, Any]]]:
    """Every CNN's points on one machine type: one query per table, one model call for all of them."""
    training = request.training()
    layer_rows = layers.newest_first(
        signature_ids=sorted({m[0] for members, _ in variants.values() for m in members}), machine_types=peers,
        batch_sizes=sizes, precision=training.layer_precision, channels_last=training.channels_last,
    )  # fmt: skip
    op_rows = ops.newest_first(
        signature_ids=sorted({m[0] for members in op_members.values() for m in members}), machine_types=peers,
        batch_sizes=sizes, config=training,
    )  # fmt: skip
    out: dict[str, list[dict[str, Any]]] = {}
    tables, usable_points = [], []
    for cnn, (members, work) in variants.items():
        # Each CNN's timings from the environment holding most of its own points (layers.newest, per CNN).
        rows = _own(layer_rows, {m[0] for m in members}, "signature_id")
        its_ops = _own(op_rows, {m[0] for m in op_members[cnn]}, "op_signature_id")
        x, usable = features.table(
            members=members, rows=rows, workload=work, batch_sizes=sizes, image_size=request.image_size,
            optimizer=request.optimizer, machine_info=info, op_members=op_members[cnn], op_rows=its_ops,
        )  # fmt: skip
        points = []
        for i, bs in enumerate(sizes):
            conv = float(significant(x["conv_ms"][i : i + 1])[0]) if usable[i] else None
            point = blank(cnn, machine_type, bs, info, source="benchmarked", fits=bool(usable[i]), conv_ms=conv)
            used = [rows[(sig, bs)] for sig, _, _ in members]
            # Where this point's layer timings were measured (one environment unless some were missing).
            point["layer_environments"] = sorted({r["environment_id"] for r in used})
            point["measured_on"] = sorted({r["machine_type"] for r in used})
            points.append(point)
        out[cnn] = points
        tables.append(x[usable])
        usable_points += [p for p, ok in zip(points, usable, strict=True) if ok]
    if model is not None and usable_points:
        # A model of an older kind raises: the points stay without times, the summary says to retrain it.
        with contextlib.suppress(TraincastError):
            ms = predictor.predict_table(model, np.concatenate(tables))
            fill_many(usable_points, np.array(ms, dtype=float).reshape(-1, 3), info, request)
    return out


def _own(rows: list[Row], sigs: set[int], column: str) -> dict[tuple[int, int], Row]:
    """(signature, batch size) → row, from newest-first rows of many CNNs narrowed to one CNN's signatures."""
    return environments.one_environment([r for r in rows if r[column] in sigs], column)


def _reference(
    cnn: str,
    machine_type: str,
    members: Members,
    work: dict[str, Any],
    info: MachineTypeInfo,
    request: JobRequest,
    sizes: list[int],
    *,
    digest: bytes,
) -> list[dict[str, Any]]:
    """A CNN's reference points on a GPU machine type; digest: its workload's (step_cache.digest)."""
    model = reference_store.attached(reference.load())
    gpu = reference.GpuSpecs.from_row(info)
    # Types with the same GPU figures, and later jobs, read the same answer (worker/step_cache.py).
    steps = step_cache.steps(
        model, members=members, workload=work, batch_sizes=sizes, gpu=gpu, training=request.training(),
        workload_digest=digest,
    )  # fmt: skip
    # Each point quotes what held-out steps of its kind showed: its precision, host- or device-bound, its GPU.
    errors = reference.point_errors(
        model.accuracy, precision=request.training().precision, launch_bound=steps.launch_bound, gpu=gpu.name
    )
    conv = significant(steps.conv_ms)
    # GPU figures far outside what the model learnt from: no number, never NaN in a result.
    finite = np.isfinite(steps.step_ms) & np.isfinite(conv)
    points, answered = [], []
    make_point = blanks(cnn, machine_type, info, "reference")
    error_pct = significant(errors.mape).tolist()
    for b, ok, conv_ms, bound, error in zip(
        steps.batch_size.tolist(), finite.tolist(), conv.tolist(), steps.launch_bound.tolist(), error_pct, strict=True
    ):
        # Whether it fits is the memory model's answer (worker/memory.py), filled in by the caller.
        point = make_point(b, None, conv_ms if ok else None)
        if ok:
            point["reference_error_pct"] = error
            point["launch_bound"] = bound
            answered.append(point)
        points.append(point)
    step = steps.step_ms[finite]
    band = np.column_stack([step * np.exp(errors.low[finite]), step, step * np.exp(errors.high[finite])])
    fill_many(answered, band, info, request)
    return points


def _model_summary(
    model: predictor.PredictorModel | None, machine_type: str, fitted_on: str | None, request: JobRequest
) -> dict[str, Any]:
    training = request.training()
    if model is None:
        return {
            "status": "no_model",
            "source": "benchmarked",
            "training": training.cost_key(),
            "detail": (
                f"no predictor model for {machine_type} trained with {training.cost_key()} yet: run "
                f"`{training.calibrate_command(machine_type)}`"
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
        "pooled_from": model["evaluation"].get("pooled_from", [machine_type]),
    }
    if fitted_on != machine_type:
        summary["measured_on"] = fitted_on  # another machine type with the same GPU model
    return summary


def _reference_summary(
    machine_type: str, info: MachineTypeInfo, *, layers_measured: bool, request: JobRequest, other_keys: list[str]
) -> dict[str, Any]:
    model = reference.load()
    mape = model.accuracy["whole_step_mape"]
    training = request.training()
    if other_keys:
        why = (
            f"has whole-step models for {', '.join(other_keys)} only, none for {training.cost_key()} "
            f"(`{training.calibrate_command(machine_type)}`)"
        )
    elif layers_measured:
        why = f"has layer benchmarks but no whole-step model yet (`{training.calibrate_command(machine_type)}`)"
    else:
        why = "has no benchmarks of its own yet"
    own = reference.held_out_on_h100(model.accuracy, training.precision)
    on_h100 = f"; on an H100, {own:.1f}% on CNNs it never saw ({reference.H100_SETTING})" if own is not None else ""
    return {
        "status": "reference",
        "source": "reference",
        "kind": "reference",
        "training": training.cost_key(),
        "version": model.version,
        "whole_step_mape": mape,
        "evaluated_on": model.accuracy.get("evaluated_on"),
        "detail": (
            f"{machine_type} ({info['gpu']}) {why}: reference prediction from public measurements of other GPUs "
            f"and our own H100 steps: {mape:.1f}% mean error on public whole training steps of GPUs it never saw"
            f"{on_h100}; each point's reference_error_pct is its own kind's (precision, host- or device-bound). "
            "For PyTorch's defaults: cudnn.benchmark off, NCHW"
        ),
    }
