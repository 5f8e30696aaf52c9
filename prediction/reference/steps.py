"""Whole training step = device work (convs, other operators, optimizer) against the host's dispatch of it.

PyTorch eager runs the host ahead of the GPU: a step takes about max(host, device), smoothed where the two are
close (parts of the step are host-bound, others device-bound). The host dispatches every kernel of the forward
pass, its autograd nodes and the optimizer's tensors; a fast GPU exposes it (resnet50 on an H100 stays near
21 ms from batch 8 to 32). Uncalibrated parts come from the conv model and the workload; the multipliers and
host costs in model.json ("step") are fitted by prediction/reference/stepfit.py, per precision group.
"""

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from prediction.reference import op_passes
from prediction.reference.specs import GpuSpecs, element_bytes, simt_tflops, sm_cycles_per_s, tensor_tflops
from shared.cnn.workload import WorkloadJson
from shared.training import TrainConfig

MEMORY_KINDS = ("batch_norm", "activation", "pooling", "elementwise", "concat", "softmax_loss", "other")
# The workload's kind of every normalisation layer (batch, layer and group norms): costed by norm_ms, since autocast
# runs batch norms in 16 bits and layer and group norms in fp32.
NORM_KIND = "batch_norm"
# Kernels run in one of three ways: fp32 (TF32 convs on Ampere and later, PyTorch's default), or autocast to
# bf16 or fp16. bf16 and fp16 have the same peak rates, but not the same kernels (cuDNN picks differently;
# the H100 steps show it), so each is a group of its own; plain fp16 weights are costed as autocast fp16.
PRECISION_GROUPS = ("fp32", "bf16", "fp16")
# Device work, uncalibrated, each with a multiplier per precision group: dense convs on tensor cores, dense
# convs on CUDA cores, depthwise convs, memory-bound operators, linear layers, and a fixed time per
# conv call (cuDNN's kernels at small batches, and autocast's NCHW layout conversions around each conv).
DEVICE_PARTS = ("conv_tensor", "conv_simt", "conv_depthwise", "other", "linear", "conv_calls")
OPTIMIZER_KINDS = ("sgd", "sgd+momentum", "adam")
# Foreach passes over the parameter list one step dispatches (PyTorch's _multi_tensor_sgd and _multi_tensor_adam):
# SGD one add; momentum a mul and an add to the buffer, then the add; Adam the step count, lerp, mul, addcmul, sqrt,
# div, add and addcdiv. Weight decay adds one pass, GradScaler's unscale and inf check another. The host's work per
# tensor and pass is fitted (host_tensor_ms); more passes never cost less, so AdamW is never cheaper than SGD.
OPTIMIZER_PASSES = {"sgd": 1.0, "sgd+momentum": 3.0, "adam": 8.0}
# Optimizer states per parameter (fp32, each read and written once by PyTorch's foreach step).
OPTIMIZER_STATES = {"sgd": 0, "sgd+momentum": 1, "adam": 2}
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
# A layer or group norm under autocast: its 16-bit input cast to fp32 (read 2, write 4 bytes per element) and its fp32
# output cast back by the next layer (read 4, write 2), and the same for their gradients: 24 bytes per element, 3x the
# 8 (input and output in fp32) the workload counts, in four cast kernels.
AMP_NORM_CAST_PASSES = 3.0
AMP_NORM_CASTS = 4.0


def kernel_precision(precision: str) -> str:
    """The precision convs and other kernels run in: 'fp32' (fp32, tf32) or 'amp_fp16' (amp_fp16, amp_bf16).

    bf16 is costed as fp16 by the roofline: both move 2 bytes per element at the same tensor rate; what differs
    (the kernels chosen) is in the precision group's multipliers.
    """
    if precision in ("fp32", "tf32"):
        return "fp32"
    if precision in ("amp_fp16", "amp_bf16", "fp16"):
        return "amp_fp16"
    raise ValueError(f"precision must be one of fp32, tf32, amp_fp16, amp_bf16; got {precision!r}")


def precision_group(precision: str) -> str:
    """fp32 (fp32, tf32), bf16 (amp_bf16) or fp16 (amp_fp16, fp16): the key of the fitted multipliers."""
    kernel_precision(precision)  # validates
    return {"amp_bf16": "bf16", "amp_fp16": "fp16", "fp16": "fp16"}.get(precision, "fp32")


def band_group(precision: str) -> str:
    """fp32 (fp32, tf32) or amp (every 16-bit precision): what the public steps' held-out bands are kept per."""
    return "fp32" if precision_group(precision) == "fp32" else "amp"


def optimizer_kind(config: TrainConfig) -> str:
    """sgd, sgd+momentum or adam (Adam and AdamW dispatch the same foreach kernels)."""
    if config.optimizer == "sgd":
        return "sgd+momentum" if config.momentum > 0 else "sgd"
    return "adam"


def linear_tflops(gpu: GpuSpecs, precision: str) -> float:
    """Peak of a linear layer's matmuls: fp32 on CUDA cores (PyTorch's default allow_tf32=False for matmuls),
    TF32 tensor cores for tf32 where the GPU has them, FP16/BF16 tensor cores under autocast."""
    if precision == "fp32":
        return simt_tflops(gpu, "fp32")
    kernel = kernel_precision(precision)
    return tensor_tflops(gpu, kernel) or simt_tflops(gpu, kernel)


def optimizer_tensors(config: TrainConfig) -> float:
    """fp32 tensors streamed per parameter by one step's parameter work (optimizer, scaler, autocast casts)."""
    tensors = PARAM_GRAD_TENSORS + 2.0 * OPTIMIZER_STATES[optimizer_kind(config)]
    if config.weight_decay:
        tensors += WEIGHT_DECAY_TENSORS[config.optimizer]
    if config.precision == "amp_fp16":
        tensors += GRAD_SCALER_TENSORS
    if kernel_precision(config.precision) == "amp_fp16":
        tensors += AMP_CAST_TENSORS
    return tensors


def optimizer_passes(config: TrainConfig) -> float:
    """Foreach passes over the parameter list one step's optimizer (and GradScaler) dispatches."""
    return OPTIMIZER_PASSES[optimizer_kind(config)] + bool(config.weight_decay) + (config.precision == "amp_fp16")


def forward_ops(workload: WorkloadJson) -> float:
    """Operators (≈ kernels) one forward pass launches, convs included."""
    return float(sum(float(v.get("count", 0)) for v in workload.get("ops", {}).values()))


def kernels(workload: WorkloadJson) -> float:
    """Kernels one forward pass launches: counted at extraction where known, else its operators."""
    return float(workload.get("kernels") or forward_ops(workload))


def parameter_tensors(workload: WorkloadJson) -> float:
    """Parameter tensors the optimizer steps: counted where known, else two per conv, linear and norm layer."""
    known = workload.get("parameter_tensors")
    if known:
        return float(known)
    ops = workload.get("ops", {})
    return 2.0 * sum(float(ops[k]["count"]) for k in ("conv", "linear", "batch_norm") if k in ops)


def weight_casts(workload: WorkloadJson) -> float:
    """Weights autocast casts each step (one per conv and linear call)."""
    ops = workload.get("ops", {})
    return sum(float(ops[k]["count"]) for k in ("conv", "linear") if k in ops)


def other_ms(
    workload: WorkloadJson, batch: np.ndarray, gpu: GpuSpecs, precision: str, c: Mapping[str, float],
    channels_last: bool = False,
) -> np.ndarray:  # fmt: skip
    """Forward + backward time of the memory-bound operators, shape (B,); autocast halves their bytes (not those of
    the normalisation layers it runs in fp32: norm_ms)."""
    ops = workload.get("ops", {})
    total = np.zeros_like(batch, dtype=float)
    for kind in MEMORY_KINDS:
        op = ops.get(kind)
        if not op:
            continue
        if kind == NORM_KIND:
            total += norm_ms(workload, batch, gpu, precision, c, channels_last)
        else:
            total += _kind_ms(kind, float(op["bytes"]), float(op["count"]), batch, gpu, precision, c)
    return total


def _kind_ms(
    kind: str, nbytes: float, count: float, batch: np.ndarray, gpu: GpuSpecs, precision: str, c: Mapping[str, float]
) -> np.ndarray:
    """Forward + backward time of count operators of one kind over nbytes per sample (counted in fp32), shape (B,)."""
    n_kernels = count * (1 + c["backward_kernels_per_op"])  # each kernel costs at least the floor
    return nbytes * batch * _ms_per_byte(kind, precision, gpu, c) + n_kernels * c["kernel_floor_ms"]


def _ms_per_byte(kind: str, precision: str, gpu: GpuSpecs, c: Mapping[str, float]) -> float:
    """Forward + backward ms per byte a kind's operators count in fp32: the precision's bytes, passed over as often as
    its kernels were measured to, scaled to this GPU (op_passes.py: the precision group's own timings, or those it
    borrows), else forward once and backward twice, at the GPU's bandwidth."""
    measured = c.get(f"passes_{kind}_{precision_group(precision)}")
    passes = (
        1 + c["backward_bytes_ratio"] if measured is None
        else op_passes.effective_passes(kind, measured, gpu, c.get("passes_bytes_per_cycle"))
    )  # fmt: skip
    scale = element_bytes(kernel_precision(precision)) / 4.0  # the workload is read in fp32
    return scale * passes / (gpu.mem_bandwidth_gbs * 1e9 * c["memory_efficiency"]) * 1e3


def batch_norms(workload: WorkloadJson) -> tuple[float, float]:
    """(bytes, calls) per sample of the normalisation layers that are batch norms over 4-d maps: the workload's
    batch_norm_channels, their input and output in fp32 (every one of them where the workload does not list them)."""
    op = workload.get("ops", {}).get(NORM_KIND)
    if not op:
        return 0.0, 0.0
    listed = workload.get("batch_norm_channels")
    if listed is None:
        return float(op["bytes"]), float(op["count"])
    calls = float(sum(n for _, _, n in listed))
    if calls >= float(op["count"]):  # all of them: their per-channel vectors too
        return float(op["bytes"]), float(op["count"])
    nbytes = sum(2.0 * channels * spatial * 4.0 * n for channels, spatial, n in listed)
    return min(nbytes, float(op["bytes"])), calls


def norm_ms(
    workload: WorkloadJson, batch: np.ndarray, gpu: GpuSpecs, precision: str, c: Mapping[str, float],
    channels_last: bool = False,
) -> np.ndarray:  # fmt: skip
    """Forward + backward time of the normalisation layers, shape (B,): batch norms in the kernels' precision, and
    layer and group norms (the rest of the kind), which autocast runs in fp32 between casts of their input and
    output (torch.amp's fp32 list) and which so cost in bf16 what they cost in fp16."""
    op = workload.get("ops", {}).get(NORM_KIND)
    if not op:
        return np.zeros_like(batch, dtype=float)
    bn_bytes, bn_calls = batch_norms(workload)
    total = _kind_ms(NORM_KIND, bn_bytes, bn_calls, batch, gpu, precision, c)
    if not channels_last:
        per_byte = _ms_per_byte(NORM_KIND, precision, gpu, c)
        total += channel_bound_ms(workload, batch, gpu, per_byte, c, precision_group(precision))
    ln_bytes, ln_calls = float(op["bytes"]) - bn_bytes, float(op["count"]) - bn_calls
    if ln_calls <= 0:
        return total
    if kernel_precision(precision) == "fp32":
        return total + _kind_ms(NORM_KIND, ln_bytes, ln_calls, batch, gpu, precision, c)
    bw = gpu.mem_bandwidth_gbs * 1e9 * c["memory_efficiency"]
    casts = ln_bytes * batch * AMP_NORM_CAST_PASSES / bw * 1e3 + ln_calls * AMP_NORM_CASTS * c["kernel_floor_ms"]
    return total + _kind_ms(NORM_KIND, ln_bytes, ln_calls, batch, gpu, "fp32", c) + casts


def channel_bound_ms(
    workload: WorkloadJson, batch: np.ndarray, gpu: GpuSpecs, ms_per_byte: float, c: Mapping[str, float],
    group: str = "fp32",
) -> np.ndarray:  # fmt: skip
    """What batch norms over fewer channels than the GPU has SMs take beyond their bytes' time (ms_per_byte, fp32
    bytes as counted), shape (B,): each channel's statistics are one block's, so such a batch norm takes at least one
    channel's N x H x W elements one after another, at op_passes' cycles per element (the precision group's own where
    model.json has them: bf16's kernels are PyTorch's, fp16's cuDNN's as fp32's; NCHW only: NHWC kernels reduce many
    channels per block). With as many channels as SMs or more, every SM has work and bytes set the time (the
    H200 timed those faster than whole waves of channels one after another would take: 1.1-1.6x less)."""
    cycles = c.get(f"batch_norm_channel_cycles_{group}", c.get("batch_norm_channel_cycles"))
    norms = workload.get("batch_norm_channels") or []
    sms = gpu.sm_count or 0
    if not cycles or not norms or not sms:
        return np.zeros_like(batch, dtype=float)
    s_per_element = cycles / (sm_cycles_per_s(gpu) / sms)
    extra = np.zeros_like(batch, dtype=float)
    for channels, spatial, calls in norms:
        if channels >= sms:
            continue
        serial = spatial * batch * s_per_element * 1e3
        # the workload counts a batch norm's input and output: 2 x channels x spatial fp32 elements per sample
        extra += calls * np.maximum(0.0, serial - 2 * channels * spatial * 4 * batch * ms_per_byte)
    return extra


def linear_weights(workload: WorkloadJson) -> float:
    """Weights (elements) the linear layers read: FLOPs / 2 per sample, at most the network's parameters."""
    linear = workload.get("ops", {}).get("linear")
    weights = float(linear["flops"]) / 2.0 if linear else 0.0
    parameters = workload.get("parameters")
    return min(weights, float(parameters)) if parameters else weights


def linear_ms(
    workload: WorkloadJson, batch: np.ndarray, gpu: GpuSpecs, precision: str, c: Mapping[str, float]
) -> np.ndarray:
    """Forward + backward time of the linear layers (matmuls), shape (B,)."""
    linear = workload.get("ops", {}).get("linear")
    if not linear:
        return np.zeros_like(batch, dtype=float)
    scale = element_bytes(kernel_precision(precision)) / 4.0
    bw = gpu.mem_bandwidth_gbs * 1e9 * c["memory_efficiency"]
    peak = linear_tflops(gpu, precision) * 1e12 * c["linear_efficiency"]
    flops_ps = float(linear["flops"])
    flops = flops_ps * batch * 3  # backward = data + weight gradients, each as much as forward
    # The workload's per-sample bytes hold half the fp32 weights (read at batch 2), and the weights are read once per
    # pass. A classifier's linear multiplies one vector per sample: weights = FLOPs / 2 per sample. A linear applied
    # at every position (ConvNeXt's and the transformers' MLPs) or a matmul of two activations does those FLOPs over
    # fewer weights, and all the linear layers' weights are at most the network's parameters.
    weights = linear_weights(workload)
    activations = max(float(linear["bytes"]) - 2.0 * weights, 0.0) * batch * scale
    nbytes = (activations + 4.0 * weights) * 3
    return np.maximum(flops / peak, nbytes / bw) * 1e3 + float(linear["count"]) * 3 * c["kernel_floor_ms"]


def optimizer_ms(workload: WorkloadJson, gpu: GpuSpecs, config: TrainConfig, c: Mapping[str, float]) -> float:
    """GPU time of the parameter work: fp32 master weights, gradients and states streamed (foreach kernels)."""
    nbytes = float(workload.get("parameters") or 0) * 4.0 * optimizer_tensors(config)
    bw = gpu.mem_bandwidth_gbs * 1e9 * c["memory_efficiency"]
    return nbytes / bw * 1e3 + c["optimizer_kernels"] * c["kernel_floor_ms"]


@dataclass(frozen=True)
class StepParts:
    """A step's uncalibrated parts at several batch sizes: device parts (B, DEVICE_PARTS), optimizer, host counts."""

    device: np.ndarray  # (B, len(DEVICE_PARTS)) ms, conv_calls a count
    optimizer_ms: float
    kernels: float  # kernels the forward pass launches
    casts: float  # weights autocast casts (0 outside autocast)
    tensors: float  # parameter tensors the optimizer steps
    passes: float  # foreach passes over them (OPTIMIZER_PASSES, weight decay, GradScaler)
    group: str  # precision group
    optimizer: str  # optimizer kind
    synced: bool  # GradScaler: the host waits for the device before the optimizer step
    autotuned: bool = True  # cudnn.benchmark on: cuDNN times its algorithms once per shape and keeps the fastest
    nhwc: bool = False  # channels_last: activations (and convs' kernels) in NHWC


def step_parts(
    conv: np.ndarray, workload: WorkloadJson, batch: np.ndarray, gpu: GpuSpecs, config: TrainConfig,
    c: Mapping[str, float], autotuned: bool = True,
) -> StepParts:  # fmt: skip
    """Parts from the conv paths conv (B, 3 phases, 3 paths: tensor, CUDA cores, depthwise) and the workload."""
    precision = config.precision
    convs = float(workload.get("ops", {})["conv"]["count"]) if "conv" in workload.get("ops", {}) else 0.0
    device = np.column_stack(
        [
            conv[:, :, 0].sum(axis=1),
            conv[:, :, 1].sum(axis=1),
            conv[:, :, 2].sum(axis=1),
            other_ms(workload, batch, gpu, precision, c, config.channels_last),
            linear_ms(workload, batch, gpu, precision, c),
            np.full(len(batch), convs),
        ]
    )
    amp = kernel_precision(precision) == "amp_fp16"
    return StepParts(
        device, optimizer_ms(workload, gpu, config, c), kernels(workload), weight_casts(workload) if amp else 0.0,
        parameter_tensors(workload), optimizer_passes(config), precision_group(precision), optimizer_kind(config),
        precision == "amp_fp16", autotuned, config.channels_last,
    )  # fmt: skip


def device_scales(p: Mapping[str, float], group: str, autotuned: bool, nhwc: bool = False) -> np.ndarray:
    """The multipliers of DEVICE_PARTS for a precision group (1 where model.json has none), the convs' changed
    where cuDNN chooses its algorithms by timing them (cudnn.benchmark) instead of by its heuristics, and the parts'
    where activations are NHWC (channels_last: tensor-core convs lose the NCHW<->NHWC transposes cuDNN's kernels
    need, depthwise convs and batch norm get NHWC kernels; stepfit.NHWC_FITTED says which have one)."""
    scales = np.array([p.get(f"dev_{part}_{group}", 1.0) for part in DEVICE_PARTS])
    if autotuned:
        scales[:3] *= p.get(f"dev_conv_autotuned_{group}", p.get("dev_conv_autotuned", 1.0))
    if nhwc:
        scales *= np.array([p.get(f"nhwc_{part}_{group}", 1.0) for part in DEVICE_PARTS])
    return scales


def overlap(
    device: np.ndarray, optimizer: np.ndarray, host_pass: np.ndarray, host_opt: np.ndarray, synced: np.ndarray,
    q: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """(step, device, host) from device and host work: forward and backward (device, host_pass) and the
    parameter work (optimizer, host_opt).

    Without a sync the host runs ahead of the whole step. GradScaler (autocast to fp16) reads its inf check back
    before the optimizer runs: the host waits for the device there, so the optimizer's host and device time add
    to the overlapped forward and backward instead of hiding behind them.
    """
    device_all, host_all = device + optimizer, host_pass + host_opt
    free = smooth_max(host_all, device_all, q)
    waits = smooth_max(host_pass, device, q) + host_opt + optimizer
    return np.where(synced, waits, free), device_all, host_all


def smooth_max(a: np.ndarray, b: np.ndarray, q: float) -> np.ndarray:
    """(a^q + b^q)^(1/q): max(a, b) where they are far apart, more where they are close (partial overlap)."""
    hi = np.maximum(np.maximum(a, b), 1e-12)
    return hi * ((a / hi) ** q + (b / hi) ** q) ** (1.0 / q)


@dataclass(frozen=True)
class StepEstimate:
    """One predicted training step at one batch size (all times in ms)."""

    batch_size: int
    step_ms: float
    conv_ms: float  # convs, forward and backward, calibrated
    other_ms: float  # non-conv operators, forward and backward
    optimizer_ms: float
    device_ms: float  # all device work
    host_ms: float  # host dispatch
    launch_bound: bool  # the host's dispatch, not the device, sets the step


@dataclass(frozen=True)
class StepArrays:
    """Predicted training steps at several batch sizes, one array entry per batch size (times in ms)."""

    batch_size: np.ndarray  # (B,) int
    step_ms: np.ndarray
    conv_ms: np.ndarray  # (B,) calibrated conv time
    other_ms: np.ndarray
    optimizer_ms: float
    device_ms: np.ndarray
    host_ms: np.ndarray
    launch_bound: np.ndarray  # (B,) bool

    def estimates(self) -> list[StepEstimate]:
        """One StepEstimate per batch size."""
        return [
            StepEstimate(
                int(b),
                float(self.step_ms[i]),
                float(self.conv_ms[i]),
                float(self.other_ms[i]),
                float(self.optimizer_ms),
                float(self.device_ms[i]),
                float(self.host_ms[i]),
                bool(self.launch_bound[i]),
            )  # fmt: skip
            for i, b in enumerate(self.batch_size)
        ]


def host_parts(parts: StepParts, p: Mapping[str, float]) -> tuple[float, float]:
    """(forward and backward, parameter work) host dispatch time of one step, ms."""
    launches = parts.kernels + p.get("host_cast_factor", 1.0) * parts.casts
    per_step = p.get(f"host_step_ms_{parts.group}", 0.0)
    return p.get("host_kernel_ms", 0.0) * launches, p.get(
        "host_tensor_ms", 0.0
    ) * parts.tensors * parts.passes + per_step


def combine(parts: StepParts, batch: np.ndarray, p: Mapping[str, float]) -> StepArrays:
    """Calibrated step times from a step's parts and the fitted constants p (model.json "step")."""
    scaled = parts.device * device_scales(p, parts.group, parts.autotuned, parts.nhwc)
    n = len(batch)
    host_pass, host_opt = host_parts(parts, p)
    step, device, host = overlap(
        scaled.sum(axis=1), np.full(n, parts.optimizer_ms), np.full(n, host_pass), np.full(n, host_opt),
        np.full(n, parts.synced), p.get("smooth_max_q", 8.0),
    )  # fmt: skip
    conv = scaled[:, :3].sum(axis=1) + scaled[:, 5]
    return StepArrays(batch.astype(int), step, conv, scaled[:, 3:5].sum(axis=1), parts.optimizer_ms, device, host,
                      host > device)  # fmt: skip
