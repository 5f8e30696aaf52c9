"""Forward and backward time of one non-conv operator, or the optimizer step of a CNN's parameters.

An operator is rebuilt from its signature (shared/cnn/op_signatures.py) at each batch size with inputs that
require grad, as in training: "forward" is the call (autograd recording it), "backward" the gradients of
its inputs from a fixed output gradient (the graph kept, so it can run again); as its signature says, once
per step (no batch), over a permuted view (layout) or without a backward (no gradient flows). The optimizer step is
PyTorch's default implementation (foreach on CUDA) over gradients of the CNN's parameter shapes, with
zero_grad as a training loop calls it; under amp_fp16 through a GradScaler (unscale, inf check, step).
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812

from gpu_agent import step_bench, windows
from gpu_agent.layer_bench import DTYPES
from gpu_agent.timing import Policy, sync
from gpu_agent.windows import Outcome, PointSetup, Prepared
from shared.cnn.op_signatures import FP32_UNDER_AUTOCAST, NO_BACKWARD, OPTIMIZER, OpSignature
from shared.training import TrainConfig

# Working memory per input element: input, output, their gradients, and saved statistics or indices.
_COPIES = 6


def measure(
    sig: OpSignature,
    batch_sizes: Sequence[int],
    config: TrainConfig,
    device: torch.device,
    *,
    policy: Policy,
    window_points: int,
    save: Callable[[int, Outcome], None],
    stop: Callable[[], bool],
) -> list[int]:
    """Time the op's phases at each batch size (the optimizer: once, at batch size 0); returns points left by a stop."""
    setup = PointSetup(
        prepare=lambda bs: prepare(sig, bs, config, device),
        footprint=lambda sizes: sum(footprint(sig, max(bs, 1), config) for bs in sizes),
        # An op this device's torch has no kernel for in this dtype, or that torch refuses at this batch size
        # (batch norm of one value per channel): stored as such, then learnt, not measured.
        infeasible=(NotImplementedError, TypeError, ValueError),
    )
    return windows.run(
        batch_sizes, setup, device=device, policy=policy, window_points=window_points, save=save, stop=stop
    )


def footprint(sig: OpSignature, batch_size: int, config: TrainConfig) -> int:
    """Bytes one point needs, roughly (for packing windows and the CPU memory guard)."""
    width = 2 if config.layer_precision != "fp32" else 4
    a = sig.arguments
    if sig.op == OPTIMIZER:
        elements = sum(_numel(s) for s in a["shapes"])
        return elements * 4 * 5  # weights, gradients, two state tensors, temporaries
    if sig.op in ("cat", "stack"):
        elements = 2 * sum(_numel(s) for s in a["shapes"])
    elif sig.op == "bmm":
        k, n, m = sig.shape
        elements = k * (n * m + m * a["out"] + n * a["out"])
    else:
        rows = max(sig.shape[:1] or (1,)) if sig.op == "linear" else 1
        elements = _numel(sig.shape) * a.get("fold", 1) + max(a.get("out", 0), 0) * rows
    return (1 if a.get("step") else batch_size) * elements * width * _COPIES


def prepare(sig: OpSignature, batch_size: int, config: TrainConfig, device: torch.device) -> Prepared:
    """The op's phases at one batch size, each run once (warm-up, not a sample).

    An op no gradient flows through (NO_BACKWARD, or grad=False) is timed as one phase, "step", stored as its
    forward time with a backward of 0 (gpu_agent/store.py), as the optimizer step is.
    """
    if sig.op == OPTIMIZER:
        phases = {"step": _optimizer_step(sig, config, device)}
    else:
        a = sig.arguments
        grad = sig.op not in NO_BACKWARD and a.get("grad", True)
        fn, inputs = _op(sig, _Make(batch_size, _dtype(sig, config), device, config.channels_last, grad))
        if not grad:
            phases = {"step": fn}
        else:
            out = fn()
            outs = list(out) if isinstance(out, tuple | list) else [out]
            grads = [torch.randn_like(o) for o in outs]

            def backward() -> object:
                return torch.autograd.grad(outs, inputs, grads, retain_graph=True)

            phases = {"forward": fn, "backward": backward}
    for phase in phases.values():
        phase()
    sync(device)
    return Prepared(phases=phases)


def _dtype(sig: OpSignature, config: TrainConfig) -> torch.dtype:
    # Per-step ops work on parameters and buffers, which stay fp32 under autocast (but its matmuls do not).
    named = sig.arguments.get("dtype")
    if named is not None:
        return getattr(torch, named)  # type: ignore[no-any-return]
    if sig.op in FP32_UNDER_AUTOCAST or (sig.arguments.get("step") and sig.op not in ("linear", "bmm")):
        return torch.float32
    return DTYPES[config.layer_precision]


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


@dataclass(frozen=True)
class _Make:
    """Builds an op's inputs at one batch size: random, on the device, requiring grad where a gradient flows."""

    bs: int
    dtype: torch.dtype
    device: torch.device
    channels_last: bool
    grad: bool

    def __call__(self, *shape: int) -> torch.Tensor:
        """A plain tensor of this shape."""
        if not self.dtype.is_floating_point:
            return torch.randint(0, 2, shape, device=self.device).to(self.dtype)
        t = torch.randn(*shape, dtype=self.dtype, device=self.device)
        if self.channels_last and t.dim() == 4:
            t = t.contiguous(memory_format=torch.channels_last)
        return t.requires_grad_(self.grad)

    def input(self, sig: OpSignature) -> tuple[torch.Tensor, torch.Tensor]:
        """The op's input as its signature describes it (batch, fold, step, layout), and the leaf it is a view of."""
        a = sig.arguments
        lead = () if a.get("step") else (self.bs * a.get("fold", 1),)
        full = (*lead, *sig.shape)
        order = a.get("layout")
        if order is None:
            leaf = self(*full)
            return leaf, leaf
        leaf = torch.randn(*[full[d] for d in order], dtype=self.dtype, device=self.device).requires_grad_(self.grad)
        return leaf.permute(sorted(range(len(order)), key=order.__getitem__)), leaf


def _op(sig: OpSignature, make: _Make) -> tuple[Callable[[], Any], list[torch.Tensor]]:
    """The op as a closure over fresh inputs, and those of them a gradient flows to."""
    a, op = sig.arguments, sig.op
    n = 1 if a.get("step") else make.bs  # samples of an op described by its size
    if op in ("cat", "stack"):
        parts = [make(*(() if a.get("step") else (n,)), *s) for s in a["shapes"]]
        join = torch.cat if op == "cat" else torch.stack
        return (lambda: join(parts, a["dim"])), parts
    if op == "linear":
        rows, width = sig.shape
        x, w = make(n * rows, width), make(a["out"], width)
        b = make(a["out"]) if a["bias"] else None
        return (lambda: F.linear(x, w, b)), [t for t in (x, w, b) if t is not None]
    if op == "bmm":
        k, rows, inner = sig.shape
        x, y = make(n * k, rows, inner), make(n * k, inner, a["out"])
        return (lambda: torch.bmm(x, y)), [x, y]
    if op in ("add", "mul", "compare"):
        return _binary(op, a, sig.shape[0], n, make)
    if op == "cross_entropy":
        logits = make(n, *sig.shape)
        target = torch.randint(0, sig.shape[0], (n,), device=make.device)
        return (lambda: F.cross_entropy(logits, target)), [logits]
    if op in _SIZED:
        return _SIZED[op](a, sig.shape, n, make)
    x, leaf = make.input(sig)
    if op == "batch_norm":
        c = x.shape[1]
        # Under autocast a BatchNorm's weight, bias and running statistics stay fp32 while its input is 16-bit, and
        # PyTorch picks its kernels by that mix (cuDNN for fp16 input with fp32 weights, its own for all-fp16 or bf16).
        params = replace(make, dtype=torch.float32) if x.dtype in (torch.float16, torch.bfloat16) else make
        w, b = params(c), params(c)
        mean, var = torch.zeros(c, dtype=w.dtype, device=x.device), torch.ones(c, dtype=w.dtype, device=x.device)
        return (lambda: F.batch_norm(x, mean, var, w, b, training=True)), [leaf, w, b]
    if op in ("layer_norm", "group_norm"):
        affine = a["normalized"] if op == "layer_norm" else [x.shape[1]]
        w, b = make(*affine), make(*affine)
        if op == "layer_norm":
            return (lambda: F.layer_norm(x, a["normalized"], w, b)), [leaf, w, b]
        return (lambda: F.group_norm(x, a["groups"], w, b)), [leaf, w, b]
    if op == "copy":
        return x.clone, [leaf]
    if op == "index":
        index = torch.randint(0, x.shape[a["dim"]], a["index"], device=make.device)
        at = (slice(None),) * a["dim"] + (index,)
        return (lambda: x[at]), [leaf]
    return _unary(op, a, x), [leaf]


def _binary(
    op: str, a: dict[str, Any], numel: int, n: int, make: _Make
) -> tuple[Callable[[], torch.Tensor], list[torch.Tensor]]:
    """add, mul and comparisons with a scalar, a same-sized tensor, or one broadcast per sample or over all."""
    other = a["other"]
    fn = _BINARY[op]
    if other == 0:
        x = make(n, numel)
        scalar = 0.5 if x.is_floating_point() else 1  # batch norm's counter: an int64 += 1
        return (lambda: fn(x, scalar)), [x]
    rows = n if a["batched"] else 1
    x, y = make(n, other, max(numel // other, 1)), make(rows, other, 1 if other < numel else max(numel // other, 1))
    return (lambda: fn(x, y)), [x, y]


_BINARY: dict[str, Callable[..., torch.Tensor]] = {"add": torch.add, "mul": torch.mul, "compare": torch.eq}
Sized = Callable[[dict[str, Any], tuple[int, ...], int, _Make], tuple[Callable[[], Any], list[torch.Tensor]]]


def _sized() -> dict[str, Sized]:
    """Ops described by their size per sample (n samples): views measured for their backward, fills, masks."""

    def accumulate(a: dict[str, Any], shape: tuple[int, ...], n: int, make: _Make) -> Any:
        x, y = make(n, *shape), make(n, *shape)
        return (lambda: x + y), []

    def fill(a: dict[str, Any], shape: tuple[int, ...], n: int, make: _Make) -> Any:
        t = make(n, *shape)
        return (lambda: t.fill_(1)), []

    def bernoulli(a: dict[str, Any], shape: tuple[int, ...], n: int, make: _Make) -> Any:
        t = make(n, *shape)
        return (lambda: t.bernoulli_(0.5)), []

    def masked_fill(a: dict[str, Any], shape: tuple[int, ...], n: int, make: _Make) -> Any:
        x = make(n, *shape)
        mask = torch.rand(n, *shape, device=make.device) < 0.5
        return (lambda: x.masked_fill(mask, -100.0)), [x]

    def select(a: dict[str, Any], shape: tuple[int, ...], n: int, make: _Make) -> Any:
        x = make(shape[0], n * shape[1])
        return (lambda: x.select(0, 0)), [x]

    def narrow(a: dict[str, Any], shape: tuple[int, ...], n: int, make: _Make) -> Any:
        x = make(n, *shape)
        return (lambda: x.narrow(1, 0, a["out"])), [x]

    def split(a: dict[str, Any], shape: tuple[int, ...], n: int, make: _Make) -> Any:
        x = make(n, *shape)
        return (lambda: x.split(a["parts"], dim=1)), [x]

    def expand(a: dict[str, Any], shape: tuple[int, ...], n: int, make: _Make) -> Any:
        (numel,) = shape
        times = max(a["out"] // max(numel, 1), 1)
        if a.get("step"):
            p = make(1, numel)
            return (lambda: p.expand(times, numel)), [p]
        p = make(1, 1, numel) if a["shared"] else make(n, 1, numel)
        return (lambda: p.expand(n, times, numel)), [p]

    return {
        "accumulate": accumulate, "fill": fill, "bernoulli": bernoulli, "masked_fill": masked_fill,
        "select": select, "slice": narrow, "split": split, "expand": expand,
    }  # fmt: skip


_SIZED = _sized()


def _unary(op: str, a: dict[str, Any], x: torch.Tensor) -> Callable[[], torch.Tensor]:
    """Activations, pooling, reductions, softmax, dropout, roll, pad, norms: one input."""
    table: dict[str, Callable[[], torch.Tensor]] = {
        "relu": lambda: F.relu(x),
        "gelu": lambda: F.gelu(x),
        "silu": lambda: F.silu(x),
        "hardswish": lambda: F.hardswish(x),
        "hardsigmoid": lambda: F.hardsigmoid(x),
        "sigmoid": lambda: torch.sigmoid(x),
        "tanh": lambda: torch.tanh(x),
        "exp": lambda: torch.exp(x),
        "hardtanh": lambda: F.hardtanh(x, a.get("min", -1.0), a.get("max", 1.0)),
        "clamp": lambda: torch.clamp(x, a.get("min"), a.get("max")),
        "dropout": lambda: F.dropout(x, a["p"], training=True),
        "softmax": lambda: torch.softmax(x, a["dim"]),
        "mean": lambda: x.mean(a["dims"], keepdim=a["keepdim"]) if a["dims"] else x.mean(),
        "adaptive_avg_pool2d": lambda: F.adaptive_avg_pool2d(x, a["output"]),
        "adaptive_max_pool2d": lambda: F.adaptive_max_pool2d(x, a["output"]),
        "roll": lambda: torch.roll(x, a["shifts"], a["dims"]),
        "pad": lambda: F.pad(x, a["pad"], value=a["value"]),
        "norm": lambda: torch.linalg.vector_norm(x, a["ord"], a["dims"] or None, a["keepdim"]),
    }
    if op == "max_pool2d":
        return lambda: F.max_pool2d(x, a["kernel"], a["stride"], a["padding"], a["dilation"], ceil_mode=a["ceil"])
    if op == "avg_pool2d":
        return lambda: F.avg_pool2d(
            x, a["kernel"], a["stride"], a["padding"], a["ceil"], a["count_include_pad"], a["divisor"]
        )
    if op not in table:
        raise NotImplementedError(f"no benchmark for op {op!r}")
    return table[op]


def _optimizer_step(sig: OpSignature, config: TrainConfig, device: torch.device) -> Callable[[], object]:
    """opt.step() and zero_grad over parameters of the CNN's shapes, gradients put back each time."""
    params = [torch.zeros(*s, device=device, requires_grad=True) for s in sig.arguments["shapes"]]
    grads = [torch.randn_like(p) * 1e-3 for p in params]
    opt = step_bench.make_optimizer(params, config)
    scaler = None
    if config.precision == "amp_fp16":
        # Scale 1 that never grows: unscaling leaves the reused gradients as they are (no denormals creep in).
        scaler = torch.amp.GradScaler(device.type, init_scale=1.0, growth_interval=2**30)
        scaler.scale(torch.ones((), device=device))  # the scaler sets itself up on its first scale()

    def step() -> None:
        # The gradients backward left: set, not copied, so no copy is timed that training does not do.
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        if scaler is None:
            opt.step()
        else:
            scaler.step(opt)
            scaler.update()
        opt.zero_grad(set_to_none=True)

    return step
