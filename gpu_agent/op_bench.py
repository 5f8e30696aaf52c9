"""Forward and backward time of one non-conv operator, or the optimizer step of a CNN's parameters.

An operator is rebuilt from its signature (shared/cnn/op_signatures.py) at each batch size with inputs that
require grad, as in training: "forward" is the call (autograd recording it), "backward" the gradients of
its inputs from a fixed output gradient (the graph kept, so it can run again). The optimizer step is
PyTorch's default implementation (foreach on CUDA) over gradients of the CNN's parameter shapes, with
zero_grad as a training loop calls it; under amp_fp16 through a GradScaler (unscale, inf check, step).
"""

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812

from gpu_agent import step_bench, windows
from gpu_agent.layer_bench import DTYPES
from gpu_agent.timing import Policy, sync
from gpu_agent.windows import Outcome, PointSetup, Prepared
from shared.cnn.op_signatures import FP32_UNDER_AUTOCAST, OPTIMIZER, OpSignature
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
    if sig.op == OPTIMIZER:
        elements = sum(_numel(s) for s in sig.arguments["shapes"])
        return elements * 4 * 5  # weights, gradients, two state tensors, temporaries
    if sig.op in ("cat", "stack"):
        elements = 2 * sum(_numel(s) for s in sig.arguments["shapes"])
    else:
        elements = _numel(sig.shape) + sig.arguments.get("out", 0) * max(sig.shape[:1] or (1,))
    return batch_size * elements * width * _COPIES


def prepare(sig: OpSignature, batch_size: int, config: TrainConfig, device: torch.device) -> Prepared:
    """The op's phases at one batch size, each run once (warm-up, not a sample)."""
    if sig.op == OPTIMIZER:
        phases = {"step": _optimizer_step(sig, config, device)}
    else:
        dtype = torch.float32 if sig.op in FP32_UNDER_AUTOCAST else DTYPES[config.layer_precision]
        fn, inputs = _op(sig, batch_size, dtype, device, config.channels_last)
        out = fn()
        grad_out = torch.randn_like(out)

        def forward() -> object:
            return fn()

        def backward() -> object:
            return torch.autograd.grad(out, inputs, grad_out, retain_graph=True)

        phases = {"forward": forward, "backward": backward}
    for phase in phases.values():
        phase()
    sync(device)
    return Prepared(phases=phases)


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _tensor(shape: Sequence[int], dtype: torch.dtype, device: torch.device, channels_last: bool) -> torch.Tensor:
    t = torch.randn(*shape, dtype=dtype, device=device)
    if channels_last and t.dim() == 4:
        t = t.contiguous(memory_format=torch.channels_last)
    return t.requires_grad_()


def _op(
    sig: OpSignature, bs: int, dtype: torch.dtype, device: torch.device, channels_last: bool
) -> tuple[Callable[[], torch.Tensor], list[torch.Tensor]]:
    """The op as a closure over fresh inputs that require grad, and those inputs."""
    a = sig.arguments
    op = sig.op

    def new(*shape: int) -> torch.Tensor:
        return _tensor(shape, dtype, device, channels_last)

    if op in ("cat", "stack"):
        parts = [new(bs, *s) for s in a["shapes"]]
        join = torch.cat if op == "cat" else torch.stack
        return (lambda: join(parts, a["dim"])), parts
    if op == "linear":
        rows, width = sig.shape
        x, w = new(bs * rows, width), new(a["out"], width)
        b = new(a["out"]) if a["bias"] else None
        return (lambda: F.linear(x, w, b)), [t for t in (x, w, b) if t is not None]
    if op in ("add", "mul"):
        (numel,) = sig.shape
        other = a["other"]
        if other == 0:
            x = new(bs, numel)
            return (lambda: x + 0.5 if op == "add" else x * 0.5), [x]
        rows = bs if a["batched"] else 1
        x, y = new(bs, other, max(numel // other, 1)), new(rows, other, 1 if other < numel else max(numel // other, 1))
        return (lambda: x + y if op == "add" else x * y), [x, y]
    if op == "cross_entropy":
        logits = new(bs, *sig.shape)
        target = torch.randint(0, sig.shape[0], (bs,), device=device)
        return (lambda: F.cross_entropy(logits, target)), [logits]
    x = new(bs, *sig.shape)
    if op == "batch_norm":
        c = sig.shape[0]
        w, b = new(c), new(c)
        mean, var = torch.zeros(c, dtype=dtype, device=device), torch.ones(c, dtype=dtype, device=device)
        return (lambda: F.batch_norm(x, mean, var, w, b, training=True)), [x, w, b]
    if op in ("layer_norm", "group_norm"):
        affine = a["normalized"] if op == "layer_norm" else [sig.shape[0]]
        w, b = new(*affine), new(*affine)
        if op == "layer_norm":
            return (lambda: F.layer_norm(x, a["normalized"], w, b)), [x, w, b]
        return (lambda: F.group_norm(x, a["groups"], w, b)), [x, w, b]
    return _unary(op, a, x), [x]


def _unary(op: str, a: dict[str, Any], x: torch.Tensor) -> Callable[[], torch.Tensor]:
    """Activations, pooling, reductions, softmax, dropout: one input."""
    table: dict[str, Callable[[], torch.Tensor]] = {
        "relu": lambda: F.relu(x),
        "gelu": lambda: F.gelu(x),
        "silu": lambda: F.silu(x),
        "hardswish": lambda: F.hardswish(x),
        "hardsigmoid": lambda: F.hardsigmoid(x),
        "sigmoid": lambda: torch.sigmoid(x),
        "tanh": lambda: torch.tanh(x),
        "hardtanh": lambda: F.hardtanh(x, a.get("min", -1.0), a.get("max", 1.0)),
        "dropout": lambda: F.dropout(x, a["p"], training=True),
        "softmax": lambda: torch.softmax(x, a["dim"]),
        "mean": lambda: x.mean(a["dims"], keepdim=a["keepdim"]) if a["dims"] else x.mean(),
        "adaptive_avg_pool2d": lambda: F.adaptive_avg_pool2d(x, a["output"]),
        "adaptive_max_pool2d": lambda: F.adaptive_max_pool2d(x, a["output"]),
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
