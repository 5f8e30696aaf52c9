"""Assemble a job's result: per CNN × machine × batch size time, cost and energy, and the best choices.

Four stages, each a function here with typed values (docs/ARCHITECTURE.md, Assembling a result):
1. gather (worker/gather.py): everything the job needs, read once → `Gathered`;
2. estimate (worker/estimate.py): each (CNN, machine type)'s one-GPU points by its `Estimator`, the measured
   model or the reference predictor → `list[PointDict]`, and the machine type's model summary;
3. annotate: data-parallel layouts (prediction/layouts.py), the input pipeline (prediction/input_pipeline.py) and
   memory (prediction/memory_model.py: peaks, fits, the largest batch size) → `Annotated`, the points stored;
4. choose: the best choices (prediction/points.py) and priced schedules (worker/schedules.py) → `ResultDict`.
"""

from collections.abc import Collection
from dataclasses import dataclass

from prediction import input_pipeline, layouts, memory_model
from prediction.points import best_of, withhold_unfit
from shared.jobs.point import PointDict
from shared.jobs.request import JobRequest
from shared.jobs.result import BestDict, ModelSummaryDict, PricedScheduleDict, ResultDict
from worker import decisions, schedules
from worker.estimate import estimator
from worker.gather import Cnn, Gathered, Machine, gather

GIB = 2**30
SPOT_NOTE = (
    "spot_cost_usd: the same run at the catalog's spot price. Spot instances can be interrupted at short notice; "
    "the time lost to interruptions and restarts from a checkpoint is not in the figure, and a spot price moves"
)
ENERGY_NOTE = "energy_kwh is an upper bound: GPU board power × GPUs used × time (GPUs rarely draw full power)"
GPU_NOTE = (
    "a point trains on gpus_used GPUs of the machine (nodes machines of it); cost_usd is their price for that time, "
    "cost_per_gpu_usd each of their GPUs' share"
)
SETTINGS_NOTE = (
    "the reference predictor costs channels_last and cudnn.benchmark with multipliers per precision and kind of "
    "work learnt from whole steps we measured in those settings on one GPU (an H100; cudnn.benchmark in fp32 only, "
    "so under autocast it changes no reference answer): another GPU gets the H100's multiplier for each kind of "
    "work, applied to its own time for that work; grouped convs that are not depthwise (ResNeXt's, RegNet's) gain "
    "nothing from channels_last and pay copies to and from NCHW, the least they cost (cuDNN's NHWC kernels for them "
    "have been reported several times slower on some versions, which no step of ours has measured); benchmarked "
    "answers come from steps measured in these settings"
)


@dataclass(frozen=True)
class Annotated:
    """One (CNN, machine type)'s points as stored (stage 3's output), and what choosing needs of them."""

    cnn: Cnn
    machine: Machine
    points: list[PointDict]
    max_batch_size: int | None  # the largest that fits (below any measured out of memory); None if unknown
    capacity_gib: float | None  # one GPU's memory (a CPU: the machine's RAM); None if unknown


def result(
    *, request: JobRequest, peers: dict[str, list[str]] | None = None, incomplete: Collection[str] = ()
) -> ResultDict:
    """The result document of a job: every machine type it names, by its best source.

    incomplete: machine types some of whose layer benchmarks are missing (they get reference answers).
    """
    g = gather(request=request, peers=peers, incomplete=incomplete)
    annotated: list[Annotated] = []
    model_info: dict[str, ModelSummaryDict] = {}
    for machine in g.machines:
        answer = estimator(g, machine)
        model_info[machine.name] = answer.summary(machine)
        by_cnn = answer.points(machine)
        annotated += [annotate(g, machine, cnn, by_cnn[cnn.name]) for cnn in g.cnns]
    return choose(g, annotated, model_info)


def annotate(g: Gathered, machine: Machine, cnn: Cnn, points: list[PointDict]) -> Annotated:
    """Stage 3: the points of every layout asked, their input pipeline, their memory peak and whether they fit,
    and the largest batch size that fits."""
    info = machine.info
    oom = [p["batch_size"] for p in points if p["fits_in_memory"] is False]  # measured: before the model
    weights = float(cnn.work.get("parameters") or 0)
    points = layouts.spread(points, machine_type=machine.name, info=info, request=g.request, parameters=weights,
                            measured=machine.allreduce)  # fmt: skip
    if machine.fed is not None:
        input_pipeline.apply(points, info=info, request=g.request, src=machine.fed)
    memory_model.annotate(points, cnn.work, info, g.request, peaks=cnn.memo.peaks)
    withhold_unfit(points)
    largest = memory_model.max_batch_size(cnn.work, info, g.request, measured_oom=oom, largest=cnn.memo.largest)
    capacity = memory_model.capacity_bytes(info)
    return Annotated(cnn, machine, points, largest, capacity / GIB if capacity else None)


def choose(g: Gathered, annotated: list[Annotated], model_info: dict[str, ModelSummaryDict]) -> ResultDict:
    """Stage 4: the best choices and priced schedules, and the result document with its notes."""
    request = g.request
    predictions: list[PointDict] = []
    best: list[BestDict] = []
    priced: list[PricedScheduleDict] = []
    for a in annotated:
        predictions.extend(a.points)
        basis = memory_model.usable_fraction(a.machine.info)[1] if a.machine.info["gpu"] else "the machine's RAM"
        best.append(best_of(a.cnn.name, a.machine.name, a.points, a.max_batch_size, a.capacity_gib, basis))
        if (schedule := schedules.priced(a.cnn.name, a.machine.name, a.points, request)) is not None:
            priced.append(schedule)
    out: ResultDict = {
        "training": g.training.model_dump(),
        "predictions": predictions,
        "best": best,
        "decisions": decisions.decide([(a.cnn.name, a.points, a.capacity_gib) for a in annotated], request),
        "models": model_info,
        "energy_note": ENERGY_NOTE,
        "gpu_note": GPU_NOTE,
    }
    pipeline = {
        m.name: input_pipeline.summary(m.fed, m.info, request.input)
        for m in g.machines
        if m.fed is not None and request.input is not None
    }
    if pipeline:
        out["inputs"], out["input_note"] = pipeline, input_pipeline.NOTE
    if priced:
        out["schedules"], out["schedule_note"] = priced, schedules.NOTE
    if any(p.get("spot_cost_usd") is not None for p in predictions):
        out["spot_note"] = SPOT_NOTE
    if any(p["gpus_used"] > 1 or p["nodes"] > 1 for p in predictions):
        out["parallel_note"] = layouts.NOTE
        fewer = layouts.fewer_gpus({m.name: m.info["gpu_count"] or 0 for m in g.machines}, request)
        if fewer:
            out["parallel_note"] += f". {fewer}"  # a machine type's name starts the sentence as it is spelt
    tuned = g.training.channels_last or g.training.cudnn_benchmark
    if tuned and any(m["source"] == "reference" for m in model_info.values()):
        out["settings_note"] = SETTINGS_NOTE
    return out
