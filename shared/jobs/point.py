"""A point's shape: one CNN on one machine type at one batch size, as the API shows it and as the worker builds it."""

from typing import Literal, NotRequired, TypedDict

from pydantic import BaseModel, ConfigDict, Field

# Stored documents are read back as written: unknown keys are kept, so a newer worker's field survives a read.
STORED = ConfigDict(extra="allow")

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

    model_config = STORED
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
