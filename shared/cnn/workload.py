"""The non-conv work of a training step, per operator kind, read from the ops a forward pass runs.

FLOPs come from PyTorch's own FLOP formulas where it has one (matmuls, convolutions); every
other operator counts one FLOP per output element. Bytes are the sizes of the operator's
tensor inputs and outputs. Both are per sample: measured at a batch of 2 and halved, so the
parameters an op reads are halved too (small next to activations except in linear layers).
"""

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

KINDS = (
    "conv", "batch_norm", "activation", "pooling", "linear", "elementwise", "concat", "softmax_loss", "other",
)  # fmt: skip

# aten operator name (overload packet) → kind. Names not listed are views, copies or
# bookkeeping and are counted as "other" only if they produce a new tensor.
_KIND_OF = {
    "convolution": "conv",
    "_native_batch_norm_legit": "batch_norm",
    "_native_batch_norm_legit_functional": "batch_norm",
    "native_batch_norm": "batch_norm",
    "_native_batch_norm_legit_no_training": "batch_norm",
    "native_layer_norm": "batch_norm",
    "native_group_norm": "batch_norm",
    "relu": "activation", "relu_": "activation", "gelu": "activation", "silu": "activation",
    "silu_": "activation", "hardswish": "activation", "hardswish_": "activation",
    "hardsigmoid": "activation", "hardsigmoid_": "activation", "sigmoid": "activation",
    "hardtanh": "activation", "hardtanh_": "activation", "tanh": "activation", "clamp": "activation",
    "max_pool2d_with_indices": "pooling", "avg_pool2d": "pooling", "_adaptive_avg_pool2d": "pooling",
    "adaptive_max_pool2d": "pooling", "mean": "pooling",
    "addmm": "linear", "mm": "linear", "bmm": "linear", "linear": "linear",
    "add": "elementwise", "add_": "elementwise", "mul": "elementwise", "mul_": "elementwise",
    "sub": "elementwise", "div": "elementwise", "div_": "elementwise",
    "cat": "concat", "stack": "concat",
    "_log_softmax": "softmax_loss", "_softmax": "softmax_loss", "nll_loss_forward": "softmax_loss",
}  # fmt: skip
_IGNORED = {
    "view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "flatten", "detach",
    "empty", "empty_like", "zeros", "ones", "slice", "select", "split", "split_with_sizes", "chunk",
    "squeeze", "unsqueeze", "alias", "clone", "contiguous", "_to_copy", "copy_", "lift_fresh",
    "new_empty", "new_zeros", "randn", "randint", "dropout", "native_dropout", "bernoulli_", "fill_",
    "zero_", "scalar_tensor", "as_strided", "unbind", "_reshape_alias",
}  # fmt: skip
# Of the names above, the ones that launch no kernel (views, allocation, metadata): every other call dispatches
# one or more, which a fast GPU's host must issue one by one (prediction/reference/steps.py counts them).
_NO_KERNEL = {
    "view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "flatten", "detach", "empty",
    "empty_like", "slice", "select", "split", "split_with_sizes", "chunk", "squeeze", "unsqueeze", "alias",
    "lift_fresh", "new_empty", "scalar_tensor", "as_strided", "as_strided_", "unbind", "_reshape_alias",
    "empty_strided", "_unsafe_split", "zeros",
}  # fmt: skip

# Batch norms in training mode (statistics over the batch): the layer norms and eval-mode batch norms are not.
_TRAINING_BATCH_NORMS = {"native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional"}


@dataclass
class OpTotals:
    """Totals of one operator kind over one forward pass, per sample."""

    count: int = 0
    flops: float = 0.0
    bytes: float = 0.0


class OpTotalsJson(TypedDict):
    """One kind of operator in a stored workload: calls, FLOPs and bytes moved per sample."""

    count: int
    flops: float
    bytes: float


class WorkloadJson(TypedDict, total=False):
    """A workload as stored (Workload.to_json; its owner shared/measurements/layers.py) and read back: per sample."""

    ops: dict[str, OpTotalsJson]
    flops: float
    parameters: int | None  # None: a layer list that does not say
    parameter_tensors: int | None  # None: a layer list, which does not say
    largest_parameter: int
    activation_bytes: float | None
    saved_bytes: float | None
    kernels: int
    # [channels, height x width, calls] of each batch norm over NCHW maps in training, per sample: kernels that give
    # each channel's statistics a block of their own take as long for 16 channels as for 96 (steps.py)
    batch_norm_channels: list[list[int]]


@dataclass
class Workload:
    """What one training step of a CNN does besides (and including) its convolutions, per sample."""

    ops: dict[str, OpTotals] = field(default_factory=lambda: defaultdict(OpTotals))
    parameters: int = 0
    parameter_tensors: int = 0
    largest_parameter: int = 0  # elements of the biggest parameter tensor (a per-tensor optimizer's temporaries)
    activation_bytes: float = 0.0  # every op output kept: an upper bound of what backward saves
    # What autograd actually keeps for backward (distinct storages, parameters excluded); None if unknown.
    saved_bytes: float | None = None
    kernels: int = 0  # calls that launch a kernel in one forward pass (views and allocations excluded)
    # (channels, height x width) of the training batch norms over 4-d maps → calls (WorkloadJson.batch_norm_channels)
    norms: dict[tuple[int, int], int] = field(default_factory=dict)

    def add(self, kind: str, flops: float, nbytes: float, out_bytes: float) -> None:
        """Account one operator call (figures for the whole batch of the extraction)."""
        totals = self.ops[kind]
        totals.count += 1
        totals.flops += flops
        totals.bytes += nbytes
        self.activation_bytes += out_bytes

    def add_norm(self, channels: int, spatial: int) -> None:
        """Account one training batch norm over 4-d maps of this many channels and height x width."""
        key = (int(channels), int(spatial))
        self.norms[key] = self.norms.get(key, 0) + 1

    def per_sample(self, batch: int) -> "Workload":
        """The same totals divided by the batch they were measured at."""
        out = Workload(
            parameters=self.parameters,
            parameter_tensors=self.parameter_tensors,
            largest_parameter=self.largest_parameter,
            kernels=self.kernels,
            norms=dict(self.norms),  # per sample already: a map's size does not depend on the batch
        )
        for kind, t in self.ops.items():
            out.ops[kind] = OpTotals(t.count, t.flops / batch, t.bytes / batch)
        out.activation_bytes = self.activation_bytes / batch
        out.saved_bytes = None if self.saved_bytes is None else self.saved_bytes / batch
        return out

    def to_json(self) -> WorkloadJson:
        """Plain dict: per-kind count, FLOPs and bytes; parameters; activation memory (all outputs, and saved)."""
        return {
            "ops": {k: cast(OpTotalsJson, vars(self.ops[k])) for k in KINDS if k in self.ops},
            "flops": sum(t.flops for t in self.ops.values()),
            "parameters": self.parameters,
            "parameter_tensors": self.parameter_tensors,
            "largest_parameter": self.largest_parameter,
            "activation_bytes": self.activation_bytes,
            "saved_bytes": self.saved_bytes,
            "kernels": self.kernels,
            "batch_norm_channels": [[c, hw, n] for (c, hw), n in sorted(self.norms.items())],
        }


def kind_of(op_name: str) -> str | None:
    """The workload kind of an aten operator, None for views and bookkeeping."""
    if op_name in _IGNORED:
        return None
    return _KIND_OF.get(op_name, "other")


def record_aten(work: Workload, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
    """Account one aten call seen by a dispatch mode."""
    import torch
    from torch.utils.flop_counter import flop_registry

    name = func.overloadpacket.__name__
    if name not in _NO_KERNEL:
        work.kernels += 1
    kind = kind_of(name)
    if kind is None:
        return
    tensors_in = [a for a in _flat(args) + _flat(list(kwargs.values())) if isinstance(a, torch.Tensor)]
    tensors_out = [o for o in _flat([out]) if isinstance(o, torch.Tensor)]
    out_bytes = sum(t.numel() * t.element_size() for t in tensors_out)
    in_bytes = sum(t.numel() * t.element_size() for t in tensors_in)
    formula = flop_registry.get(func.overloadpacket)
    if formula is not None:
        flops = float(formula(*args, **kwargs, out_val=out))
    else:
        flops = float(tensors_out[0].numel()) if tensors_out else 0.0
    work.add(kind, flops, in_bytes + out_bytes, out_bytes)
    if name in _TRAINING_BATCH_NORMS and tensors_in and tensors_in[0].dim() == 4:
        _, channels, height, width = tensors_in[0].shape
        work.add_norm(channels, height * width)


def _flat(items: Any) -> list[Any]:
    flat: list[Any] = []
    for item in items:
        if isinstance(item, list | tuple):
            flat.extend(_flat(item))
        else:
            flat.append(item)
    return flat
