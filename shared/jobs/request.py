"""The job request: validated once at the API; the worker loads the stored request without the door's limits."""

import re
from collections.abc import Callable
from contextvars import ContextVar
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, model_validator

from shared.core.settings import get_settings
from shared.training import Optimizer, Precision, TrainConfig, config_of

# A machine type's name is also its benchmark queue's name (`bench.<name>`) and a URL segment.
MACHINE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,62}$"
# The names shared.cnn.registry accepts for a registered CNN (every built-in one fits too).
CNN_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
# Bound of a range's fields, so no huge number reaches arithmetic; max_batch_size is checked after.
_HUGE = 2**31 - 1
# Batch sizes a list may hold before anything else is checked: validation stops at the first one past it, so a body
# of 200,000 bad items costs one error, not 200,000 (MAX_BATCH_SIZES, at most this, is checked after).
MAX_LISTED = 65_536
# Fields a body may have: more is refused as one error before each unknown field becomes an error of its own.
MAX_FIELDS = 64


def few_fields(data: Any) -> Any:
    """A request body refused as one error when it has more than MAX_FIELDS fields."""
    if isinstance(data, dict) and len(data) > MAX_FIELDS:
        raise ValueError(f"{len(data)} fields in the body; a request has at most {MAX_FIELDS}")
    return data


# Prediction points (CNNs x machine types x batch sizes) a job may have. Set for each request at the
# door (api/limits.py; an API key may set its own); unset elsewhere.
points_limit: ContextVar[int | None] = ContextVar("points_limit", default=None)


def _name(what: str, pattern: str, rule: str) -> Callable[[str], str]:
    # fullmatch, not `$`: `$` lets a trailing newline through. No control character reaches PostgreSQL.
    compiled = re.compile(pattern.removeprefix("^").removesuffix("$"))

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(f"{what} name {value[:80]!r} is not valid: {rule}")
        return value

    return check


CnnName = Annotated[
    str,
    AfterValidator(_name("CNN", CNN_NAME, "1-64 letters, digits, '_', '.' or '-', starting with a letter or digit")),
]
MachineName = Annotated[
    str,
    AfterValidator(
        _name(
            "machine type", MACHINE_NAME, "1-63 letters, digits, '.', '_', '+' or '-', starting with a letter or digit"
        )
    ),
]


class BatchRange(BaseModel):
    """Batch sizes min, min+step, … up to max."""

    # strict: `"8"`, `true` or `8.0` is not a batch size (a request is validated once, exactly as written)
    model_config = ConfigDict(extra="forbid", strict=True)

    min: int = Field(ge=1, le=_HUGE)
    max: int = Field(ge=1, le=_HUGE)
    step: int = Field(default=1, ge=1, le=_HUGE)

    @model_validator(mode="after")
    def _ordered(self) -> "BatchRange":
        if self.max < self.min:
            raise ValueError(f"batch size range max ({self.max}) is below min ({self.min})")
        return self

    def sizes(self, *, at_most: int | None = None) -> list[int]:
        """The range's batch sizes; with at_most, no more than at_most + 1 (so a huge range is never materialised)."""
        stop = self.max if at_most is None else min(self.max, self.min + self.step * at_most)
        return list(range(self.min, stop + 1, self.step))

    def holds(self, size: int) -> bool:
        """Whether size is one of the range's batch sizes."""
        return self.min <= size <= self.max and (size - self.min) % self.step == 0

    def count(self) -> int:
        """How many batch sizes the range spans, counted without listing them."""
        return (self.max - self.min) // self.step + 1


MAX_GPUS = 64  # a machine's GPU count is at most this (MachineCreate)
MAX_NODES = 1024
MAX_LAYOUTS = 16  # GPU counts x node counts compared in one job
GpuCount = Annotated[int, Field(ge=1, le=MAX_GPUS)]
NodeCount = Annotated[int, Field(ge=1, le=MAX_NODES)]
GPUS_HELP = (
    "GPUs per machine the batch is spread over (data parallel, as PyTorch DDP); a list compares the counts; "
    "omitted: every GPU of each machine type. batch_sizes are per GPU"
)
NODES_HELP = "machines of the same type trained on together (1: one machine); a list compares the counts"
# Bandwidths a request may give, Gbit/s: from 100 Mbit/s Ethernet, the slowest link anyone trains over, to 10 Tbit/s,
# past every machine's NICs together (8 x 800 Gbit/s InfiniBand XDR is 6.4). A figure outside is a typo or an attack:
# 5e-324 Gbit/s divided by zero, 1e-300 gave a 304-digit cost.
MIN_GBPS, MAX_GBPS = 0.1, 10_000.0
INTERNODE_HELP = (
    "Gbit/s the gradient all-reduce gets between machines, in place of the machine type's catalog figure "
    "(data/interconnect.csv); needs nodes > 1. E.g. 5 for NCCL over one TCP flow on AWS outside a cluster placement "
    "group (EC2's single-flow limit), or a figure for your own machine types, which have none"
)


MAX_PHASES = 20
# What one prediction point weighs in a stored result, KB (JSON with the data-parallel and input fields).
POINT_KB = 1.0


class Phase(BaseModel):
    """One phase of a batch-size schedule: so many epochs at a batch size (and GPU and node count)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    epochs: int = Field(ge=1, le=100_000)
    batch_size: int = Field(
        ge=1, le=_HUGE, description="the global batch (all GPUs of all machines), as schedules are stated; per GPU "
        "with schedule_batch 'per_gpu'. Stored per GPU, added to the job's batch sizes"
    )  # fmt: skip
    global_batch_size: int | None = Field(default=None, ge=1, description="set on storing: the global batch asked")
    gpus: GpuCount | None = Field(default=None, description="one of the job's gpus; omitted: the most it asks")
    nodes: NodeCount | None = Field(default=None, description="one of the job's nodes; omitted: the most it asks")


InputSource = Literal["memory", "local_jpeg", "network_jpeg"]
# ILSVRC2012's training set: 1,281,167 JPEGs in ~138 GiB (image-net.org), ~115 KB each.
IMAGENET_JPEG_KB = 115.0


class InputSpec(BaseModel):
    """How training images reach the GPUs: in memory, JPEGs decoded from local disk, or over a network."""

    model_config = ConfigDict(extra="forbid", strict=True)
    source: InputSource = Field(
        default="memory",
        description="memory: tensors ready (synthetic, pre-decoded), no input cost; local_jpeg: JPEGs decoded and "
        "augmented by DataLoader workers; network_jpeg: the same, read over the network at network_gbps",
    )
    dataloader_workers: int | None = Field(
        default=None, ge=1, le=1024, description="DataLoader workers per GPU; omitted: the machine's vCPUs split evenly"
    )
    network_gbps: float | None = Field(
        default=None, ge=MIN_GBPS, le=MAX_GBPS, description="network_jpeg: read bandwidth, Gbit/s (0.1-10,000)"
    )
    jpeg_kb: float = Field(
        default=IMAGENET_JPEG_KB, ge=1, le=100_000, description="mean size of a JPEG in KB (ImageNet's); 1-100,000"
    )

    @model_validator(mode="after")
    def _coherent(self) -> "InputSpec":
        if self.source == "network_jpeg" and self.network_gbps is None:
            raise ValueError("input source network_jpeg needs network_gbps, the bandwidth images are read at")
        if self.source != "network_jpeg" and self.network_gbps is not None:
            raise ValueError(f"network_gbps is only for input source network_jpeg, not {self.source}")
        if self.source == "memory" and self.dataloader_workers is not None:
            raise ValueError("dataloader_workers needs an input source that decodes JPEGs (local_jpeg, network_jpeg)")
        return self

    @property
    def decodes(self) -> bool:
        """Whether images are decoded and augmented on the CPUs (not ready in memory)."""
        return self.source != "memory"


class JobRequest(BaseModel):
    """What a user asks: predict these CNNs on these machines over these batch sizes."""

    # strict: no coercion of `true` to 1, `"8"` to 8 or `"yes"` to true
    model_config = ConfigDict(extra="forbid", strict=True)

    cnns: list[CnnName] = Field(min_length=1, max_length=100)
    machines: list[MachineName] = Field(min_length=1, max_length=100)
    batch_sizes: Annotated[list[int], Field(max_length=MAX_LISTED)] | BatchRange
    epochs: int = Field(default=90, ge=1, le=100_000)
    # Bounded so steps x epochs stays a finite float in assembly (a trillion samples is far past any dataset).
    dataset_size: int = Field(default=1_281_167, ge=1, le=10**12)
    image_size: int = Field(default=224, ge=8, le=2048)
    num_classes: int | None = Field(default=None, ge=1, le=1_000_000)
    optimizer: Optimizer = "sgd"
    # SGD only (PyTorch's default 0); adam and adamw with a non-zero momentum are refused.
    momentum: float = Field(default=0.0, ge=0, lt=1)
    # None: PyTorch's default for the optimizer (0 for sgd and adam, 0.01 for adamw), filled in at the door.
    weight_decay: float | None = Field(default=None, ge=0, le=1)
    # fp32: PyTorch's defaults (TF32 for convs on Ampere+); tf32: matmuls too; amp_*: torch.autocast (+GradScaler).
    precision: Precision = "fp32"
    channels_last: bool = False
    # torch.backends.cudnn.benchmark as the training script sets it (off: PyTorch's default).
    cudnn_benchmark: bool = False
    # False: a GPU machine type with no benchmarks of its own is answered at once by the reference
    # predictor (its layer benchmarks are still queued where an agent or the fleet can measure them).
    wait_for_benchmarks: bool = False
    # Data parallelism: batch_sizes are per GPU; each step runs on `gpus` GPUs of each of `nodes` machines
    # of the same type. None: every GPU of each machine type. A list compares the counts (points for each).
    # Lists of at most MAX_LAYOUTS counts: a longer one is refused at its length, before its items are read.
    gpus: GpuCount | Annotated[list[GpuCount], Field(max_length=MAX_LAYOUTS)] | None = Field(
        default=None, description=GPUS_HELP
    )
    nodes: NodeCount | Annotated[list[NodeCount], Field(max_length=MAX_LAYOUTS)] = Field(
        default=1, description=NODES_HELP
    )
    internode_gbps: float | None = Field(default=None, ge=MIN_GBPS, le=MAX_GBPS, description=INTERNODE_HELP)
    allreduce: Literal["nccl", "hierarchical", "torus_2d"] = Field(
        default="nccl",
        description="the gradient all-reduce: NCCL's own choice of ring or tree; hierarchical (within each machine, "
        "then across machines, then within); or torus_2d (an X x Y grid, Mikami et al. 2018)",
    )
    torus_x: int | None = Field(
        default=None, ge=1, le=1_000_000,
        description="torus_2d: GPUs along X, whole machines' GPUs dividing the layout (default: one machine's GPUs)",
    )  # fmt: skip
    # Batch-size control: phases run one after another; their time and cost are summed and shown beside
    # the best constant batch size over the same epochs.
    schedule: list[Phase] | None = Field(default=None, min_length=1, max_length=MAX_PHASES)
    # How the schedule's batch sizes are stated: global (people's way: "5x256, then 85x1024 on 8 GPUs"), or per GPU.
    # A global one is stored per GPU, with its global size beside it, and this set to per_gpu.
    schedule_batch: Literal["global", "per_gpu"] = "global"
    # The input pipeline: None, as before, is images ready in memory.
    input: InputSpec | None = None
    # Questions the answer decides besides the fastest and the cheapest (worker/decisions.py).
    deadline_hours: float | None = Field(
        default=None, gt=0, le=1e6, description="decide also the cheapest option that finishes within this many hours"
    )
    budget_usd: float | None = Field(
        default=None, gt=0, le=1e12, description="decide also the fastest option that costs at most this many dollars"
    )
    # The batch sizes, sorted without repeats: worked out once, when the request is validated or loaded.
    _sizes: list[int] = PrivateAttr(default_factory=list)

    _bounded = model_validator(mode="before")(few_fields)

    @classmethod
    def stored(cls, data: dict[str, Any]) -> "JobRequest":
        """A request the API stored, loaded without the door's live limits (batch sizes, points per job).

        It was validated once, at the door: a limit lowered since must not fail a job already accepted.
        """
        if data.get("schedule") and "schedule_batch" not in data:
            data = {**data, "schedule_batch": "per_gpu"}  # stored before schedules were stated in global batches
        return cls.model_validate(data, context={_STORED: True})

    @model_validator(mode="after")
    def _training_config(self) -> "JobRequest":
        self.weight_decay = self.training().weight_decay  # raises for momentum with adam/adamw
        return self

    def training(self) -> TrainConfig:
        """The optimizer, precision and layout the CNN is trained with."""
        return config_of(
            optimizer=self.optimizer, precision=self.precision, momentum=self.momentum,
            weight_decay=self.weight_decay, channels_last=self.channels_last, cudnn_benchmark=self.cudnn_benchmark,
        )  # fmt: skip

    @property
    def layer_precision(self) -> str:
        """The precision key of the conv layer benchmarks this request needs (fp32, fp16, bf16)."""
        return self.training().layer_precision

    @model_validator(mode="after")
    def _batch_sizes_in_bounds(self, info: ValidationInfo) -> "JobRequest":
        if info.context and info.context.get(_STORED):
            self._sizes = self._with_phases(_sorted_sizes(self.batch_sizes, at_most=None))
            return self
        settings = get_settings()
        self._global_phases()
        # Capped before materialising, so a huge range cannot exhaust memory (it is refused just below).
        sizes = self._sizes = self._with_phases(_sorted_sizes(self.batch_sizes, at_most=settings.max_batch_sizes))
        if not sizes:
            raise ValueError("batch_sizes is empty")
        if len(sizes) > settings.max_batch_sizes:
            raise ValueError(f"{self._asked()} batch sizes requested; at most {settings.max_batch_sizes} are allowed")
        bad = [b for b in sizes if b < 1 or b > settings.max_batch_size]
        if bad:
            shown = [b if abs(b) <= _HUGE else "…" for b in bad[:5]]  # a 400-digit number helps nobody
            raise ValueError(f"batch sizes must be between 1 and {settings.max_batch_size}; got {shown}")
        if isinstance(self.batch_sizes, list):
            self.batch_sizes = sizes  # stored merged: [16, 8, 8] and [8, 16] are one request
        self.cnns = list(dict.fromkeys(self.cnns))
        self.machines = list(dict.fromkeys(self.machines))
        if isinstance(self.gpus, list):
            self.gpus = sorted(set(self.gpus))
            if not self.gpus:
                raise ValueError("gpus is an empty list; omit it for every GPU of each machine type")
        if isinstance(self.nodes, list):
            self.nodes = sorted(set(self.nodes))
            if not self.nodes:
                raise ValueError("nodes is an empty list; omit it for one machine")
        if self.torus_x is not None and self.allreduce != "torus_2d":
            raise ValueError("torus_x is the 2D-torus grid's X: it needs allreduce 'torus_2d'")
        if self.internode_gbps is not None and max(self.node_counts()) == 1:
            raise ValueError("internode_gbps is the bandwidth between machines: it needs nodes > 1")
        layouts = self.layout_count()
        if layouts > MAX_LAYOUTS:
            raise ValueError(f"{layouts} GPU and node count pairs requested; at most {MAX_LAYOUTS} are compared")
        self._check_phases()
        limit = points_limit.get()
        points = self.points()
        if limit is not None and points > limit:
            raise ValueError(
                f"{points} prediction points requested ({len(self.cnns)} CNNs x {len(self.machines)} machine types"
                f" x {len(sizes)} batch sizes{f' x {layouts} GPU and node counts' if layouts > 1 else ''}, a result"
                f" of about {points * POINT_KB / 1024:,.0f} MB); at most {limit} are allowed per job: ask for fewer"
                " batch sizes (a range with a step) or split the job"
            )
        return self

    def _global_phases(self) -> None:
        """Phases stated in global batches made per GPU (their GPU and node counts fixed), epochs made to agree."""
        if not self.schedule:
            return
        total = sum(phase.epochs for phase in self.schedule)
        if "epochs" in self.model_fields_set and total != self.epochs:
            raise ValueError(
                f"the schedule's phases take {total} epochs but epochs is {self.epochs}: make them agree, or omit "
                "epochs (the schedule's are used)"
            )
        self.epochs = total
        if self.schedule_batch != "global":
            return
        job_gpus = max(self.gpus) if isinstance(self.gpus, list) else self.gpus
        for i, phase in enumerate(self.schedule):
            gpus, nodes = phase.gpus or job_gpus, phase.nodes or max(self.node_counts())
            if gpus is None:
                raise ValueError(
                    f"schedule[{i}]: a global batch of {phase.batch_size} needs a GPU count to split over: give gpus "
                    "(the job's or the phase's), or state per-GPU batches with schedule_batch 'per_gpu'"
                )
            if phase.batch_size % (gpus * nodes):
                raise ValueError(
                    f"schedule[{i}]: a global batch of {phase.batch_size} does not split evenly over {gpus} GPUs x "
                    f"{nodes} machines"
                )
            phase.global_batch_size = phase.batch_size
            phase.batch_size, phase.gpus, phase.nodes = phase.batch_size // (gpus * nodes), gpus, nodes
        self.schedule_batch = "per_gpu"

    def _asked(self) -> int:
        """How many batch sizes the request spans, a range's counted whole (the list checked was cut short)."""
        if not isinstance(self.batch_sizes, BatchRange):
            return len(self._sizes)
        extra = {phase.batch_size for phase in self.schedule or []}
        return self.batch_sizes.count() + sum(1 for b in extra if not self.batch_sizes.holds(b))

    def _with_phases(self, sizes: list[int]) -> list[int]:
        """The batch sizes with every phase's (a schedule is priced from the job's own points)."""
        if not self.schedule:
            return sizes
        return sorted(set(sizes) | {phase.batch_size for phase in self.schedule})

    def _check_phases(self) -> None:
        """A phase's GPU and node counts must be among the job's (they are answered from its points)."""
        for i, phase in enumerate(self.schedule or []):
            if phase.gpus is not None:
                if self.gpus is None:
                    raise ValueError(f"schedule[{i}] names gpus {phase.gpus}: give the job's gpus to name them here")
                if phase.gpus not in self.gpu_counts(0):
                    raise ValueError(f"schedule[{i}]: gpus {phase.gpus} is not among the job's gpus {self.gpus}")
            if phase.nodes is not None and phase.nodes not in self.node_counts():
                raise ValueError(f"schedule[{i}]: nodes {phase.nodes} is not among the job's nodes {self.nodes}")

    def points(self) -> int:
        """Prediction points of the job: CNNs x machine types x batch sizes x GPU counts x node counts."""
        return len(self.cnns) * len(self.machines) * len(self.batch_size_list()) * self.layout_count()

    def layout_count(self) -> int:
        """GPU and node count pairs asked of each machine type (omitted gpus: one, its own count)."""
        return len(self.gpus if isinstance(self.gpus, list) else [0]) * len(self.node_counts())

    def gpu_counts(self, machine_gpus: int) -> list[int]:
        """The GPU counts a machine type with `machine_gpus` GPUs is answered for (a CPU counts as one device)."""
        if self.gpus is None:
            return [max(1, machine_gpus)]
        return self.gpus if isinstance(self.gpus, list) else [self.gpus]

    def gpu_counts_on(self, machine_gpus: int) -> list[int]:
        """The GPU counts asked that a machine type with `machine_gpus` GPUs holds: a job comparing types of 1 and 8
        GPUs at gpus 1 and 8 answers each with what it has (all asked where none fits: the API refuses such a job)."""
        asked = self.gpu_counts(machine_gpus)
        return [g for g in asked if g <= max(1, machine_gpus)] or asked

    def spreads(self, machine_gpus: int) -> bool:
        """Whether the job trains on several GPUs of each machine of a type with `machine_gpus` GPUs."""
        return max(self.gpu_counts(machine_gpus)) > 1

    @property
    def decodes_input(self) -> bool:
        """Whether the job's images are decoded and augmented on the CPUs (an input pipeline to model)."""
        return self.input is not None and self.input.decodes

    def node_counts(self) -> list[int]:
        """The node counts asked for."""
        return self.nodes if isinstance(self.nodes, list) else [self.nodes]

    def batch_size_list(self) -> list[int]:
        """The batch sizes as a sorted list without repeats (worked out once, at validation)."""
        return self._sizes


_STORED = "stored"


def _sorted_sizes(batch_sizes: list[int] | BatchRange, *, at_most: int | None) -> list[int]:
    if isinstance(batch_sizes, BatchRange):
        return batch_sizes.sizes(at_most=None if at_most is None else at_most + 1)
    return sorted(set(batch_sizes))
