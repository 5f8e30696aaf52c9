"""Canonical signatures of a step's non-conv operators and of its optimizer step: the keys of op benchmarks.

A signature is the operator and what decides its cost per sample (shapes without the batch, the
arguments that change the kernel); batch size, precision and layout are benchmark axes. In-place and
out-of-place variants share one signature, as do ops of one kind and size in any CNN (every ReLU of
64×56×56 values is `relu(200704)`), so a CNN's ops are measured once for all CNNs that share them.
"""

import hashlib
import json
from dataclasses import dataclass
from typing import Any

# Under autocast these run in fp32 whatever the precision (torch's autocast fp32 list).
FP32_UNDER_AUTOCAST = frozenset({"cross_entropy", "softmax", "layer_norm", "group_norm"})
OPTIMIZER = "optimizer"
ACTIVATIONS = frozenset({"relu", "gelu", "silu", "hardswish", "hardsigmoid", "sigmoid", "tanh", "hardtanh"})


@dataclass(frozen=True)
class OpSignature:
    """One operator configuration: name, per-sample input shape, and the arguments that change its work."""

    op: str
    shape: tuple[int, ...]
    args: str = "{}"  # canonical JSON, so the signature stays hashable

    @classmethod
    def of(cls, op: str, shape: Any, **args: Any) -> "OpSignature":
        """A signature from plain values (lists or tuples, any order of arguments)."""
        return cls(op, tuple(int(s) for s in shape), json.dumps(_plain(args), sort_keys=True, separators=(",", ":")))

    @property
    def arguments(self) -> dict[str, Any]:
        """The arguments as a dict."""
        return dict(json.loads(self.args))

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-able dict: op, shape, args."""
        return {"op": self.op, "shape": list(self.shape), "args": self.arguments}

    def canonical(self) -> str:
        """The canonical JSON form the hash is taken of."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @property
    def hash(self) -> str:
        """Stable key: the same op configuration in any CNN gets the same hash."""
        return hashlib.sha256(self.canonical().encode()).hexdigest()[:32]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "OpSignature":
        """Inverse of to_json."""
        return cls.of(data["op"], data["shape"], **data.get("args", {}))


def optimizer_signature(shapes: list[tuple[int, ...]]) -> OpSignature:
    """The optimizer step of a CNN: its parameter tensors' shapes, in order (the foreach kernels see them all)."""
    return OpSignature.of(OPTIMIZER, (), shapes=[list(s) for s in shapes])


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bool | str) or value is None:
        return value
    if isinstance(value, float):
        return round(value, 6)
    return int(value)


def from_aten(name: str, args: tuple[Any, ...], out: Any, batch: int) -> OpSignature | None:
    """The signature of one aten call seen at extraction with `batch` samples; None for ops not measured."""
    import torch

    name = name.rstrip("_") if name not in ("_softmax", "_log_softmax") else name
    x = args[1] if name == "addmm" else args[0] if args else None  # addmm(bias, x, weight.t())
    if not isinstance(x, torch.Tensor):
        x = args[0][0] if args and isinstance(args[0], list | tuple) and args[0] else None
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.shape[0] != batch:
        return None  # bookkeeping (num_batches_tracked += 1), or not per sample
    per = tuple(int(s) for s in x.shape[1:])
    numel = x.numel() // batch
    if name in ("native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional"):
        return OpSignature.of("batch_norm", per)
    if name == "native_layer_norm":
        return OpSignature.of("layer_norm", per, normalized=list(args[1]))
    if name == "native_group_norm":
        return OpSignature.of("group_norm", per, groups=int(args[6]))
    if name in ACTIVATIONS:
        if name == "hardtanh":
            return OpSignature.of(name, (numel,), min=float(args[1]), max=float(args[2]))
        return OpSignature.of(name, (numel,))
    if name == "clamp":
        return OpSignature.of("hardtanh", (numel,), min=float(args[1]), max=float(args[2]))
    if name == "max_pool2d_with_indices":  # (x, kernel, stride=[], padding=0, dilation=1, ceil_mode=False)
        a = list(args) + [None] * (6 - len(args))
        return OpSignature.of(
            "max_pool2d", per, kernel=_pair(a[1]), stride=_pair(a[2] or a[1]), padding=_pair(a[3] or 0),
            dilation=_pair(a[4] or 1), ceil=bool(a[5]),
        )  # fmt: skip
    if name == "avg_pool2d":
        a = list(args) + [None] * (7 - len(args))
        return OpSignature.of(
            "avg_pool2d", per, kernel=_pair(a[1]), stride=_pair(a[2] or a[1]), padding=_pair(a[3] or 0),
            ceil=bool(a[4]), count_include_pad=a[5] is None or bool(a[5]), divisor=a[6],
        )  # fmt: skip
    if name in ("_adaptive_avg_pool2d", "adaptive_max_pool2d"):
        return OpSignature.of(name.lstrip("_"), per, output=list(args[1]))
    if name == "mean":
        dims = sorted(int(d) % x.dim() for d in (args[1] if len(args) > 1 and args[1] is not None else []))
        return OpSignature.of("mean", per, dims=dims, keepdim=bool(args[2]) if len(args) > 2 else False)
    if name in ("addmm", "mm"):
        a, w = (args[1], args[2]) if name == "addmm" else (args[0], args[1])
        return OpSignature.of("linear", (a.shape[0] // batch, a.shape[1]), out=int(w.shape[1]), bias=name == "addmm")
    if name in ("add", "sub", "mul", "div"):
        return _elementwise("add" if name in ("add", "sub") else "mul", numel, args[1] if len(args) > 1 else 0, batch)
    if name in ("cat", "stack"):
        dim = int(args[1]) if len(args) > 1 else 0
        return OpSignature.of(name, (), shapes=[list(t.shape[1:]) for t in args[0]], dim=dim)
    if name == "_log_softmax" and x.dim() == 2:
        return OpSignature.of("cross_entropy", (int(x.shape[1]),))  # with nll_loss: F.cross_entropy
    if name == "_softmax":
        return OpSignature.of("softmax", per, dim=int(args[1]) % x.dim())
    if name == "native_dropout":
        return OpSignature.of("dropout", (numel,), p=float(args[1]))
    return None


def _pair(v: Any) -> list[int]:
    vals = [int(i) for i in v] if isinstance(v, list | tuple) else [int(v)]
    return vals * 2 if len(vals) == 1 else vals[:2]


def _elementwise(op: str, numel: int, other: Any, batch: int) -> OpSignature:
    import torch

    # The other operand: a whole tensor of the same size, a per-sample broadcast (squeeze-excitation's
    # scale), a parameter shared by all samples, or a scalar; the batch shapes are rebuilt from these.
    if not isinstance(other, torch.Tensor) or other.numel() == 1:
        return OpSignature.of(op, (numel,), other=0, batched=False)
    batched = other.dim() > 0 and other.shape[0] == batch
    n = other.numel() // batch if batched else other.numel()
    return OpSignature.of(op, (numel,), other=n, batched=batched)
