"""Assembling a result, stage 2 of 4 (worker/assemble.py): each (CNN, machine type)'s one-GPU points.

Two estimators answer a machine type, behind one interface (`Estimator`), as a `Gathered` machine says:
- `Measured`: its layer benchmarks (or those of a machine type with the same GPU model) and a whole-step model
  fitted on its measurements, source "benchmarked" (null times and `no_model` where it has no model yet);
- `Reference`: a GPU with no such benchmarks gets the reference predictor, learnt from public measurements only
  (prediction/reference), with the error it showed on held-out public data, source "reference".
"""

import contextlib
from typing import Protocol

import numpy as np

from prediction import features, reference
from prediction.points import blank, blanks, fill_many, significant
from shared.core.errors import TraincastError
from shared.jobs.point import PointDict
from shared.jobs.result import ModelSummaryDict
from shared.measurements import environments, layers, ops
from shared.measurements.environments import Row
from shared.training import TrainConfig
from worker import predictor, step_cache
from worker.gather import Cnn, Gathered, Machine

# CNN → its points on one machine type, one per batch size, in the request's order.
ByCnn = dict[str, list[PointDict]]


class Estimator(Protocol):
    """One way of answering a machine type."""

    def points(self, machine: Machine) -> ByCnn:
        """Every CNN's one-GPU points on the machine type, their times, cost and energy filled where known."""
        ...

    def summary(self, machine: Machine) -> ModelSummaryDict:
        """What the result's `models` says of the machine type (shared/jobs/result.py ModelSummary)."""
        ...


def estimator(gathered: Gathered, machine: Machine) -> Estimator:
    """The estimator that answers the machine type."""
    if machine.measured:
        return Measured(gathered)
    return Reference(gathered)


class Measured:
    """Points from measured layer timings and a fitted whole-step model (worker/predictor.py)."""

    def __init__(self, gathered: Gathered) -> None:
        self.g = gathered

    def points(self, machine: Machine) -> ByCnn:
        """One query per table, one model call for every CNN."""
        g, info = self.g, machine.info
        layer_rows = layers.newest_first(
            signature_ids=sorted({m[0] for c in g.cnns for m in c.members}), machine_types=machine.peers,
            batch_sizes=g.sizes, precision=g.training.layer_precision, channels_last=g.training.channels_last,
        )  # fmt: skip
        op_rows = ops.newest_first(
            signature_ids=sorted({m[0] for members in g.op_members.values() for m in members}),
            machine_types=machine.peers, batch_sizes=g.sizes, config=g.training,
        )  # fmt: skip
        out: ByCnn = {}
        tables, usable_points = [], []
        for cnn in g.cnns:
            ops_of = g.op_members[cnn.name]
            # Each CNN's timings from the environment holding most of its own points (layers.newest, per CNN).
            rows = _own(layer_rows, {m[0] for m in cnn.members}, "signature_id")
            its_ops = _own(op_rows, {m[0] for m in ops_of}, "op_signature_id")
            x, usable = features.table(
                members=cnn.members, rows=rows, workload=cnn.work, batch_sizes=g.sizes,
                image_size=g.request.image_size, optimizer=g.request.optimizer, machine_info=info,
                op_members=ops_of, op_rows=its_ops,
            )  # fmt: skip
            points = []
            for i, bs in enumerate(g.sizes):
                conv = float(significant(x["conv_ms"][i : i + 1])[0]) if usable[i] else None
                point = blank(
                    cnn.name, machine.name, bs, info, source="benchmarked", fits=bool(usable[i]), conv_ms=conv
                )
                used = [rows[(sig, bs)] for sig, _, _ in cnn.members]
                # Where this point's layer timings were measured (one environment unless some were missing).
                point["layer_environments"] = sorted({r["environment_id"] for r in used})
                point["measured_on"] = sorted({r["machine_type"] for r in used})
                points.append(point)
            out[cnn.name] = points
            tables.append(x[usable])
            usable_points += [p for p, ok in zip(points, usable, strict=True) if ok]
        if machine.model is not None and usable_points:
            # A model of an older kind raises: the points stay without times, the summary says to retrain it.
            with contextlib.suppress(TraincastError):
                ms = predictor.predict_table(machine.model, np.concatenate(tables))
                fill_many(usable_points, np.array(ms, dtype=float).reshape(-1, 3), info, g.request)
        return out

    def summary(self, machine: Machine) -> ModelSummaryDict:
        training, model = self.g.training, machine.model
        if model is None:
            return {
                "status": "no_model",
                "source": "benchmarked",
                "training": training.cost_key(),
                "detail": (
                    f"no predictor model for {machine.name} trained with {training.cost_key()} yet: run "
                    f"`{training.calibrate_command(machine.name)}`"
                ),
            }
        summary: ModelSummaryDict = {
            "status": "ok",
            "source": "benchmarked",
            "version": model["version"],
            "kind": model["kind"],
            "training": model["cost_key"],
            "loco_mape": model["evaluation"].get("loco_mape"),
            "interval_coverage": model["evaluation"].get("interval_coverage"),
            # More than this machine type: the model also learnt from other types' steps (few of its own).
            "pooled_from": model["evaluation"].get("pooled_from", [machine.name]),
        }
        if machine.fitted_on != machine.name:
            summary["measured_on"] = machine.fitted_on  # another machine type with the same GPU model
        return summary


def settings(training: TrainConfig) -> str:
    """The layout and cudnn.benchmark a reference answer is for, the defaults named as such."""
    layout = "channels_last" if training.channels_last else "NCHW (PyTorch's default)"
    tuned = "cudnn.benchmark on" if training.cudnn_benchmark else "cudnn.benchmark off (PyTorch's default)"
    return f"{layout}, {tuned}"


def _own(rows: list[Row], sigs: set[int], column: str) -> dict[tuple[int, int], Row]:
    """(signature, batch size) → row, from newest-first rows of many CNNs narrowed to one CNN's signatures."""
    return environments.one_environment([r for r in rows if r[column] in sigs], column)


class Reference:
    """Points from the reference predictor, for a GPU with no benchmarks or model of its own."""

    def __init__(self, gathered: Gathered) -> None:
        assert gathered.reference is not None  # gather loads it when a machine type needs it
        self.g, self.model = gathered, gathered.reference

    def points(self, machine: Machine) -> ByCnn:
        return {cnn.name: self._points(cnn, machine) for cnn in self.g.cnns}

    def _points(self, cnn: Cnn, machine: Machine) -> list[PointDict]:
        g, info = self.g, machine.info
        gpu = reference.GpuSpecs.from_row(info)
        # Types with the same GPU figures, and later jobs, read the same answer (worker/step_cache.py).
        steps = step_cache.steps(
            self.model, members=cnn.members, workload=cnn.work, batch_sizes=g.sizes, gpu=gpu, training=g.training,
            workload_digest=cnn.digest,
        )  # fmt: skip
        # Each point quotes what held-out steps of its kind showed: its precision, host- or device-bound, its GPU.
        errors = reference.point_errors(
            self.model.accuracy, precision=g.training.precision, launch_bound=steps.launch_bound, gpu=gpu.name
        )
        conv = significant(steps.conv_ms)
        # GPU figures far outside what the model learnt from: no number, never NaN in a result.
        finite = np.isfinite(steps.step_ms) & np.isfinite(conv)
        points, answered = [], []
        make_point = blanks(cnn.name, machine.name, info, "reference")
        error_pct = significant(errors.mape).tolist()
        for b, ok, conv_ms, bound, error in zip(
            steps.batch_size.tolist(), finite.tolist(), conv.tolist(), steps.launch_bound.tolist(), error_pct,
            strict=True,
        ):  # fmt: skip
            # Whether it fits is the memory model's answer (prediction/memory_model.py), filled in by stage 3.
            point = make_point(b, None, conv_ms if ok else None)
            if ok:
                point["reference_error_pct"] = error
                point["launch_bound"] = bound
                answered.append(point)
            points.append(point)
        step = steps.step_ms[finite]
        band = np.column_stack([step * np.exp(errors.low[finite]), step, step * np.exp(errors.high[finite])])
        fill_many(answered, band, info, g.request, layout=(1, 1))  # blanks are one GPU, one node
        return points

    def summary(self, machine: Machine) -> ModelSummaryDict:
        model, training, name = self.model, self.g.training, machine.name
        mape = reference.unseen_gpu_figures(model.accuracy, training.precision)[0]
        kind = "fp32" if reference.band_group(training.precision) == "fp32" else "AMP"
        if machine.other_keys:
            why = (
                f"has whole-step models for {', '.join(machine.other_keys)} only, none for {training.cost_key()} "
                f"(`{training.calibrate_command(name)}`)"
            )
        elif machine.layers_measured:
            why = f"has layer benchmarks but no whole-step model yet (`{training.calibrate_command(name)}`)"
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
                f"{name} ({machine.info['gpu']}) {why}: reference prediction from public measurements of other GPUs "
                f"and our own H100 steps: {mape:.1f}% mean error on public {kind} training steps of GPUs it never saw"
                f"{on_h100}; each point's reference_error_pct is its own kind's (precision, host- or device-bound). "
                f"For {settings(training)}"
            ),
        }
