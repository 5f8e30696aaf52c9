"""The shapes of a job: its status, the plan, progress and result the worker stores, and the public views."""

import uuid
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, NotRequired, TypedDict, cast

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer

from shared.training import TrainConfig


class JobStatus(StrEnum):
    """A job's life: queued → running → succeeded, failed or canceled (the last three never change)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def terminal(self) -> bool:
        """Whether the job has ended."""
        return self in TERMINAL


TERMINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED})
OPEN = (JobStatus.QUEUED, JobStatus.RUNNING)

# Stored documents are read back as written: unknown keys are kept, so a newer worker's field survives a read.
_Stored = ConfigDict(extra="allow")


class Plan(BaseModel):
    """What planning fixed for a job (worker/planning.py): signatures per CNN, peers, what it waits on."""

    model_config = _Stored
    cnns: dict[str, list[tuple[int, int]]] = Field(description="CNN → [(conv signature id, count), …]")
    ops: dict[str, list[tuple[int, int]]] = Field(default_factory=dict, description="CNN → [(op signature id, count)]")
    optimizers: list[int] = Field(default_factory=list, description="op signature ids that are optimizer steps")
    peers: dict[str, list[str]] | None = Field(default=None, description="machine type → types with its GPU model")
    waits_on: list[str] | None = Field(default=None, description="machine types the job waits for benchmarks on")
    bench_seconds: float = Field(default=0.0, description="benchmark seconds charged to the job's key")

    def peers_of(self, machine_types: list[str]) -> dict[str, list[str]]:
        """Each machine type's GPU peers (itself alone in a plan from before peers)."""
        return self.peers or {m: [m] for m in machine_types}


class Counts(BaseModel):
    """Benchmarks a job needs, has and still waits for."""

    needed: int
    done: int
    pending: int


class MachineProgress(BaseModel):
    """One machine type's counts, and why it waits when it does."""

    model_config = _Stored
    needed: int
    done: int
    pending: int
    ops_needed: int | None = None
    ops_pending: int | None = None
    agent_alive: bool | None = None
    answered_by: Literal["reference"] | None = None
    waiting_for: str | None = Field(default=None, description="set while no agent serves the machine type")
    waiting_since: str | None = Field(default=None, description="ISO time the wait for an agent began")


class Progress(BaseModel):
    """A job's progress (worker/progress.py): layer and op benchmarks in all and per machine type; {} until planned."""

    model_config = _Stored
    layer_benchmarks: Counts | None = None
    op_benchmarks: Counts | None = None
    machines: dict[str, MachineProgress] = Field(default_factory=dict)


Source = Literal["benchmarked", "reference"]


class DdpLosses(BaseModel):
    """A data-parallel step's losses besides the exposed all-reduce, ms (prediction/ddp_losses.py)."""

    bucket_copies: float = Field(description="DDP's copies of the gradients into and out of its buckets")
    contention: float = Field(description="backward slowed by NCCL's kernels holding SMs and memory bandwidth")
    stragglers: float = Field(description="the wait for the slowest replica (decoded input only)")


class DdpLossesDict(TypedDict):
    """DdpLosses as a point carries it."""

    bucket_copies: float
    contention: float
    stragglers: float


class Prediction(BaseModel):
    """One point: a CNN on a machine type at a batch size; times, cost and energy with their P10–P90.

    Times, costs, energies and conv_ms are given to 6 significant digits (prediction/points.py `significant`).
    """

    model_config = _Stored
    cnn: str
    machine: str
    batch_size: int
    source: Source
    fits_in_memory: bool | None = Field(
        description="false: the step does not fit in the GPU's memory, so it has no time or cost (all null)"
    )
    peak_memory_gib: float | None = None
    conv_ms: float | None
    gpus_used: int = Field(description="GPUs of each machine the step runs on (0: a CPU)")
    nodes: int = Field(default=1, description="machines of the type trained on together")
    global_batch_size: int | None = Field(default=None, description="batch_size (per GPU) x GPUs x nodes")
    allreduce_ms: float | None = Field(
        default=None, description="modelled time of one step's gradient all-reduce (0 on one GPU)"
    )
    exposed_allreduce_ms: float | None = Field(
        default=None, description="the part of allreduce_ms that backward does not hide, added to the step"
    )
    scaling_efficiency: float | None = Field(
        default=None, description="a GPU's throughput here over one GPU's alone at the same per-GPU batch"
    )
    ddp_losses_ms: DdpLosses | None = Field(
        default=None,
        description="several GPUs: what the step loses besides the exposed all-reduce, term by term, ms (added to it; "
        "prediction/ddp_losses.py)",
    )
    allreduce_algorithm: str | None = Field(
        default=None,
        description="several GPUs: the all-reduce assumed ('ring' or 'tree', NCCL's pick for the largest gradient "
        "bucket; 'hierarchical'; 'torus_2d XxY')",
    )
    allreduce_source: Literal["measured", "modelled"] | None = Field(
        default=None,
        description="several GPUs: 'measured' where the machine type's agent timed all-reduce over that many GPUs "
        "(its bus bandwidth used within the machine; between machines still modelled), else 'modelled'",
    )
    internode_gbps: float | None = Field(
        default=None,
        description="several machines: the Gbit/s between machines the all-reduce was modelled with (the job's "
        "internode_gbps, else the machine type's catalog figure, else the NICs its owner registered)",
    )
    internode_network: str | None = Field(
        default=None,
        description="several machines: what that network is (the catalog's kind, e.g. EFA or InfiniBand; an own "
        "type's NICs, e.g. '4 x 25 Gbit/s, TCP'; or the job's internode_gbps)",
    )
    layer_environments: list[int]
    measured_on: list[str]
    iteration_seconds: float | None
    iteration_seconds_p10: float | None
    iteration_seconds_p90: float | None
    epoch_seconds: float | None
    epoch_seconds_p10: float | None
    epoch_seconds_p90: float | None
    total_seconds: float | None
    total_seconds_p10: float | None
    total_seconds_p90: float | None
    cost_usd: float | None
    cost_usd_p10: float | None
    cost_usd_p90: float | None
    cost_per_gpu_usd: float | None
    spot_cost_usd: float | None = Field(
        default=None,
        description="the same run at the machine type's spot price (where the catalog has one): spot instances can be "
        "interrupted, and the time lost to interruptions is not in it",
    )
    energy_kwh: float | None
    energy_kwh_p10: float | None
    energy_kwh_p90: float | None
    reference_error_pct: float | None = Field(
        default=None,
        description="reference points: the mean error held-out steps of its kind showed (its precision, host- or "
        "device-bound, and whether its GPU's family was measured)",
    )
    launch_bound: bool | None = Field(
        default=None, description="reference points: the host's dispatch of kernels, not the GPU, sets the step"
    )
    input_ms: float | None = Field(default=None, description="a step's input pipeline on the machine's CPUs (input)")
    input_bound: bool | None = Field(default=None, description="the input pipeline, not the GPUs, sets the step")
    input_bound_ratio: float | None = Field(default=None, description="input_ms over the GPU step")
    input_limit: Literal["network", "decode_cpus"] | None = Field(
        default=None, description="what sets input_ms: reading over the network, or decoding on the CPUs"
    )
    dataloader_workers: int | None = Field(default=None, description="DataLoader workers per GPU assumed")
    echo_factor: int | None = Field(default=None, description="input-bound: the data echoing factor that removes it")
    echo_factor_before_augmentation: int | None = Field(
        default=None, description="the same, echoing before augmentation (null: augmentation alone is too slow)"
    )
    echo_speedup: float | None = Field(default=None, description="a step's speed-up at echo_factor")
    echo_total_seconds: float | None = Field(
        default=None, description="total time at echo_factor if echoed examples are as useful as fresh ones"
    )


class PointDict(TypedDict, total=False):
    """A point as the worker builds it (prediction/points.py): the plain dict a stored `Prediction` is.

    A job can have 63,488 of them, so they stay dicts (no model per point); check_result samples them.
    total=False: reference_error_pct, launch_bound, peak_memory_gib and the input figures are set by some stages only.
    """

    cnn: str
    machine: str
    batch_size: int
    source: str
    fits_in_memory: bool | None
    peak_memory_gib: float | None
    conv_ms: float | None
    gpus_used: int
    nodes: int
    global_batch_size: int | None
    allreduce_ms: float | None
    exposed_allreduce_ms: float | None
    scaling_efficiency: float | None
    allreduce_source: str | None
    allreduce_algorithm: NotRequired[str | None]
    ddp_losses_ms: NotRequired[DdpLossesDict]
    internode_gbps: float | None
    internode_network: NotRequired[str | None]
    layer_environments: list[int]
    measured_on: list[str]
    iteration_seconds: float | None
    iteration_seconds_p10: float | None
    iteration_seconds_p90: float | None
    epoch_seconds: float | None
    epoch_seconds_p10: float | None
    epoch_seconds_p90: float | None
    total_seconds: float | None
    total_seconds_p10: float | None
    total_seconds_p90: float | None
    cost_usd: float | None
    cost_usd_p10: float | None
    cost_usd_p90: float | None
    cost_per_gpu_usd: float | None
    spot_cost_usd: NotRequired[float | None]
    energy_kwh: float | None
    energy_kwh_p10: float | None
    energy_kwh_p90: float | None
    reference_error_pct: float | None
    launch_bound: bool | None
    input_ms: float | None
    input_bound: bool | None
    input_bound_ratio: float | None
    input_limit: NotRequired[str | None]
    dataloader_workers: int | None
    echo_factor: int | None
    echo_factor_before_augmentation: int | None
    echo_speedup: float | None
    echo_total_seconds: float | None


class Choice(BaseModel):
    """The batch size a best choice picks."""

    model_config = _Stored
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

    model_config = _Stored
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

    model_config = _Stored
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

    model_config = _Stored
    cnn: str
    question: Literal["fastest", "cheapest", "cheapest_within_deadline", "fastest_within_budget"]
    winner: Option | None = Field(description="null: no option answers (nothing fits, or none is within the bound)")
    reasons: list[str] = Field(description="in words: the layout, memory headroom, input-bound, a tie, or why none")
    runners_up: list[Option]


class PricedPhase(BaseModel):
    """One phase of a schedule and what it costs (None where its point has no time or does not fit)."""

    model_config = _Stored
    epochs: int
    batch_size: int
    gpus: int
    nodes: int
    epoch_seconds: float | None
    seconds: float | None
    cost_usd: float | None


class ConstantChoice(BaseModel):
    """The fastest constant batch size (and GPU and node count) over the schedule's epochs."""

    model_config = _Stored
    batch_size: int
    gpus: int
    nodes: int
    total_seconds: float
    cost_usd: float


class PricedSchedule(BaseModel):
    """A batch-size schedule on one CNN and machine type: its phases summed, beside the best constant batch size."""

    model_config = _Stored
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

    model_config = _Stored
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

    model_config = _Stored
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

    model_config = _Stored
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


# Times as today's clients read them: ISO 8601 with the UTC offset (+00:00).
Timestamp = Annotated[datetime, PlainSerializer(lambda d: d.isoformat(), return_type=str)]


class JobSummary(BaseModel):
    """A job without its request and result: what submitting answers."""

    id: uuid.UUID
    status: JobStatus
    progress: Progress | None = None
    created_at: Timestamp
    started_at: Timestamp | None = None
    finished_at: Timestamp | None = None


class JobListed(JobSummary):
    """A job in a list: its request too."""

    request: dict[str, Any] = Field(description="the request as submitted (POST /v1/jobs's body, normalised)")


class PredictionsPage(BaseModel):
    """Which slice of result.predictions a paged response holds."""

    offset: int
    limit: int
    total: int


class Job(JobListed):
    """A job with its result (succeeded) or error (failed)."""

    result: Result | None = None
    error: str | None = None
    predictions_page: PredictionsPage | None = Field(
        default=None, description="set when predictions_offset or predictions_limit asked for one page of them"
    )


class JobList(BaseModel):
    """A page of jobs, newest first."""

    jobs: list[JobListed]
    next_cursor: str | None = None
