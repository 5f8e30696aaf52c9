"""A CNN described as a JSON list of its conv layers, for people who have no model file.

    {"image_size": 224,
     "layers": [{"in_channels": 3, "out_channels": 64, "input_size": 224, "kernel": 7,
                 "stride": 2, "padding": 3, "count": 1}, …],
     "parameters": 11689512}

Each layer's input size is the one it sees when the network's input is image_size; the
description holds at that size only. Pairs may be given as one number or [height, width].
A layer's `count` stays a count: reading costs the same for 1 and for 100,000 repeats.
"""

from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from shared.cnn.signatures import ConvSignature
from shared.cnn.workload import WorkloadJson
from shared.core.errors import ExtractionError, PayloadTooLarge
from shared.core.settings import get_settings

Pair = int | tuple[int, int]
# Bounds on every number of a layer, far past real CNNs, so no figure overflows a float downstream
# and an agent is never asked for an absurd tensor.
MAX_CHANNELS = 1 << 16
MAX_SIZE = 1 << 14  # input height or width
MAX_WINDOW = 1024  # kernel, stride, padding, dilation, output padding


def _pair(v: Pair) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (v[0], v[1])


class LayerSpec(BaseModel):
    """One conv layer (or `count` identical ones)."""

    model_config = ConfigDict(extra="forbid")

    in_channels: int = Field(ge=1, le=MAX_CHANNELS)
    out_channels: int = Field(ge=1, le=MAX_CHANNELS)
    input_size: Pair
    kernel: Pair
    stride: Pair = 1
    padding: Pair = 0
    dilation: Pair = 1
    groups: int = Field(default=1, ge=1, le=MAX_CHANNELS)
    bias: bool = False
    transposed: bool = False
    output_padding: Pair = 0
    dtype: Literal["float32", "float16", "bfloat16", "float64"] = "float32"
    count: int = Field(default=1, ge=1, le=100_000)

    @field_validator("input_size", "kernel", "stride", "dilation")
    @classmethod
    def _positive(cls, v: Pair, info: ValidationInfo) -> Pair:
        top = MAX_SIZE if info.field_name == "input_size" else MAX_WINDOW
        if not all(1 <= x <= top for x in _pair(v)):
            raise ValueError(f"must be between 1 and {top}")
        return v

    @field_validator("padding", "output_padding")
    @classmethod
    def _small(cls, v: Pair) -> Pair:
        if not all(0 <= x <= MAX_WINDOW for x in _pair(v)):
            raise ValueError(f"must be between 0 and {MAX_WINDOW}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "LayerSpec":
        if self.in_channels % self.groups or self.out_channels % self.groups:
            raise ValueError(f"in_channels and out_channels must be divisible by groups ({self.groups})")
        if not self.transposed:
            for size, k, p, d in zip(
                _pair(self.input_size), _pair(self.kernel), _pair(self.padding), _pair(self.dilation), strict=True
            ):
                if size + 2 * p < d * (k - 1) + 1:
                    raise ValueError(f"kernel {k} (dilation {d}) does not fit input {size} with padding {p}")
        return self

    def signature(self) -> ConvSignature:
        """The canonical signature of this layer."""
        h, w = _pair(self.input_size)
        return ConvSignature(
            in_channels=self.in_channels, out_channels=self.out_channels, in_h=h, in_w=w,
            kernel=_pair(self.kernel), stride=_pair(self.stride), padding=_pair(self.padding),
            dilation=_pair(self.dilation), groups=self.groups, bias=self.bias, transposed=self.transposed,
            output_padding=_pair(self.output_padding), dtype=self.dtype,
        )  # fmt: skip


class LayerList(BaseModel):
    """A whole network's conv layers at one input size."""

    model_config = ConfigDict(extra="forbid")

    image_size: int = Field(ge=8, le=2048)
    # Distinct layers; repeats are one entry with a count.
    layers: list[LayerSpec] = Field(min_length=1, max_length=10_000)
    parameters: int | None = Field(default=None, ge=0, le=10**15)


def parse(data: bytes) -> LayerList:
    """Validate an uploaded JSON layer list; an ExtractionError says which field of which layer is wrong."""
    limit = get_settings().max_json_bytes
    if len(data) > limit:
        # Parsing JSON builds objects many times its size; a layer list is small (counts cover repeats).
        raise PayloadTooLarge(f"a JSON layer list of {len(data)} bytes is over the JSON limit of {limit} bytes")
    try:
        return LayerList.model_validate_json(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
        raise ExtractionError(f"invalid JSON layer list: {problems}") from exc


def read(definition: dict[str, Any], image_size: int) -> tuple[Counter[ConvSignature], WorkloadJson]:
    """Each signature with its count, in order of first use, and what is known of the workload."""
    layers = LayerList.model_validate(definition)
    if image_size != layers.image_size:
        raise ExtractionError(
            f"this CNN is described at {layers.image_size} px; describe it again at {image_size} px to use that size"
        )
    signatures: Counter[ConvSignature] = Counter()
    for layer in layers.layers:
        signatures[layer.signature()] += layer.count
    workload: WorkloadJson = {
        "ops": {},
        "parameters": layers.parameters,
        "parameter_tensors": None,
        "activation_bytes": None,
    }
    return signatures, workload
