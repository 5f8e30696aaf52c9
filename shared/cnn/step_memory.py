"""Peak memory of one training step of a CNN: a model in bytes, from the CNN's workload (shared/cnn/workload.py).

Pure arithmetic (no torch), so the worker's assembly, the reference path and the agent's guard share it.
A step holds, at its peak:
  weights            parameters × 4 bytes (AMP keeps fp32 master weights, plus a 16-bit copy autocast
                     caches for the forward and backward)
  gradients          parameters × 4 bytes
  optimizer state    0 (SGD), 1 (SGD with momentum) or 2 (Adam, AdamW) parameter-sized tensors
  then the larger of
  activations        what autograd saves for backward (measured per sample on the meta device at
                     extraction), × batch size × SAVED_SCALE (gradients of activations in flight);
                     AMP stores most of them in 16 bits (× AMP_ACTIVATION_SCALE)
  optimizer step     its temporaries: PyTorch's default on GPUs is the foreach implementation, which
                     makes whole parameter-list temporaries (Adam's sqrt of the second moment, weight
                     decay's copy of the gradients); on CPUs the per-tensor one, two of the largest tensor
  on a GPU, also     a bounded cuDNN/cuBLAS workspace and allocator reserve, the CUDA context, and the
                     caching allocator's rounding (× GPU_SCALE)
The constants are fitted by bench/memory.py on measured peaks (docs/PERFORMANCE.md, "Memory").
"""

from dataclasses import dataclass, replace

from shared.cnn.workload import WorkloadJson

GIB = 2**30
MIB = 2**20
FP32 = 4
OPTIMIZERS = ("sgd", "sgd_momentum", "adam", "adamw")
PRECISIONS = ("fp32", "tf32", "amp_fp16", "amp_bf16")

# Bytes held at the peak per byte autograd saves: bench/memory.py, fitted on 40 CPU steps of 8 CNNs.
SAVED_SCALE = 0.94
# Saved bytes per byte of every op output, for CNNs read without autograd (ONNX, layer lists): same run.
SAVED_PER_OUTPUT = 0.67
# Activations under autocast ÷ in fp32: bench/memory.py, amp_bf16 on CPU (autocast saves 16-bit conv outputs).
AMP_ACTIVATION_SCALE = 0.5
# Largest held-out error of the CPU model over bench/memory.py's 40 steps (docs/PERFORMANCE.md, "Memory"): a
# measured CPU peak farther than this from the model shows the model wrong, not merely imprecise.
CPU_HELD_OUT_MAX_ERROR = 0.188
# GPU: the caching allocator's rounding and the framework's other tensors (× the tensors above), and a
# fixed cuDNN/cuBLAS workspace and allocator reserve; fitted on CDECatapult's VGG-16 V100 SGD peaks.
GPU_SCALE = 1.07
GPU_WORKSPACE = 1.79e9
# The CUDA context and loaded kernels: nvidia-smi shows 781 MB for a process that only initialised CUDA
# with PyTorch (pytorch/pytorch#34323); it counts against the GPU's memory but is not in any allocator's peak.
CUDA_CONTEXT = 781e6


@dataclass(frozen=True)
class Peak:
    """A training step's peak memory, in bytes, by what holds it."""

    weights: float
    gradients: float
    optimizer_state: float
    activations: float
    optimizer_step: float  # temporaries of the optimizer step (the peak holds these or the activations)
    workspace: float
    overhead: float  # allocator rounding and, on a GPU, the CUDA context

    @property
    def total(self) -> float:
        """Peak bytes."""
        fixed = self.weights + self.gradients + self.optimizer_state + self.workspace + self.overhead
        return fixed + max(self.activations, self.optimizer_step)

    @property
    def gib(self) -> float:
        """Peak GiB."""
        return self.total / GIB


def optimizer_states(optimizer: str, momentum: float = 0.0) -> int:
    """Parameter-sized tensors the optimizer keeps between steps."""
    if optimizer in ("adam", "adamw"):
        return 2
    if optimizer == "sgd_momentum" or momentum > 0:
        return 1
    if optimizer == "sgd":
        return 0
    raise ValueError(f"unknown optimizer {optimizer!r}")


def saved_per_sample(workload: WorkloadJson) -> float | None:
    """Bytes autograd saves per sample in fp32: measured at extraction, else estimated from op outputs."""
    saved = workload.get("saved_bytes")
    if saved is not None:
        return float(saved)
    outputs = workload.get("activation_bytes")
    return None if outputs is None else float(outputs) * SAVED_PER_OUTPUT


def step_peak(
    workload: WorkloadJson,
    batch_size: int,
    *,
    optimizer: str = "sgd",
    momentum: float = 0.0,
    weight_decay: float = 0.0,
    precision: str = "fp32",
    gpu: bool = True,
    tensors_only: bool = False,
) -> Peak | None:
    """The modelled peak of one training step; None when the workload lacks parameters or activations.

    tensors_only: what the allocator's peak counter shows (torch.cuda.max_memory_allocated), without
    the CUDA context, the workspace reserve and the allocator's rounding.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}")
    params = workload.get("parameters")
    saved = saved_per_sample(workload)
    if not params or saved is None:
        return None
    weight_bytes = float(params) * FP32
    amp = precision.startswith("amp")
    activations = saved * batch_size * SAVED_SCALE * (AMP_ACTIVATION_SCALE if amp else 1.0)
    if amp:
        activations += float(params) * 2  # autocast's 16-bit copy of the weights, held through backward
    # Parameter-sized temporaries of one optimizer step.
    temps = (1 if optimizer in ("adam", "adamw") else 0) + (1 if weight_decay > 0 and optimizer != "adamw" else 0)
    largest = float(workload.get("largest_parameter") or params) * FP32
    step = temps * (weight_bytes if gpu else 2 * largest)
    peak = Peak(
        weights=weight_bytes,
        gradients=weight_bytes,
        optimizer_state=optimizer_states(optimizer, momentum) * weight_bytes,
        activations=activations,
        optimizer_step=step,
        workspace=0.0,
        overhead=0.0,
    )
    if not gpu or tensors_only:
        return peak
    return replace(peak, workspace=GPU_WORKSPACE, overhead=(GPU_SCALE - 1.0) * peak.total + CUDA_CONTEXT)


def max_batch_size(
    workload: WorkloadJson,
    memory_bytes: float,
    *,
    cap: int,
    optimizer: str = "sgd",
    momentum: float = 0.0,
    weight_decay: float = 0.0,
    precision: str = "fp32",
    gpu: bool = True,
) -> int | None:
    """The largest batch size (≤ cap) whose modelled peak fits in memory_bytes: 0 if none, None if unknown."""

    def fits(bs: int) -> bool:
        peak = step_peak(
            workload, bs, optimizer=optimizer, momentum=momentum, weight_decay=weight_decay,
            precision=precision, gpu=gpu,
        )  # fmt: skip
        return peak is not None and peak.total <= memory_bytes

    if step_peak(workload, 1, optimizer=optimizer, precision=precision, gpu=gpu) is None:
        return None
    if not fits(1):
        return 0
    lo, hi = 1, cap  # peak grows with the batch size: bisect for the boundary
    if fits(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
