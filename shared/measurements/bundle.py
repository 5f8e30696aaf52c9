"""Measurement bundles: machine types' measured rows with their environments, carried between installations.

A bundle is one gzip file of JSON lines (docs/BUNDLES.md): a header, the environments and signatures the rows name
(by hash, the key every installation stores them under), the rows, and an end line that counts them. Reading one
runs nothing from it (no pickle, no code): every line is validated against its model, every hash recomputed from
what it names, every reference resolved and every row's key checked for duplicates before one row is stored; the
rows are then stored in one transaction, each once, so a bad bundle changes nothing and importing twice adds nothing.
"""

import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

from shared.cnn.op_signatures import OpSignature
from shared.cnn.signatures import ConvSignature
from shared.measurements import allreduce, environments, inputs, layers, ops, steps

FORMAT = "traincast-measurements"
VERSION = 1
# Bounds on what one bundle may hold: far above a full calibration's ~100,000 rows and few MB, far below harm.
MAX_COMPRESSED_BYTES = 256 * 2**20
MAX_BYTES = 2 * 2**30
MAX_LINE_BYTES = 256 * 2**10
MAX_ROWS = 2_000_000
MAX_DEPTH = 8

Hash = Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f]+$")]
Word = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_+/.:-]+$")]
Ms = Annotated[float, Field(ge=0, le=1e9)]
Batch = Annotated[int, Field(ge=0, le=1_000_000)]


def _finite(value: Any, depth: int = 0) -> Any:
    """A JSON value with no NaN or infinity and no deeper than MAX_DEPTH (PostgreSQL's jsonb takes neither)."""
    if depth > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("NaN or infinity is not a measurement")
    if isinstance(value, dict):
        for v in value.values():
            _finite(v, depth + 1)
    if isinstance(value, list):
        for v in value:
            _finite(v, depth + 1)
    return value


class Line(BaseModel):
    """What every line shares: no field it does not declare, no NaN or infinity."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    @field_validator("*", mode="after")
    @classmethod
    def _json_values(cls, value: Any) -> Any:
        return _finite(value) if isinstance(value, dict | list) else value


class MachineRecord(Line):
    """A machine type as the exporting installation described it (what to register here under its name)."""

    name: Name
    figures: dict[str, Any]


class Header(Line):
    """The first line: what the file is and where it came from."""

    kind: Literal["header"]
    format: Literal["traincast-measurements"]
    version: int
    exported_at: datetime
    source: Annotated[str, Field(max_length=200)]
    machine_types: Annotated[list[MachineRecord], Field(max_length=1000)]


class Environment(Line):
    """The software, driver and device a timing ran in, under the hash of its details."""

    kind: Literal["environment"]
    hash: Hash
    details: dict[str, Any]

    @model_validator(mode="after")
    def _hash_matches(self) -> "Environment":
        if environments.digest(self.details) != self.hash:
            raise ValueError(f"environment {self.hash}: the hash is not that of its details")
        return self


class ConvSignatureLine(Line):
    """A conv layer configuration, under the hash of its spec."""

    kind: Literal["conv_signature"]
    hash: Hash
    spec: dict[str, Any]

    def signature(self) -> ConvSignature:
        """The signature the spec describes (checked against the hash)."""
        try:
            sig = ConvSignature.from_json(self.spec)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"conv signature {self.hash}: not a conv layer spec ({exc})") from None
        if sig.hash != self.hash or sig.to_json() != self.spec:
            raise ValueError(f"conv signature {self.hash}: the hash is not that of its spec")
        return sig


class OpSignatureLine(Line):
    """An op (or optimizer step) configuration, under the hash of its spec."""

    kind: Literal["op_signature"]
    hash: Hash
    op: Word
    spec: dict[str, Any]

    def signature(self) -> OpSignature:
        """The signature the spec describes (checked against the hash)."""
        try:
            sig = OpSignature.from_json(self.spec)
        except (TypeError, ValueError, KeyError) as exc:
            raise ValueError(f"op signature {self.hash}: not an op spec ({exc})") from None
        if sig.hash != self.hash or sig.op != self.op:
            raise ValueError(f"op signature {self.hash}: the hash is not that of its spec")
        return sig


class Row(Line):
    """What every measured row carries: where, in which environment, when, and the agent's statistics."""

    machine_type: Name
    environment: Hash
    stats: dict[str, Any] = Field(default_factory=dict)
    measured_at: datetime


class LayerRow(Row):
    """A conv layer's three phases at one batch size (none when it ran out of memory)."""

    kind: Literal["layer"]
    signature: Hash
    batch_size: Annotated[int, Field(ge=1, le=1_000_000)]
    precision: Word
    channels_last: bool
    oom: bool
    forward_ms: Ms | None
    backward_data_ms: Ms | None
    backward_weight_ms: Ms | None

    @model_validator(mode="after")
    def _timed(self) -> "LayerRow":
        if not self.oom and None in (self.forward_ms, self.backward_data_ms, self.backward_weight_ms):
            raise ValueError("a layer row that ran needs forward_ms, backward_data_ms and backward_weight_ms")
        return self


class OpRow(Row):
    """An op's forward and backward at one batch size, or the optimizer step (batch size 0)."""

    kind: Literal["op"]
    signature: Hash
    batch_size: Batch
    variant: Word
    oom: bool
    forward_ms: Ms | None
    backward_ms: Ms | None

    @model_validator(mode="after")
    def _timed(self) -> "OpRow":
        if (self.forward_ms is None) != (self.backward_ms is None):
            raise ValueError("an op row has both forward_ms and backward_ms or neither")
        return self


class StepRow(Row):
    """A whole training step of a CNN in one training configuration."""

    kind: Literal["step"]
    cnn_name: Name
    batch_size: Annotated[int, Field(ge=1, le=1_000_000)]
    image_size: Annotated[int, Field(ge=1, le=100_000)]
    optimizer: Word
    momentum: Annotated[float, Field(ge=0, le=10)]
    weight_decay: Annotated[float, Field(ge=0, le=10)]
    precision: Word
    channels_last: bool
    cudnn_benchmark: bool
    oom: bool
    step_ms: Ms | None
    peak_memory_bytes: Annotated[int, Field(gt=0, le=2**60)] | None

    @model_validator(mode="after")
    def _timed(self) -> "StepRow":
        if not self.oom and self.step_ms is None:
            raise ValueError("a step that ran needs step_ms")
        return self


class InputRateRow(Row):
    """Decoding and augmenting images on the machine type's CPUs."""

    kind: Literal["input_rate"]
    pipeline: Annotated[str, Field(min_length=1, max_length=128)]
    host_cpus: Annotated[int, Field(gt=0, le=100_000)]
    decode_ms: Annotated[float, Field(gt=0, le=1e6)]
    augment_ms: Annotated[float, Field(gt=0, le=1e6)]
    images_per_s_all: Annotated[float, Field(gt=0, le=1e9)]
    jpeg_kb: Annotated[float, Field(gt=0, le=1e6)]


class AllreduceRow(Row):
    """An all-reduce of one message size over some of the machine's GPUs."""

    kind: Literal["allreduce"]
    backend: Word
    gpus: Annotated[int, Field(ge=2, le=100_000)]
    bytes: Annotated[int, Field(gt=0, le=2**50)]
    ms: Annotated[float, Field(gt=0, le=1e9)]


class End(Line):
    """The last line: how many lines came between header and end (a cut file lacks it or disagrees)."""

    kind: Literal["end"]
    lines: Annotated[int, Field(ge=0)]


Record = Annotated[
    Environment | ConvSignatureLine | OpSignatureLine | LayerRow | OpRow | StepRow | InputRateRow | AllreduceRow
    | End,
    Field(discriminator="kind"),
]  # fmt: skip
RECORD: TypeAdapter[Record] = TypeAdapter(Record)
ROW_KINDS = ("layer", "op", "step", "input_rate", "allreduce")


class Bundle(BaseModel):
    """A bundle read and checked: its header and its lines by kind, in file order."""

    header: Header
    environments: list[Environment]
    conv_signatures: list[ConvSignatureLine]
    op_signatures: list[OpSignatureLine]
    rows: dict[str, list[Any]]

    @property
    def machine_types(self) -> list[str]:
        """The machine types its rows are of, sorted."""
        return sorted({r.machine_type for kind in ROW_KINDS for r in self.rows[kind]})


class ImportReport(BaseModel):
    """What an import stored: rows new here and rows already here, by kind, and the machine types they are of."""

    machine_types: list[str]
    stored: dict[str, int]
    already: dict[str, int]
    renamed: dict[str, str]

    @property
    def changes_models(self) -> bool:
        """Whether a model fitted now could differ: new whole steps, or new layer or op timings their features use."""
        return any(self.stored.get(kind) for kind in ("layer", "op", "step"))


# The unique key of each kind of row, as the tables key them: a bundle names each key once.
KEYS: dict[str, tuple[str, ...]] = {
    "layer": ("signature", "machine_type", "batch_size", "precision", "channels_last", "environment"),
    "op": ("signature", "machine_type", "batch_size", "variant", "environment"),
    "step": ("cnn_name", "machine_type", "batch_size", "image_size", "optimizer", "momentum", "weight_decay",
             "precision", "channels_last", "cudnn_benchmark", "environment"),
    "input_rate": ("machine_type", "environment", "pipeline"),
    "allreduce": ("machine_type", "environment", "backend", "gpus", "bytes"),
}  # fmt: skip
OWNERS = {"layer": layers, "op": ops, "step": steps, "input_rate": inputs, "allreduce": allreduce}
