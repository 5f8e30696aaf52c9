"""How each aten call of a traced step becomes an op signature (shared/cnn/op_signatures.py): a handler per op kind.

A handler reads the call's tensors as the step's own: per sample where the call carries the batch, the whole
tensor once per step where it does not, and says how op_bench rebuilds the input (fold, layout, step, grad).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shared.cnn.op_signatures import (
    ACTIVATIONS,
    VIEWS,
    OpSignature,
    canonical_name,
    is_free,
    requires_grad,
    tensors_of,
)

_BATCH_NORMS = ("native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional")
_FILLS = ("fill", "zero", "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like",
          "new_full", "scalar_tensor")  # fmt: skip
_COMPARES = ("eq", "ne", "lt", "le", "gt", "ge")


@dataclass(frozen=True)
class _Call:
    """One aten call's context: the batch, whether the call carries it, whether a gradient flows."""

    batch: int
    batched: bool
    grad: bool

    def numel(self, t: Any) -> int:
        """Elements per sample (all of them for a per-step op)."""
        return int(t.numel()) // self.batch if self.batched else int(t.numel())

    def step(self) -> dict[str, Any]:
        """The arguments of an op without a batch dimension."""
        return {} if self.batched else {"step": True}

    def flags(self) -> dict[str, Any]:
        """step, and grad=False where no gradient flows through the op."""
        return {**self.step(), **({} if self.grad else {"grad": False})}

    def per(self, t: Any) -> tuple[tuple[int, ...], dict[str, Any]] | None:
        """The per-sample shape the op's dimension arguments refer to, and how to rebuild it; None if the batch is
        not in the first dimension."""
        if not self.batched:
            return tuple(int(s) for s in t.shape), {"step": True, **_layout(t, batched=False)}
        if t.dim() == 0 or t.shape[0] % self.batch:
            return None
        fold = int(t.shape[0]) // self.batch
        extra = {"fold": fold} if fold > 1 else _layout(t, batched=True)
        return tuple(int(s) for s in t.shape[1:]), extra


def _layout(t: Any, *, batched: bool) -> dict[str, Any]:
    # A dense permuted view (convnext's stem layer norm over NCHW, shufflenet's shuffle) is rebuilt as one; any
    # other strided view (a slice, an expansion) is approximated by a contiguous tensor of its size.
    if t.is_contiguous():
        return {}
    order = sorted(range(t.dim()), key=lambda d: -t.stride(d))
    if not t.permute(order).is_contiguous() or (batched and order[0] != 0):
        return {}
    return {"layout": order}


def from_aten(
    name: str, args: tuple[Any, ...], out: Any, batch: int, *, batched: Callable[[Any], bool] | None = None
) -> OpSignature | None:
    """The signature of one aten call seen at extraction with `batch` samples (None for ops that are free), by the
    handler of its op kind.

    batched: whether a tensor carries the batch (computed from the input); by default, its first dimension
    equals the batch. An op none of whose tensors carries it runs once per step, whatever the batch size.
    """
    carries = batched or (lambda t: t.dim() > 0 and t.shape[0] == batch)
    name = canonical_name(name)
    if is_free(name, args, out):
        return None
    tensors = tensors_of(args)
    # A factory carries the batch only where its output does (stochastic depth's noise, not swin's mask).
    sources = tensors_of(out) if name in _FILLS else [*tensors, *tensors_of(out)]
    call = _Call(batch, any(carries(t) for t in sources), requires_grad(tensors))
    handler = HANDLERS.get(name)
    return handler(call, name, args, out, carries) if handler else None


Handler = Callable[[_Call, str, tuple[Any, ...], Any, Callable[[Any], bool]], OpSignature | None]


def _structured(op: str) -> Handler:
    """An op of one input whose dimensions matter (norms, pooling, reductions): its per-sample shape."""

    def handler(c: _Call, name: str, args: tuple[Any, ...], out: Any, carries: Callable[[Any], bool]) -> Any:
        per = c.per(args[0])
        if per is None:
            return None
        shape, extra = per
        grad = {} if c.grad else {"grad": False}
        return OpSignature.of(op, shape, **{**extra, **grad, **_ARGUMENTS[op](args, args[0].dim())})

    return handler


def _pool_args(args: tuple[Any, ...], n: int, avg: bool) -> dict[str, Any]:
    # max_pool2d_with_indices(x, kernel, stride=[], padding=0, dilation=1, ceil_mode=False);
    # avg_pool2d(x, kernel, stride=[], padding=0, ceil_mode=False, count_include_pad=True, divisor=None)
    a = list(args) + [None] * (n - len(args))
    common = {"kernel": _pair(a[1]), "stride": _pair(a[2] or a[1]), "padding": _pair(a[3] or 0)}
    if avg:
        return {**common, "ceil": bool(a[4]), "count_include_pad": a[5] is None or bool(a[5]), "divisor": a[6]}
    return {**common, "dilation": _pair(a[4] or 1), "ceil": bool(a[5])}


def _dims(value: Any, ndim: int) -> list[int]:
    values = value if isinstance(value, list | tuple) else [] if value is None else [value]
    return sorted(int(d) % ndim for d in values)


_ARGUMENTS: dict[str, Callable[[tuple[Any, ...], int], dict[str, Any]]] = {
    "batch_norm": lambda a, n: {},
    "layer_norm": lambda a, n: {"normalized": list(a[1])},
    "group_norm": lambda a, n: {"groups": int(a[6])},
    "max_pool2d": lambda a, n: _pool_args(a, 6, avg=False),
    "avg_pool2d": lambda a, n: _pool_args(a, 7, avg=True),
    "adaptive_avg_pool2d": lambda a, n: {"output": list(a[1])},
    "adaptive_max_pool2d": lambda a, n: {"output": list(a[1])},
    "mean": lambda a, n: {
        "dims": _dims(a[1] if len(a) > 1 else None, n),
        "keepdim": bool(a[2]) if len(a) > 2 else False,
    },
    "softmax": lambda a, n: {"dim": int(a[1]) % n},
    "roll": lambda a, n: {"shifts": list(a[1]), "dims": [int(d) % n for d in a[2]]},
    "pad": lambda a, n: {"pad": list(a[1]), "value": float(a[2]) if len(a) > 2 else 0.0},
    "norm": lambda a, n: {
        "ord": float(a[1]) if len(a) > 1 else 2.0,
        "dims": _dims(a[2] if len(a) > 2 else None, n),
        "keepdim": bool(a[3]) if len(a) > 3 else False,
    },
}


def _pair(v: Any) -> list[int]:
    vals = [int(i) for i in v] if isinstance(v, list | tuple) else [int(v)]
    return vals * 2 if len(vals) == 1 else vals[:2]


def _unary(c: _Call, name: str, args: tuple[Any, ...], out: Any, carries: Callable[[Any], bool]) -> OpSignature:
    numel = c.numel(args[0])
    if name in ("hardtanh", "clamp") and len(args) > 2 and args[1] is not None and args[2] is not None:
        return OpSignature.of("hardtanh", (numel,), min=float(args[1]), max=float(args[2]), **c.flags())
    if name in ("clamp", "clamp_min"):
        low, high = args[1] if len(args) > 1 else None, args[2] if name == "clamp" and len(args) > 2 else None
        return OpSignature.of("clamp", (numel,), min=_number(low), max=_number(high), **c.flags())
    return OpSignature.of(name, (numel,), **c.flags())


def _number(v: Any) -> float | None:
    return None if v is None else float(v)


def _linear(c: _Call, name: str, args: tuple[Any, ...], out: Any, carries: Callable[[Any], bool]) -> Any:
    a, w = (args[1], args[2]) if name == "addmm" else (args[0], args[1])  # addmm(bias, x, weight.t())
    if carries(w):
        return None  # both operands per sample: not a layer
    rows = int(a.shape[0]) // c.batch if c.batched else int(a.shape[0])
    if c.batched and int(a.shape[0]) % c.batch:
        return None
    return OpSignature.of("linear", (rows, int(a.shape[1])), out=int(w.shape[1]), bias=name == "addmm", **c.flags())


def _bmm(c: _Call, name: str, args: tuple[Any, ...], out: Any, carries: Callable[[Any], bool]) -> Any:
    a, b = args[0], args[1]
    if c.batched and (int(a.shape[0]) % c.batch or not (carries(a) and carries(b))):
        return None
    k = int(a.shape[0]) // c.batch if c.batched else int(a.shape[0])
    return OpSignature.of("bmm", (k, int(a.shape[1]), int(a.shape[2])), out=int(b.shape[2]), **c.flags())


def _binary(c: _Call, name: str, args: tuple[Any, ...], out: Any, carries: Callable[[Any], bool]) -> OpSignature:
    import torch

    op = "compare" if name in _COMPARES else "add" if name in ("add", "sub", "rsub") else "mul"
    first: Any = args[0]
    second: Any = args[1] if len(args) > 1 else 0
    # The operand the size of the output is the op's input; the other is broadcast (layer_scale * x: the second).
    swap = isinstance(second, torch.Tensor) and (
        not isinstance(first, torch.Tensor) or second.numel() > first.numel()
        or (second.numel() == first.numel() and carries(second) and not carries(first))
    )  # fmt: skip
    x, other = (second, first) if swap else (first, second)
    flags = c.step() if op == "compare" else c.flags()
    dtype = {} if x.is_floating_point() else {"dtype": str(x.dtype).removeprefix("torch.")}
    if not isinstance(other, torch.Tensor) or other.numel() == 1:
        return OpSignature.of(op, (c.numel(x),), other=0, batched=False, **flags, **dtype)
    # The other operand: a whole tensor of the same size, a per-sample broadcast (squeeze-excitation's
    # scale), a parameter shared by all samples; the batch shapes are rebuilt from these.
    both = c.batched and carries(other)
    n = int(other.numel()) // c.batch if both else int(other.numel())
    return OpSignature.of(op, (c.numel(x),), other=n, batched=both, **flags, **dtype)


def _simple(op: str, *, grad: bool = True) -> Handler:
    """An op whose cost is its size: masked_fill, bernoulli (whatever its probability), a fill."""

    def handler(c: _Call, name: str, args: tuple[Any, ...], out: Any, carries: Callable[[Any], bool]) -> Any:
        target = out if op == "fill" else args[0]
        extra: dict[str, Any] = c.flags() if grad else c.step()
        if not target.is_floating_point():
            extra["dtype"] = str(target.dtype).removeprefix("torch.")
        return OpSignature.of(op, (c.numel(target),), **extra)

    return handler


def _copy(c: _Call, name: str, args: tuple[Any, ...], out: Any, carries: Callable[[Any], bool]) -> Any:
    src = args[1] if name == "copy" else args[0]  # copy_(dst, src); clone(src); _to_copy(src)
    dst = args[0] if name == "copy" else out
    if src.numel() == 1 and dst.numel() > 1:
        return _simple("fill", grad=False)(c, "fill", (dst,), dst, carries)
    per = c.per(src) if c.batched else None
    if per is not None and "layout" in per[1]:  # a permuted source (shufflenet's channel shuffle)
        return OpSignature.of("copy", per[0], **{**per[1], **c.flags()})
    return OpSignature.of("copy", (c.numel(dst),), **c.flags())


def _view(c: _Call, name: str, args: tuple[Any, ...], out: Any, carries: Callable[[Any], bool]) -> OpSignature:
    x = args[0]
    if name == "select":
        return OpSignature.of("select", (int(x.shape[int(args[1])]), c.numel(out)), **c.step())
    if name == "slice":
        return OpSignature.of("slice", (c.numel(x),), out=c.numel(out), **c.step())
    if name == "expand":
        shared = c.batched and not carries(x)  # a parameter broadcast over the batch (ViT's class token)
        n = int(x.numel()) if shared else c.numel(x)
        return OpSignature.of("expand", (n,), out=c.numel(out), shared=shared, **c.step())
    return OpSignature.of("split", (c.numel(x),), parts=[c.numel(o) for o in tensors_of(out)], **c.step())


def _cat(c: _Call, name: str, args: tuple[Any, ...], out: Any, carries: Callable[[Any], bool]) -> Any:
    dim = int(args[1]) if len(args) > 1 else 0
    parts = list(args[0])
    if not c.batched:
        return OpSignature.of(name, (), shapes=[list(t.shape) for t in parts], dim=dim, step=True)
    if any(t.dim() == 0 or t.shape[0] != c.batch for t in parts):
        return None
    return OpSignature.of(name, (), shapes=[list(t.shape[1:]) for t in parts], dim=dim)


def _index(c: _Call, name: str, args: tuple[Any, ...], out: Any, carries: Callable[[Any], bool]) -> Any:
    x, indices = args[0], list(args[1])
    at = [i for i, t in enumerate(indices) if t is not None]
    per = c.per(x)
    if len(at) != 1 or per is None or carries(indices[at[0]]) or (c.batched and at[0] == 0):
        return None  # only a gather along one dimension with the same index for every sample (a table lookup)
    shape, extra = per
    return OpSignature.of("index", shape, **{**extra, **c.flags()}, dim=at[0], index=list(indices[at[0]].shape))


def _loss(c: _Call, name: str, args: tuple[Any, ...], out: Any, carries: Callable[[Any], bool]) -> Any:
    x = args[0]
    if not c.batched or x.dim() != 2 or x.shape[0] != c.batch:
        return None
    return OpSignature.of("cross_entropy", (int(x.shape[1]),))  # with nll_loss: F.cross_entropy


def _dropout(c: _Call, name: str, args: tuple[Any, ...], out: Any, carries: Callable[[Any], bool]) -> OpSignature:
    return OpSignature.of("dropout", (c.numel(args[0]),), p=float(args[1]), **c.step())


HANDLERS: dict[str, Handler] = {
    **dict.fromkeys(_BATCH_NORMS, _structured("batch_norm")),
    "native_layer_norm": _structured("layer_norm"),
    "native_group_norm": _structured("group_norm"),
    **dict.fromkeys((*ACTIVATIONS, "exp", "clamp", "clamp_min"), _unary),
    "max_pool2d_with_indices": _structured("max_pool2d"),
    "avg_pool2d": _structured("avg_pool2d"),
    "_adaptive_avg_pool2d": _structured("adaptive_avg_pool2d"),
    "adaptive_max_pool2d": _structured("adaptive_max_pool2d"),
    "mean": _structured("mean"),
    "_softmax": _structured("softmax"),
    "_safe_softmax": _structured("softmax"),
    "roll": _structured("roll"),
    "constant_pad_nd": _structured("pad"),
    "linalg_vector_norm": _structured("norm"),
    "addmm": _linear,
    "mm": _linear,
    "bmm": _bmm,
    **dict.fromkeys(("add", "sub", "rsub", "mul", "div", *_COMPARES), _binary),
    "masked_fill": _simple("masked_fill"),
    "bernoulli": _simple("bernoulli", grad=False),
    **dict.fromkeys(_FILLS, _simple("fill", grad=False)),
    **dict.fromkeys(("clone", "copy", "_to_copy"), _copy),
    **dict.fromkeys(VIEWS, _view),
    "cat": _cat,
    "stack": _cat,
    "index": _index,
    "_log_softmax": _loss,
    "native_dropout": _dropout,
}
