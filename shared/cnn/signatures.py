"""Canonical conv layer signatures: the key every layer benchmark is stored under."""

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ConvSignature:
    """One conv layer configuration, without batch size (a benchmark axis, not an identity)."""

    in_channels: int
    out_channels: int
    in_h: int
    in_w: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int
    bias: bool
    transposed: bool
    output_padding: tuple[int, int]
    dtype: str

    def canonical(self) -> str:
        """The canonical JSON form the hash is taken of."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @property
    def hash(self) -> str:
        """Stable key: the same layer in any CNN gets the same hash."""
        return hashlib.sha256(self.canonical().encode()).hexdigest()[:32]

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-able dict (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ConvSignature":
        """Inverse of to_json."""
        pairs = ("kernel", "stride", "padding", "dilation", "output_padding")
        fields: dict[str, Any] = {k: tuple(v) if k in pairs else v for k, v in data.items()}
        return cls(**fields)
