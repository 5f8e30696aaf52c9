"""Whole training step = convs + other operators + optimizer, against the CPU time PyTorch eager needs to issue them.

PyTorch eager runs the CPU ahead of the GPU, so a step takes max(GPU time, CPU dispatch time):
small CNNs at small batches on fast GPUs are launch-bound and stop following their FLOPs.
Constants live in model.json ("step"); where each comes from is said in worker/reference/fit.py.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from shared.training import TrainConfig
from worker.reference.specs import GpuSpecs, element_bytes, simt_tflops, tensor_tflops

MEMORY_KINDS = ("batch_norm", "activation", "pooling", "elementwise", "concat", "softmax_loss", "other")
# Optimizer states per parameter (fp32, each read and written once by PyTorch's foreach step).
OPTIMIZER_STATES = {"sgd": 0, "sgd+momentum": 1, "adam": 2, "adamw": 2}
# fp32 tensors streamed per parameter besides the states: read the parameter and its gradient, write the parameter.
PARAM_GRAD_TENSORS = 3.0
# Weight decay's extra foreach pass: SGD and Adam add decay x parameter to the gradient (read both, write the
# gradient); AdamW scales the parameter (read, write).
WEIGHT_DECAY_TENSORS = {"sgd": 3.0, "adam": 3.0, "adamw": 2.0}
# GradScaler (amp_fp16 only): unscale and inf-check read and write every fp32 gradient once.
GRAD_SCALER_TENSORS = 2.0
# Autocast keeps fp32 master weights: each step casts them to 16 bits for the forward (read 4 + write 2 bytes)
# and the 16-bit weight gradients back to fp32 (read 2 + write 4): 12 bytes = three fp32 tensors per parameter.
AMP_CAST_TENSORS = 3.0
# The GradScaler's CPU work: unscale, the inf check, the scale update and the skipped-step test (ops).
GRAD_SCALER_OPS = 4


def kernel_precision(precision: str) -> str:
    """The precision convs and other kernels run in: 'fp32' (fp32, tf32) or 'amp_fp16' (amp_fp16, amp_bf16).

    bf16 is costed as fp16: every GPU with bf16 (Ampere and later) has the same dense bf16 and fp16 tensor
    rates, and both move 2 bytes per element.
    """
    if precision in ("fp32", "tf32"):
        return "fp32"
    if precision in ("amp_fp16", "amp_bf16", "fp16"):
        return "amp_fp16"
    raise ValueError(f"precision must be one of fp32, tf32, amp_fp16, amp_bf16; got {precision!r}")


def linear_tflops(gpu: GpuSpecs, precision: str) -> float:
    """Peak of a linear layer's matmuls: fp32 on CUDA cores (PyTorch's default allow_tf32=False for matmuls),
    TF32 tensor cores for tf32 where the GPU has them, FP16/BF16 tensor cores under autocast."""
    if precision == "fp32":
        return simt_tflops(gpu, "fp32")
    kernel = kernel_precision(precision)
    return tensor_tflops(gpu, kernel) or simt_tflops(gpu, kernel)


def optimizer_tensors(config: TrainConfig) -> float:
    """fp32 tensors streamed per parameter by one step's parameter work (optimizer, scaler, autocast casts)."""
    momentum = config.optimizer == "sgd" and config.momentum > 0
    tensors = PARAM_GRAD_TENSORS + 2.0 * OPTIMIZER_STATES["sgd+momentum" if momentum else config.optimizer]
    if config.weight_decay:
        tensors += WEIGHT_DECAY_TENSORS[config.optimizer]
    if config.precision == "amp_fp16":
        tensors += GRAD_SCALER_TENSORS
    if kernel_precision(config.precision) == "amp_fp16":
        tensors += AMP_CAST_TENSORS
    return tensors


@dataclass(frozen=True)
class StepEstimate:
    """One predicted training step at one batch size (all times in ms)."""

    batch_size: int
    step_ms: float
    conv_forward_ms: float
    conv_backward_data_ms: float
    conv_backward_weight_ms: float
    other_ms: float  # non-conv operators, forward and backward
    optimizer_ms: float
    overhead_ms: float  # launch / framework time not hidden behind GPU work
    launch_bound: bool


def forward_ops(workload: Mapping[str, Any]) -> float:
    """Operators (≈ kernels) one forward pass launches, convs included."""
    return float(sum(float(v.get("count", 0)) for v in workload.get("ops", {}).values()))


def other_ms(
    workload: Mapping[str, Any], batch: np.ndarray, gpu: GpuSpecs, precision: str, c: Mapping[str, float]
) -> np.ndarray:
    """Forward + backward time of every non-conv operator, shape (B,); autocast halves their activation bytes."""
    ops = workload.get("ops", {})
    scale = element_bytes(kernel_precision(precision)) / 4.0  # the workload is read in fp32
    bw = gpu.mem_bandwidth_gbs * 1e9 * c["memory_efficiency"]
    total = np.zeros_like(batch, dtype=float)
    for kind in MEMORY_KINDS:
        op = ops.get(kind)
        if not op:
            continue
        nbytes = float(op["bytes"]) * batch * scale
        # forward moves the counted bytes, backward about twice them; each kernel costs at least the floor
        kernels = float(op["count"]) * (1 + c["backward_kernels_per_op"])
        total += nbytes * (1 + c["backward_bytes_ratio"]) / bw * 1e3 + kernels * c["kernel_floor_ms"]
    linear = ops.get("linear")
    if linear:
        peak = linear_tflops(gpu, precision) * 1e12 * c["linear_efficiency"]
        flops_ps = float(linear["flops"])
        flops = flops_ps * batch * 3  # backward = data + weight gradients, each as much as forward
        # The workload's per-sample bytes hold half the fp32 weights (read at batch 2); weights = FLOPs / 2
        # per sample, so activations are bytes - FLOPs per sample, and the weights are read once per pass.
        activations = max(float(linear["bytes"]) - flops_ps, 0.0) * batch * scale
        nbytes = (activations + 2.0 * flops_ps) * 3
        kernels = float(linear["count"]) * 3
        total += np.maximum(flops / peak, nbytes / bw) * 1e3 + kernels * c["kernel_floor_ms"]
    return total


def optimizer_ms(workload: Mapping[str, Any], gpu: GpuSpecs, config: TrainConfig, c: Mapping[str, float]) -> float:
    """GPU time of the parameter work: fp32 master weights, gradients and states streamed (foreach kernels)."""
    nbytes = float(workload.get("parameters", 0)) * 4.0 * optimizer_tensors(config)
    bw = gpu.mem_bandwidth_gbs * 1e9 * c["memory_efficiency"]
    return nbytes / bw * 1e3 + c["optimizer_kernels"] * c["kernel_floor_ms"]


def cpu_ms(workload: Mapping[str, Any], config: TrainConfig, c: Mapping[str, float]) -> float:
    """CPU time PyTorch eager needs to dispatch one step (forward ops, autograd nodes, optimizer, per-step fixed)."""
    n = forward_ops(workload)
    per_op = c["cpu_forward_op_ms"] + c["cpu_backward_op_ms"]
    if kernel_precision(config.precision) == "amp_fp16":
        per_op *= c["amp_cpu_factor"]  # autocast adds a cast check (and sometimes a cast kernel) per op
    tensors = float(workload.get("parameter_tensors", 0))
    opt = c["cpu_sgd_per_tensor_ms"] if config.optimizer == "sgd" else c["cpu_adam_per_tensor_ms"]
    scaler = GRAD_SCALER_OPS * c["cpu_forward_op_ms"] if config.precision == "amp_fp16" else 0.0
    return n * per_op + tensors * opt + scaler + c["cpu_step_ms"]


@dataclass(frozen=True)
class StepArrays:
    """Predicted training steps at several batch sizes, one array entry per batch size (times in ms)."""

    batch_size: np.ndarray  # (B,) int
    step_ms: np.ndarray
    conv_ms: np.ndarray  # (B, 3): forward, backward-data, backward-weight
    other_ms: np.ndarray
    optimizer_ms: float
    overhead_ms: np.ndarray
    launch_bound: np.ndarray  # (B,) bool

    def estimates(self) -> list[StepEstimate]:
        """One StepEstimate per batch size."""
        conv = self.conv_ms
        return [
            StepEstimate(
                batch_size=int(b),
                step_ms=float(self.step_ms[i]),
                conv_forward_ms=float(conv[i, 0]),
                conv_backward_data_ms=float(conv[i, 1]),
                conv_backward_weight_ms=float(conv[i, 2]),
                other_ms=float(self.other_ms[i]),
                optimizer_ms=float(self.optimizer_ms),
                overhead_ms=float(self.overhead_ms[i]),
                launch_bound=bool(self.launch_bound[i]),
            )
            for i, b in enumerate(self.batch_size)
        ]


def compose_arrays(
    conv: np.ndarray,
    workload: Mapping[str, Any],
    batch: np.ndarray,
    gpu: GpuSpecs,
    config: TrainConfig,
    c: Mapping[str, float],
) -> StepArrays:
    """Steps from summed (calibrated) conv phase times conv (B, 3) and the workload."""
    amp = kernel_precision(config.precision) == "amp_fp16"
    scale = c.get("scale_other_amp" if amp else "scale_other_fp32", 1.0)
    other = other_ms(workload, batch, gpu, config.precision, c) * scale
    opt = optimizer_ms(workload, gpu, config, c) * scale
    gpu_ms = conv.sum(axis=1) + other + opt
    cpu = cpu_ms(workload, config, c) * c.get("scale_cpu", 1.0)
    step = np.maximum(gpu_ms, cpu) + c["step_sync_ms"]
    return StepArrays(batch.astype(int), step, conv, other, opt, step - gpu_ms, cpu > gpu_ms)


def compose(
    conv: np.ndarray,
    workload: Mapping[str, Any],
    batch: np.ndarray,
    gpu: GpuSpecs,
    config: TrainConfig,
    c: Mapping[str, float],
) -> list[StepEstimate]:
    """Step estimates from summed (calibrated) conv phase times conv (B, 3) and the workload."""
    return compose_arrays(conv, workload, batch, gpu, config, c).estimates()
