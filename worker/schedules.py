"""Batch-size schedules: a job's phases priced from its own points, beside the best constant batch size."""

from typing import cast

from shared.jobs.point import PointDict
from shared.jobs.request import JobRequest
from shared.jobs.result import ConstantChoiceDict, PricedPhaseDict, PricedScheduleDict

NOTE = (
    "a schedule's phases are priced from the job's points (each phase: its epochs x the point's epoch time and "
    "cost); the best constant batch size is priced over the same epochs. Whether the schedule reaches the accuracy "
    "of the constant batch in as many epochs is not predicted"
)


def _usable(point: PointDict | None) -> bool:
    return point is not None and point["epoch_seconds"] is not None and point["fits_in_memory"] is not False


def _priced(point: PointDict) -> tuple[float, float]:
    """A usable point's epoch time and cost."""
    return cast(float, point["epoch_seconds"]), cast(float, point["cost_usd"])


def priced(cnn: str, machine_type: str, points: list[PointDict], request: JobRequest) -> PricedScheduleDict | None:
    """The schedule of the request on one CNN and machine type, or None when the request has none."""
    if not request.schedule or not points:
        return None
    epochs = sum(phase.epochs for phase in request.schedule)
    index = {(p["batch_size"], p["gpus_used"], p["nodes"]): p for p in points}
    most_gpus, most_nodes = max(p["gpus_used"] for p in points), max(request.node_counts())
    phases: list[PricedPhaseDict] = []
    missing: list[str] = []
    for i, phase in enumerate(request.schedule):
        gpus, nodes = phase.gpus or most_gpus, phase.nodes or most_nodes
        point = index.get((phase.batch_size, gpus, nodes))
        row: PricedPhaseDict = {"epochs": phase.epochs, "batch_size": phase.batch_size, "gpus": gpus, "nodes": nodes,
                               "epoch_seconds": None, "seconds": None, "cost_usd": None}  # fmt: skip
        if point is not None and _usable(point):
            epoch, cost_usd = _priced(point)
            row["epoch_seconds"] = epoch
            row["seconds"] = epoch * phase.epochs
            row["cost_usd"] = cost_usd / request.epochs * phase.epochs
        else:
            fits = point is not None and point["fits_in_memory"] is False
            missing.append(f"phase {i + 1} (batch {phase.batch_size}) {'does not fit' if fits else 'has no time'}")
        phases.append(row)
    usable = [p for p in points if _usable(p)]
    best = min(usable, key=lambda p: (p["epoch_seconds"], p["batch_size"])) if usable else None
    constant: ConstantChoiceDict | None = None
    if best is not None:
        epoch, cost_usd = _priced(best)
        constant = {"batch_size": best["batch_size"], "gpus": best["gpus_used"], "nodes": best["nodes"],
                    "total_seconds": epoch * epochs, "cost_usd": cost_usd / request.epochs * epochs}  # fmt: skip
    total = None if missing else sum(r["seconds"] or 0.0 for r in phases)  # without missing, every phase is priced
    cost = None if missing else sum(r["cost_usd"] or 0.0 for r in phases)
    return {
        "cnn": cnn,
        "machine": machine_type,
        "epochs": epochs,
        "phases": phases,
        "total_seconds": total,
        "cost_usd": cost,
        "missing": "; ".join(missing) or None,
        "best_constant": constant,
        "time_vs_best_constant": total / constant["total_seconds"] if total is not None and constant else None,
    }
