"""Canonical signatures of a step's non-conv operators and of its optimizer step: the keys of op benchmarks.

A signature is the operator and what decides its cost per sample (shapes without the batch, the
arguments that change the kernel); batch size, precision and layout are benchmark axes. In-place and
out-of-place variants share one signature, as do ops of one kind and size in any CNN (every ReLU of
64×56×56 values is `relu(200704)`), so a CNN's ops are measured once for all CNNs that share them.

Arguments beyond the op's own say how to rebuild its input where it is not a plain batch of samples:
`step` (no batch: computed once per step on parameters or buffers, e.g. batch norm's counter, a
relative-position table), `fold` (the batch folded into the first dimension, k rows per sample),
`layout` (a permuted view: the order of its dimensions in memory, outermost first), `grad` (False:
no gradient flows, so it has no backward), `dtype` (not floating point). Every aten call of a traced
step either becomes a signature or is named in FREE or VIEWS (tests/unit/test_op_coverage.py).
"""

import hashlib
import json
from dataclasses import dataclass
from typing import Any

# Under autocast these run in fp32 whatever the precision (torch's autocast fp32 list).
FP32_UNDER_AUTOCAST = frozenset({"cross_entropy", "softmax", "layer_norm", "group_norm", "norm", "exp"})
OPTIMIZER = "optimizer"
ACTIVATIONS = frozenset({"relu", "gelu", "silu", "hardswish", "hardsigmoid", "sigmoid", "tanh", "hardtanh"})
# Ops with no backward of their own (a mask, random numbers, a constant, a gradient sum): timed as one phase.
NO_BACKWARD = frozenset({"bernoulli", "fill", "compare", "accumulate"})

_VIEW_OPS = ("view", "_unsafe_view", "_reshape_alias", "reshape", "t", "transpose", "permute", "unsqueeze", "squeeze",
             "alias", "unflatten", "flatten")  # fmt: skip
# aten ops that launch no kernel in a training step, forward or backward, each with why.
FREE = {
    **dict.fromkeys(_VIEW_OPS, "a view: new sizes over the same memory; its gradient is a view of the output's"),
    "as_strided": "restrides its input in place (adaptive pooling's output): metadata, no kernel",
    "detach": "a view outside autograd (autograd saving an output): no kernel, no gradient",
    "lift_fresh": "wraps a constant made on the host: no kernel",
    **dict.fromkeys(("empty", "empty_like", "new_empty", "empty_strided"), "allocates only: no kernel"),
    "nll_loss_forward": "measured with _log_softmax as cross_entropy (F.cross_entropy runs both)",
}
# Views free in the forward pass whose backward runs a kernel (select and slice write the gradient into
# zeros, split and unbind concatenate the parts', expand sums): measured where a gradient flows, else free.
VIEWS = {
    "select": "free without a gradient, else zeros + a copy into them in backward",
    "slice": "free without a gradient, else zeros + a copy into them in backward",
    "split": "free without a gradient, else a concatenation of the parts' gradients in backward",
    "split_with_sizes": "free without a gradient, else a concatenation of the parts' gradients in backward",
    "unbind": "free without a gradient, else a stack of the parts' gradients in backward",
    "expand": "free when it does not grow or without a gradient, else a sum in backward",
}


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


def accumulation(numel: int, *, batched: bool) -> OpSignature:
    """Backward's sum of the gradients of a tensor used twice or more: one per use beyond the first."""
    return OpSignature.of("accumulate", (numel,), **({} if batched else {"step": True}))


def without_backward(sig: OpSignature) -> OpSignature:
    """The same op where no gradient flows back through it (grad=False: timed without a backward)."""
    if sig.op in NO_BACKWARD or sig.arguments.get("grad") is False:
        return sig
    return OpSignature.of(sig.op, sig.shape, **{**sig.arguments, "grad": False})


def canonical_name(name: str) -> str:
    """An aten overload packet's name with in-place variants folded into their op (relu_ → relu)."""
    return name if name in ("_softmax", "_log_softmax") else name.rstrip("_")


def is_free(name: str, args: tuple[Any, ...], out: Any) -> bool:
    """Whether an aten call launches no kernel in the step (FREE, or a VIEWS op no gradient flows through)."""
    import torch

    name = canonical_name(name)
    if name in FREE:
        return True
    grows = name == "expand" and isinstance(out, torch.Tensor) and out.numel() > args[0].numel()
    return name in VIEWS and (not requires_grad(tensors_of(args)) or (name == "expand" and not grows))


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


def tensors_of(items: Any) -> list[Any]:
    """The tensors among an aten call's arguments or outputs, nested lists flattened."""
    import torch

    if isinstance(items, torch.Tensor):
        return [items]
    if isinstance(items, list | tuple):
        return [t for item in items for t in tensors_of(item)]
    return []


def requires_grad(tensors: list[Any]) -> bool:
    """Whether a gradient flows to any of these tensors."""
    return any(t.requires_grad for t in tensors)
