"""How much memory traffic each kind of memory-bound operator really makes, learnt from operators an agent timed.

The workload counts an operator's forward bytes as its inputs plus its outputs (shared/cnn/workload.py). A training
step runs it forward and backward, and kernels differ in how many times they pass over those bytes: batch norm in
training reads its input twice forward (statistics, then normalisation) and its input and output gradient twice
backward; max pooling's backward scatters through saved indices; a residual add's backward is nearly free. One
uniform rule (backward = 2x forward) costed every kind alike. Here each kind's forward + backward time on large
tensors (DRAM-bound, launch costs negligible) is divided by the time a ReLU forward takes per counted byte on the
same GPU in the same run: a ratio of kernels' passes over memory, which carries to other GPUs, where the GPU's own
bandwidth and the public ReLU/add efficiency (fit.fit_memory_ops) set the scale.

Read from the op rows of the measurement bundles under data/measured/ (bf16 rows: the ratio to a bf16 ReLU forward,
the bytes counted in fp32 as the step model halves them). What a kind takes beyond its least traffic (IDEAL_PASSES)
is work the SMs issue per element, so another GPU's passes scale that excess by its memory bandwidth per SM cycle
against the timed GPU's (effective_passes).
"""

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from prediction.reference import measured
from prediction.reference.specs import GpuSpecs, sm_cycles_per_s
from shared.cnn.workload import kind_of
from shared.measurements.bundle import OpRow

# Only tensors this large are timed at DRAM bandwidth (a fraction of a millisecond even on an H200: the launch and
# timing floor of tens of microseconds is then a small part). The bytes a kernel really moves: a bf16 tensor of the
# same fp32 count is half as large, and its floor weighs twice as much (with the fp32 count, bf16's activations read
# 4.9 passes where their largest tensors, like fp32's, take 2.6-2.9).
MIN_BYTES = 128e6
# Bytes per element of each op variant over fp32's.
ELEMENT_SCALE = {"fp32": 1.0, "bf16": 0.5}
# A kind's ratio needs at least this many large timings (median of them).
MIN_ROWS = 5
# The operators of each kind whose bytes this module can count from a signature; the workload's kinds.
_ACTIVATIONS = ("relu", "hardtanh", "silu", "sigmoid", "gelu", "hardswish", "hardsigmoid", "tanh")
_AGGREGATE = ("adaptive_avg_pool2d", "mean")
KINDS = ("batch_norm", "activation", "pooling", "elementwise", "concat")
# Each kind's least memory traffic in a training step (forward + backward), over the bytes the workload counts for
# its forward: what its kernels must read and write, the floor where memory bandwidth alone sets the time.
# batch norm in training: statistics (read x), normalise (read x, write y); backward: reduce (read x and dy), then
# dx (read x and dy, write dx): 8 accesses over the 2 counted = 4. An activation: read x, write y; backward read
# y and dy, write dx: 5 over 2. Pooling: forward as counted, backward reads dy (and max's indices) and writes dx:
# about the forward again = 2. A residual add: forward as counted, backward accumulates the branch's gradient into
# the shortcut's (read two, write one) = 2. cat: forward as counted; backward hands out views of dy = 1.
# The H200 took 2.7 (activation) to 9.3 (pooling) passes: beyond the floor, kernels bound by the work the SMs issue
# per element (reductions over strided channels, the scatter of max pooling's backward), not by bytes; such work
# takes longer where memory bandwidth per SM cycle is higher, so the excess scales with it (effective_passes).
IDEAL_PASSES = {"batch_norm": 4.0, "activation": 2.5, "pooling": 2.0, "elementwise": 2.0, "concat": 1.0}
# (op, fp32 bytes, forward ms, backward ms) of one operator timing.
Timing = tuple[str, float, float, float]
# The agent's op variants read.
VARIANTS = ("fp32", "bf16")
# bf16 takes its own timings (from_bundles): on the H200 a bf16 batch norm took 1.2x an fp32 one's time, at half the
# bytes (18 passes over them). Taken as they are on every GPU they made bf16 ResNet-50 slower than fp32 on every
# Ampere and Ada GPU (tests/unit/test_reference_sanity.py); scaled like fp32's by bytes per SM cycle
# (effective_passes), where those GPUs have a third to half of the H200's, they do not; without the GPUs' figures
# (no scaling) bf16 keeps the uniform rule and fp16 takes fp32's.
# With them, fp16 takes bf16's timings for every kind but batch norm, which takes fp32's. PyTorch's elementwise,
# pooling and concat kernels are one template for both 16-bit types (the same vector loads, math in fp32), but its
# batch norm picks cuDNN for fp16 input with fp32 weights (autocast's case) and for fp32, and its own kernels for bf16
# (aten/src/ATen/native/Normalization.cpp, _select_batch_norm_backend). Our H200's crossed steps show exactly that:
# with the same optimizer, fp16 took what bf16 did in CNNs without batch norm (vgg16, convnext_tiny, squeezenet1_1:
# 1.00-1.07x at batch 64-256) and 0.7-0.9x in those with it (data/reference/h200/).
CUDNN_IN_FP16 = ("batch_norm",)


def _numel(shape: Iterable[int]) -> int:
    return math.prod(int(s) for s in shape)


def forward_bytes(spec: Mapping[str, Any]) -> float | None:
    """Bytes per sample the workload counts for one fp32 forward call of an op signature (inputs + outputs), or
    None for an operator outside the kinds here (or off the autograd path)."""
    op, shape, args = spec["op"], list(spec.get("shape") or []), spec.get("args") or {}
    if args.get("dtype") or args.get("step") or args.get("grad") is False:
        return None  # integer bookkeeping, the optimizer's step counter, or no backward
    n = _numel(shape)
    if op in _ACTIVATIONS or op == "batch_norm":
        return 8.0 * n  # read x, write y (batch norm's per-channel vectors are negligible)
    if op in ("max_pool2d", "avg_pool2d") and len(shape) == 3:
        c, h, w = shape
        (kh, kw), (sh, sw), (ph, pw) = args["kernel"], args["stride"], args["padding"]
        out = c * ((h + 2 * ph - kh) // sh + 1) * ((w + 2 * pw - kw) // sw + 1)
        # max pooling also writes int64 indices
        return 4.0 * n + (12.0 if op == "max_pool2d" else 4.0) * out
    if op in _AGGREGATE:
        return 4.0 * n
    if op in ("add", "mul"):
        other = int(args.get("other") or 0)
        return 4.0 * (2 * n + (other if args.get("batched") else 0))
    if op == "cat":
        return 8.0 * sum(_numel(s) for s in args.get("shapes") or [])
    return None


def kind_of_op(op: str) -> str | None:
    """The workload kind of an op signature's op (its names are not all aten's), None outside KINDS."""
    if op == "batch_norm":
        return "batch_norm"
    if op in ("max_pool2d", "avg_pool2d", *_AGGREGATE):
        return "pooling"
    if op == "cat":
        return "concat"
    kind = kind_of(op)
    return kind if kind in KINDS else None


def passes(rows: Iterable[Timing], scale: float = 1.0) -> dict[str, float]:
    """Each kind's forward + backward time per counted byte over a ReLU forward's, from (op, fp32 bytes, forward ms,
    backward ms) of large tensors on one GPU, whose elements are scale x fp32's in size; kinds with fewer than
    MIN_ROWS timings are left out."""
    per_byte: dict[str, list[float]] = defaultdict(list)
    relu: list[float] = []
    for op, nbytes, forward_ms, backward_ms in rows:
        kind = kind_of_op(op)
        if kind is None or nbytes * scale < MIN_BYTES:
            continue
        per_byte[kind].append((forward_ms + backward_ms) / nbytes)
        if op == "relu":
            relu.append(forward_ms / nbytes)
    if len(relu) < MIN_ROWS:
        return {}
    unit = statistics.median(relu)
    return {k: statistics.median(v) / unit for k, v in sorted(per_byte.items()) if len(v) >= MIN_ROWS}


def _by_gpu(paths: Iterable[Path], gpus: Mapping[str, GpuSpecs] | None = None) -> dict[tuple[str, str], list[Timing]]:
    by_gpu: dict[tuple[str, str], list[Timing]] = defaultdict(list)
    for path in paths:
        for gpu, variant, row in op_rows(path, gpus):
            by_gpu[variant, gpu].append(row)
    return by_gpu


def by_variant(paths: Iterable[Path], gpus: Mapping[str, GpuSpecs] | None = None) -> dict[str, dict[str, float]]:
    """Each op variant's passes per kind (VARIANTS), the median over the GPUs the bundles timed them on (with the
    GPUs' figures, batch norm's from those over as many channels as SMs or more: op_rows)."""
    return _per_variant(_by_gpu(paths, gpus))


def _per_variant(by_gpu: Mapping[tuple[str, str], list[Timing]]) -> dict[str, dict[str, float]]:
    out = {}
    for variant in VARIANTS:
        fitted = [passes(rows, ELEMENT_SCALE[variant]) for (v, _), rows in sorted(by_gpu.items()) if v == variant]
        kinds = sorted({k for f in fitted for k in f})
        out[variant] = {k: statistics.median(f[k] for f in fitted if k in f) for k in kinds}
    return out


def from_bundles(paths: Iterable[Path], gpus: Mapping[str, GpuSpecs] | None = None) -> dict[str, float]:
    """model.json's step constants `passes_<kind>_<group>`: fp32's timings for the fp32 group; with the GPUs'
    figures, bf16's for bf16, bf16's but batch norm's (CUDNN_IN_FP16: fp32's) for fp16, and `passes_bytes_per_cycle`:
    the memory bandwidth per SM cycle of the GPUs they were timed on (the median), which steps.other_ms scales their
    excess over IDEAL_PASSES by (the 16-bit timings only with it: unscaled they broke the sanity orderings); without
    the GPUs' figures fp16 takes fp32's."""
    paths = list(paths)  # read more than once: the passes, the channels' cycles, bf16's ratio to them
    by_gpu = _by_gpu(paths, gpus)
    variants = _per_variant(by_gpu)
    fp32, half = variants["fp32"], variants["bf16"]
    out = {f"passes_{kind}_fp32": v for kind, v in fp32.items()}
    fp16 = fp32
    timed = sorted({g for v, g in by_gpu if v == "fp32"} & set(gpus or {}))
    if out and gpus and timed:
        out["passes_bytes_per_cycle"] = statistics.median(bytes_per_cycle(gpus[g]) for g in timed)
        out.update({f"passes_{kind}_bf16": v for kind, v in half.items()})
        fp16 = {kind: v for kind, v in half.items() if kind not in CUDNN_IN_FP16}
        fp16.update({kind: fp32[kind] for kind in CUDNN_IN_FP16 if kind in fp32})
    out.update({f"passes_{kind}_fp16": v for kind, v in fp16.items()})
    cycles = channel_cycles(paths, gpus or {})
    if cycles is not None:
        out["batch_norm_channel_cycles"] = cycles
        ratio = channel_ratio(paths, gpus or {})
        if ratio is not None:  # fp16 keeps fp32's: cuDNN's kernels (CUDNN_IN_FP16)
            out["batch_norm_channel_cycles_bf16"] = cycles * ratio
    return out


# Batch norm in training over NCHW maps gives each channel's statistics a block of its own (PyTorch's and cuDNN's
# kernels, as their times read): with fewer channels than SMs the time is set by the N x H x W elements one block
# streams, whatever the bytes. The H200 took 6.3-7.0 ms for 16 to 96 channels of 112x112 at batch 256 (6x the bytes),
# 1.8-1.95 ms for 24 to 128 of 56x56. The rows that show it: channels at most half the SMs, a million elements or more
# per channel (launch floors negligible).
CHANNEL_ELEMENTS = 1_000_000
FEW_CHANNELS = 0.5  # channels over SMs: the rows the channels' law is read from


# bf16's batch norms are PyTorch's own kernels, not cuDNN's: over few channels the H200 took 1.24-1.55x fp32's time for
# the same batch norm (9 pairs, 1.29x their median), as its bytes' passes also read higher. Its per-element rate is
# fp32's times that ratio, read from pairs whose fp32 time is at least this long (too few bf16 rows have a million
# elements per channel to read bf16's rate on its own).
PAIR_MIN_MS = 0.5


def _sm_share(spec: Mapping[str, Any], gpu: GpuSpecs | None) -> float | None:
    """Channels over the GPU's SMs of a training batch norm over 3-d maps (None for another op or an unknown GPU)."""
    shape = spec.get("shape") or []
    if gpu is None or spec["op"] != "batch_norm" or len(shape) != 3 or spec.get("args", {}).get("grad") is False:
        return None
    sms = gpu.filled().sm_count or 0
    return int(shape[0]) / sms if sms else None


def channel_cycles(paths: Iterable[Path], gpus: Mapping[str, GpuSpecs]) -> float | None:
    """SM cycles per element of one channel (forward + backward) of training batch norms whose channels leave SMs
    idle, the median over the bundles' fp32 timings on GPUs data/gpus.csv knows; None without such rows."""
    found: list[float] = []
    for name, row, spec, forward_ms in (t for path in paths for t in _timed_ops(path)):
        gpu = gpus.get(name)
        share = _sm_share(spec, gpu)
        if gpu is None or share is None or share > FEW_CHANNELS or row.variant != "fp32":
            continue
        elements = row.batch_size * spec["shape"][1] * spec["shape"][2]
        if elements >= CHANNEL_ELEMENTS:
            clock = sm_cycles_per_s(gpu) / (gpu.filled().sm_count or 1)
            found.append((forward_ms + (row.backward_ms or 0.0)) * 1e-3 * clock / elements)
    return statistics.median(found) if len(found) >= MIN_ROWS else None


def channel_ratio(paths: Iterable[Path], gpus: Mapping[str, GpuSpecs]) -> float | None:
    """bf16's time over fp32's for the same training batch norm over few channels (same GPU, shape and batch; fp32
    at least PAIR_MIN_MS), the median over the bundles' pairs; None with fewer than MIN_ROWS pairs."""
    times: dict[tuple[str, str, int], dict[str, float]] = defaultdict(dict)
    for name, row, spec, forward_ms in (t for path in paths for t in _timed_ops(path)):
        share = _sm_share(spec, gpus.get(name))
        if row.variant in VARIANTS and share is not None and share <= FEW_CHANNELS:
            key = (name, str(spec.get("shape")), row.batch_size)
            times[key][row.variant] = forward_ms + (row.backward_ms or 0.0)
    ratios = [t["bf16"] / t["fp32"] for t in times.values() if "bf16" in t and t.get("fp32", 0.0) >= PAIR_MIN_MS]
    return statistics.median(ratios) if len(ratios) >= MIN_ROWS else None


def bytes_per_cycle(gpu: GpuSpecs) -> float:
    """A GPU's memory bandwidth per SM cycle (bytes): high where memory outruns the SMs that issue its requests."""
    return gpu.mem_bandwidth_gbs * 1e9 / sm_cycles_per_s(gpu)


def effective_passes(kind: str, measured: float, gpu: GpuSpecs, reference_bytes_per_cycle: float | None) -> float:
    """A kind's passes over its counted bytes on this GPU: its ideal memory traffic at the least, and the part the
    reference GPU took beyond it scaled by how much memory this GPU has per SM cycle against the reference's."""
    if not reference_bytes_per_cycle or kind not in IDEAL_PASSES:
        return measured
    return max(IDEAL_PASSES[kind], measured * bytes_per_cycle(gpu) / reference_bytes_per_cycle)


def op_rows(path: Path, gpus: Mapping[str, GpuSpecs] | None = None) -> list[tuple[str, str, Timing]]:
    """(GPU, variant, (op, fp32 bytes, forward ms, backward ms)) of a bundle's operators in VARIANTS, on CUDA GPUs
    data/gpus.csv knows (the bundle itself is read once: measured.bundle). With the GPUs' figures, batch norms over
    fewer channels than the GPU has SMs are left out: their channels' reduction length sets their time
    (channel_cycles), not their bytes."""
    out = []
    for gpu, row, spec, forward_ms in _timed_ops(path):
        share = _sm_share(spec, gpus.get(gpu)) if gpus is not None else None
        if row.variant not in VARIANTS or (share is not None and share < 1):
            continue
        per_sample = forward_bytes(spec)
        if per_sample is None:
            continue
        timing = (spec["op"], per_sample * row.batch_size, forward_ms, row.backward_ms or 0.0)
        out.append((gpu, row.variant, timing))
    return out


def _timed_ops(path: Path) -> Iterator[tuple[str, OpRow, dict[str, Any], float]]:
    """(GPU, row, signature spec, forward ms) of a bundle's operator timings on CUDA GPUs data/gpus.csv knows, those
    that ran (no OOM, a forward time)."""
    read = measured.bundle(path)
    gpus = {e.hash: measured.known_gpu(e.details) for e in read.environments}
    specs = {s.hash: s.spec for s in read.op_signatures}
    for row in read.rows.get("op", []):
        gpu, spec = gpus[row.environment], specs.get(row.signature)
        if gpu is not None and spec is not None and not row.oom and row.forward_ms is not None:
            yield gpu, row, spec, row.forward_ms
