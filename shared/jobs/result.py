"""A succeeded job's answer: its points, best choices, decisions, priced schedules and notes, and the check."""

from collections.abc import Mapping
from typing import Any, Literal, TypedDict, cast

from pydantic import BaseModel, Field

from shared.jobs.point import STORED, PointDict, Prediction, Source
from shared.training import TrainConfig


class Choice(BaseModel):
    """The batch size a best choice picks."""

    model_config = STORED
    batch_size: int
    gpus: int = 1
    nodes: int = 1
    total_seconds: float
    cost_usd: float
    source: Source
    memory_headroom_pct: float | None = Field(
        default=None,
        description="the share of one GPU's memory (a CPU: RAM) left free at this batch; a choice keeps at least 10% "
        "where some batch size does (the memory model errs by a few per cent)",
    )


class Best(BaseModel):
    """A CNN on a machine type: the fastest and the cheapest usable batch size, and the largest that fits."""

    model_config = STORED
    cnn: str
    machine: str
    max_batch_size: int | None
    memory_gib: float | None = Field(
        default=None,
        description="the memory a point is checked against: what one GPU gives PyTorch (a CPU: the machine's RAM)",
    )
    memory_basis: str | None = Field(default=None, description="why memory_gib is what it is (e.g. ECC's share)")
    min_time: Choice | None
    min_cost: Choice | None


class Option(BaseModel):
    """One way to train: a machine type, its GPUs and machines, the batch size per GPU, its time and cost with bands."""

    model_config = STORED
    machine: str
    gpus: int
    nodes: int
    batch_size: int = Field(description="per GPU")
    global_batch_size: int | None = None
    allreduce_algorithm: str | None = None
    source: Source
    total_seconds: float
    total_seconds_p10: float | None = None
    total_seconds_p90: float | None = None
    cost_usd: float
    cost_usd_p10: float | None = None
    cost_usd_p90: float | None = None
    spot_cost_usd: float | None = None
    memory_headroom_pct: float | None = None
    input_bound: bool | None = None
    input_limit: str | None = None


class Decision(BaseModel):
    """One question answered for a CNN across every machine type and layout asked: the winner, why, and the options
    whose P10-P90 band on the question's figure overlaps the winner's (a tie within the model's error)."""

    model_config = STORED
    cnn: str
    question: Literal["fastest", "cheapest", "cheapest_within_deadline", "fastest_within_budget"]
    winner: Option | None = Field(description="null: no option answers (nothing fits, or none is within the bound)")
    reasons: list[str] = Field(description="in words: the layout, memory headroom, input-bound, a tie, or why none")
    runners_up: list[Option]


class PricedPhase(BaseModel):
    """One phase of a schedule and what it costs (None where its point has no time or does not fit)."""

    model_config = STORED
    epochs: int
    batch_size: int
    gpus: int
    nodes: int
    epoch_seconds: float | None
    seconds: float | None
    cost_usd: float | None


class ConstantChoice(BaseModel):
    """The fastest constant batch size (and GPU and node count) over the schedule's epochs."""

    model_config = STORED
    batch_size: int
    gpus: int
    nodes: int
    total_seconds: float
    cost_usd: float


class PricedSchedule(BaseModel):
    """A batch-size schedule on one CNN and machine type: its phases summed, beside the best constant batch size."""

    model_config = STORED
    cnn: str
    machine: str
    epochs: int
    phases: list[PricedPhase]
    total_seconds: float | None
    cost_usd: float | None
    missing: str | None = Field(description="why the schedule has no total (a phase without a time, or that won't fit)")
    best_constant: ConstantChoice | None
    time_vs_best_constant: float | None = Field(description="the schedule's time over the best constant one's")


class ModelSummary(BaseModel):
    """How a machine type was answered: its own model (`ok`), none yet (`no_model`) or the reference."""

    model_config = STORED
    status: Literal["ok", "no_model", "reference"]
    source: Source
    training: str = Field(description="the training configuration's cost key")
    kind: str | None = None
    version: int | str | None = None
    detail: str | None = None
    loco_mape: float | None = None
    interval_coverage: float | None = None
    pooled_from: list[str] | None = None
    measured_on: str | None = Field(default=None, description="the peer machine type the model was fitted on")
    whole_step_mape: float | None = None
    evaluated_on: Any = None


class InputSummary(BaseModel):
    """Where a machine type's input-pipeline rate comes from."""

    model_config = STORED
    source: Literal["measured", "reference", "none"]
    detail: str
    images_per_s_per_cpu: float | None
    vcpus: int | None
    environment_id: int | None
    pipeline: str
    input: str
    cpu: str | None = Field(default=None, description="the machine type's host CPU: model, threads per core, clock")
    cpu_source: str | None = Field(default=None, description="where the CPU figures come from")


class Result(BaseModel):
    """A succeeded job's answer (worker/assemble.py)."""

    model_config = STORED
    training: TrainConfig
    predictions: list[Prediction]
    best: list[Best]
    decisions: list[Decision] | None = None  # results stored before decisions were made have none
    models: dict[str, ModelSummary]
    energy_note: str
    gpu_note: str
    parallel_note: str | None = None
    schedules: list[PricedSchedule] | None = None
    schedule_note: str | None = None
    inputs: dict[str, InputSummary] | None = None
    input_note: str | None = None
    spot_note: str | None = None
    channels_last_note: str | None = None  # results stored before settings_note
    settings_note: str | None = None


class ChoiceDict(TypedDict):
    """A best choice as prediction/points.py builds it: the plain dict a stored `Choice` is."""

    batch_size: int
    gpus: int
    nodes: int
    total_seconds: float
    cost_usd: float
    source: str
    memory_headroom_pct: float | None


class BestDict(TypedDict):
    """A CNN's best choices on a machine type as prediction/points.py builds them: the plain dict a `Best` is."""

    cnn: str
    machine: str
    max_batch_size: int | None
    memory_gib: float | None
    memory_basis: str | None
    min_time: ChoiceDict | None
    min_cost: ChoiceDict | None


class ModelSummaryDict(TypedDict, total=False):
    """How a machine type was answered, as worker/estimate.py says it: the plain dict a `ModelSummary` is."""

    status: str
    source: str
    training: str
    kind: str | None
    version: int | str | None
    detail: str | None
    loco_mape: float | None
    interval_coverage: float | None
    pooled_from: list[str] | None
    measured_on: str | None
    whole_step_mape: float | None
    evaluated_on: Any


class OptionDict(TypedDict):
    """One way to train as worker/decisions.py builds it: the plain dict an `Option` is."""

    machine: str
    gpus: int
    nodes: int
    batch_size: int
    global_batch_size: int | None
    allreduce_algorithm: str | None
    source: str
    total_seconds: float
    total_seconds_p10: float | None
    total_seconds_p90: float | None
    cost_usd: float
    cost_usd_p10: float | None
    cost_usd_p90: float | None
    spot_cost_usd: float | None
    memory_headroom_pct: float | None
    input_bound: bool | None
    input_limit: str | None


class DecisionDict(TypedDict):
    """A question answered for a CNN as worker/decisions.py builds it: the plain dict a `Decision` is."""

    cnn: str
    question: str
    winner: OptionDict | None
    reasons: list[str]
    runners_up: list[OptionDict]


class PricedPhaseDict(TypedDict):
    """A schedule's phase as worker/schedules.py prices it: the plain dict a `PricedPhase` is."""

    epochs: int
    batch_size: int
    gpus: int
    nodes: int
    epoch_seconds: float | None
    seconds: float | None
    cost_usd: float | None


class ConstantChoiceDict(TypedDict):
    """The best constant batch size beside a schedule: the plain dict a `ConstantChoice` is."""

    batch_size: int
    gpus: int
    nodes: int
    total_seconds: float
    cost_usd: float


class PricedScheduleDict(TypedDict):
    """A priced schedule as worker/schedules.py builds it: the plain dict a `PricedSchedule` is."""

    cnn: str
    machine: str
    epochs: int
    phases: list[PricedPhaseDict]
    total_seconds: float | None
    cost_usd: float | None
    missing: str | None
    best_constant: ConstantChoiceDict | None
    time_vs_best_constant: float | None


class InputSummaryDict(TypedDict):
    """A machine type's input pipeline as prediction/input_pipeline.py says it: the plain dict an `InputSummary` is."""

    source: str
    detail: str
    images_per_s_per_cpu: float | None
    vcpus: int | None
    environment_id: int | None
    pipeline: str
    input: str
    cpu: str | None
    cpu_source: str | None


class ResultDict(TypedDict, total=False):
    """A result document as the worker builds and stores it (worker/assemble.py); `Result` validates it."""

    training: dict[str, Any]
    predictions: list[PointDict]
    best: list[BestDict]
    decisions: list[DecisionDict]
    models: dict[str, ModelSummaryDict]
    energy_note: str
    gpu_note: str
    parallel_note: str
    schedules: list[PricedScheduleDict]
    schedule_note: str
    inputs: dict[str, InputSummaryDict]
    input_note: str
    spot_note: str
    channels_last_note: str
    settings_note: str


def check_result(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The document, once Result accepts it: all but its points, and one point of each distinct set of keys.

    Checking every point would cost more than assembling them (about 2 s for 63,488 points); assemble builds
    them all alike (prediction/points.py `blanks`), so one per key set shows their shape.
    """
    points = doc["predictions"]
    sample = dict(zip(map(tuple, points), points, strict=True))  # the last point of each key set; no Python loop
    Result.model_validate({**doc, "predictions": list(sample.values())})
    return cast(dict[str, Any], doc)  # the worker's ResultDict, stored as the plain dict it is
