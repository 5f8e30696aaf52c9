"""Whole training step = convs + other operators + optimizer, against the CPU time PyTorch eager needs to issue them.

PyTorch eager runs the CPU ahead of the GPU, so a step takes max(GPU time, CPU dispatch time):
small CNNs at small batches on fast GPUs are launch-bound and stop following their FLOPs.
Constants live in model.json ("step"); where each comes from is said in worker/reference/fit.py.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from worker.reference.specs import GpuSpecs, element_bytes, simt_tflops, tensor_tflops

MEMORY_KINDS = ("batch_norm", "activation", "pooling", "elementwise", "concat", "softmax_loss", "other")
# fp32 parameter, gradient and optimizer-state tensors read or written per parameter by one step
OPTIMIZER_TENSORS = {"sgd": 5.0, "adam": 7.0}


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
    """Forward + backward time of every non-conv operator, shape (B,)."""
    ops = workload.get("ops", {})
    scale = element_bytes(precision) / 4.0  # the workload is read in fp32
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
        peak = (tensor_tflops(gpu, precision) or simt_tflops(gpu, precision)) * 1e12 * c["linear_efficiency"]
        flops_ps = float(linear["flops"])
        flops = flops_ps * batch * 3  # backward = data + weight gradients, each as much as forward
        # The workload's per-sample bytes hold half the fp32 weights (read at batch 2); weights = FLOPs / 2
        # per sample, so activations are bytes - FLOPs per sample, and the weights are read once per pass.
        activations = max(float(linear["bytes"]) - flops_ps, 0.0) * batch * scale
        nbytes = (activations + 2.0 * flops_ps) * 3
        kernels = float(linear["count"]) * 3
        total += np.maximum(flops / peak, nbytes / bw) * 1e3 + kernels * c["kernel_floor_ms"]
    return total


def optimizer_ms(workload: Mapping[str, Any], gpu: GpuSpecs, optimizer: str, c: Mapping[str, float]) -> float:
    """GPU time of the optimizer step: fp32 parameters, gradients and states streamed once (foreach kernels)."""
    tensors = OPTIMIZER_TENSORS.get(optimizer.lower())
    if tensors is None:
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZER_TENSORS)}, got {optimizer!r}")
    nbytes = float(workload.get("parameters", 0)) * 4.0 * tensors
    bw = gpu.mem_bandwidth_gbs * 1e9 * c["memory_efficiency"]
    return nbytes / bw * 1e3 + c["optimizer_kernels"] * c["kernel_floor_ms"]


def cpu_ms(workload: Mapping[str, Any], optimizer: str, precision: str, c: Mapping[str, float]) -> float:
    """CPU time PyTorch eager needs to dispatch one step (forward ops, autograd nodes, optimizer, per-step fixed)."""
    n = forward_ops(workload)
    per_op = c["cpu_forward_op_ms"] + c["cpu_backward_op_ms"]
    if precision == "amp_fp16":
        per_op *= c["amp_cpu_factor"]  # autocast adds a cast check (and sometimes a cast kernel) per op
    tensors = float(workload.get("parameter_tensors", 0))
    opt = c["cpu_adam_per_tensor_ms"] if optimizer.lower() == "adam" else c["cpu_sgd_per_tensor_ms"]
    return n * per_op + tensors * opt + c["cpu_step_ms"]


def compose(
    conv: np.ndarray,
    workload: Mapping[str, Any],
    batch: np.ndarray,
    gpu: GpuSpecs,
    optimizer: str,
    precision: str,
    c: Mapping[str, float],
) -> list[StepEstimate]:
    """Step estimates from summed (calibrated) conv phase times conv (B, 3) and the workload."""
    scale = c.get("scale_other_amp" if precision == "amp_fp16" else "scale_other_fp32", 1.0)
    other = other_ms(workload, batch, gpu, precision, c) * scale
    opt = optimizer_ms(workload, gpu, optimizer, c) * scale
    gpu_ms = conv.sum(axis=1) + other + opt
    cpu = cpu_ms(workload, optimizer, precision, c) * c.get("scale_cpu", 1.0)
    step = np.maximum(gpu_ms, cpu) + c["step_sync_ms"]
    out = []
    for i, b in enumerate(batch):
        out.append(
            StepEstimate(
                batch_size=int(b),
                step_ms=float(step[i]),
                conv_forward_ms=float(conv[i, 0]),
                conv_backward_data_ms=float(conv[i, 1]),
                conv_backward_weight_ms=float(conv[i, 2]),
                other_ms=float(other[i]),
                optimizer_ms=float(opt),
                overhead_ms=float(step[i] - gpu_ms[i]),
                launch_bound=bool(cpu > gpu_ms[i]),
            )
        )
    return out
