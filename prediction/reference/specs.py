"""A GPU as its spec sheet describes it, and the peaks the reference model divides by.

Missing optional figures are filled by documented rules so that a GPU registered with only
its FP32 rate and memory bandwidth still gets a prediction:
- compute capability: "8.0" if a TF32 rate is given, "7.0" if FP16 is more than twice FP32
  (tensor cores), else "6.0";
- FP16 tensor rate: the FP32 rate (no tensor cores); TF32 on compute capability >= 8.0: half the
  dense FP16 rate (A100, A10, L4, H100 datasheets all have TF32 = FP16 / 2);
- SM count: FP32 rate / (2 FLOPs x lanes per SM x 1.5 GHz), lanes as `lanes_per_sm` (the CUDA programming
  guide's per-SM FP32 throughput table);
- L2: 1 MiB per 100 GB/s of bandwidth (what V100, T4 and A100 roughly have).

Tensor-core convs are costed at the chip's full tensor rate. GeForce spec sheets give two FP16 tensor figures, the
FP16-accumulate rate and half of it with FP32 accumulate (what autocast's convs use), and TF32 at that half; yet
measured ResNet-50 training runs on a GeForce board as on the professional board of the same chip, scaled by clock
and bandwidth, not at half (Lambda's logs in data/reference/whole_steps.csv: RTX 2080 Ti against Quadro RTX 6000,
TU102; RTX 3090 against RTX A6000, GA102). Where a GPU states its FP16-accumulate rate (`fp16_acc16_tflops`), the
tensor peaks scale by its ratio to the FP32-accumulate figure.
"""

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

PRECISIONS = ("fp32", "amp_fp16")
# Same silicon under two names: holding one out holds out the other too.
SAME_CHIP = {"Quadro-RTX-8000": "Quadro-RTX-6000", "H200-SXM-141GB": "H100"}


def _num(value: Any) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, Decimal | int | float):
        out = float(value)
    else:
        try:
            out = float(str(value).strip())
        except ValueError:
            return None
    return out if math.isfinite(out) and out > 0 else None


def _cc_value(cc: str | None) -> float:
    try:
        return float(cc) if cc else 0.0
    except ValueError:
        return 0.0


@dataclass(frozen=True)
class GpuSpecs:
    """One GPU's published figures (per GPU, dense rates)."""

    name: str
    fp32_tflops: float
    mem_bandwidth_gbs: float
    fp16_tflops: float | None = None  # dense tensor-core fp16, fp32 accumulate
    fp16_acc16_tflops: float | None = None  # dense tensor-core fp16, fp16 accumulate, where it differs (GeForce)
    tf32_tflops: float | None = None  # dense; PyTorch uses TF32 for convs by default on compute capability >= 8.0
    sm_count: int | None = None
    l2_mib: float | None = None
    compute_capability: str | None = None  # "8.0"
    memory_gib: float | None = None  # per GPU

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "GpuSpecs":
        """From a data/gpus.csv row or a machine_types row (gpu_-prefixed keys, total memory over gpu_count)."""
        prefixed = any(str(k).startswith("gpu_") for k in row)

        def get(key: str) -> Any:
            if prefixed and f"gpu_{key}" in row:
                return row[f"gpu_{key}"]
            return row.get(key)

        name = str(row.get("gpu") or row.get("name") or "unnamed GPU")
        fp32 = _num(get("fp32_tflops"))
        bandwidth = _num(get("mem_bandwidth_gbs"))
        if fp32 is None or bandwidth is None:
            raise ValueError(f"{name}: fp32_tflops and mem_bandwidth_gbs are required")
        memory = _num(get("memory_gib"))
        count = _num(row.get("gpu_count")) if prefixed else None
        if memory is not None and count:
            memory /= count  # machine_types stores the total over all GPUs of the machine
        sm = _num(get("sm_count"))
        cc = get("compute_capability")
        return cls(
            name=name,
            fp32_tflops=fp32,
            mem_bandwidth_gbs=bandwidth,
            fp16_tflops=_num(get("fp16_tflops")),
            fp16_acc16_tflops=_num(get("fp16_acc16_tflops")),
            tf32_tflops=_num(get("tf32_tflops")),
            sm_count=int(round(sm)) if sm else None,
            l2_mib=_num(get("l2_mib")),
            compute_capability=str(cc).strip() if cc not in (None, "") else None,
            memory_gib=memory,
        )

    def filled(self) -> "GpuSpecs":
        """The same GPU with every optional figure present (rules in the module docstring)."""
        cc = self.compute_capability
        if not cc or _cc_value(cc) <= 0:
            if self.tf32_tflops:
                cc = "8.0"
            elif self.fp16_tflops and self.fp16_tflops > 2.05 * self.fp32_tflops:
                cc = "7.0"
            else:
                cc = "6.0"
        fp16 = self.fp16_tflops or self.fp32_tflops
        tf32 = self.tf32_tflops
        if tf32 is None and _cc_value(cc) >= 8.0:
            tf32 = fp16 / 2
        sm = self.sm_count
        if not sm:
            sm = max(1, round(self.fp32_tflops * 1e12 / (2 * lanes_per_sm(_cc_value(cc)) * 1.5e9)))
        l2 = self.l2_mib or self.mem_bandwidth_gbs / 100
        return GpuSpecs(
            self.name, self.fp32_tflops, self.mem_bandwidth_gbs, fp16, self.fp16_acc16_tflops, tf32, sm, l2, cc,
            self.memory_gib,
        )  # fmt: skip

    @property
    def tensor_scale(self) -> float:
        """How much faster the chip's tensor units run than the FP32-accumulate figure says (1 but on GeForce)."""
        if self.fp16_acc16_tflops and self.fp16_tflops and self.fp16_acc16_tflops > self.fp16_tflops:
            return self.fp16_acc16_tflops / self.fp16_tflops
        return 1.0

    @property
    def cc(self) -> float:
        """Compute capability as a number (0 when unknown)."""
        return _cc_value(self.compute_capability)


def lanes_per_sm(cc: float) -> int:
    """FP32 lanes per SM (the CUDA programming guide's throughput table): 192 before compute capability 5.0, 128 on
    5.x, 6.1, 6.2, 8.6, 8.7, 8.9 and 9.0 or later, else 64."""
    if 0 < cc < 5.0:
        return 192
    return 128 if cc < 6.0 or cc in (6.1, 6.2) or cc >= 8.6 else 64


def sm_cycles_per_s(gpu: GpuSpecs) -> float:
    """SMs x boost clock, from the FP32 rate (2 FLOPs per lane per cycle): what bounds work issued per element
    rather than per byte."""
    return gpu.fp32_tflops * 1e12 / (2 * lanes_per_sm(gpu.filled().cc))


def simt_tflops(gpu: GpuSpecs, precision: str) -> float:
    """Peak of the CUDA cores for this precision (FP16 without tensor cores runs at the FP16 rate if faster)."""
    if precision == "amp_fp16" and gpu.cc < 7.0 and gpu.fp16_tflops and gpu.fp16_tflops > gpu.fp32_tflops:
        return gpu.fp16_tflops  # P100: 2x-rate half on CUDA cores
    return gpu.fp32_tflops


def tensor_tflops(gpu: GpuSpecs, precision: str) -> float | None:
    """Peak of the tensor cores for this precision, None where convs cannot use them."""
    if precision == "amp_fp16" and gpu.cc >= 7.0 and gpu.fp16_tflops:
        return gpu.fp16_tflops * gpu.tensor_scale
    if precision == "fp32" and gpu.cc >= 8.0 and gpu.tf32_tflops:
        return gpu.tf32_tflops * gpu.tensor_scale
    return None


def element_bytes(precision: str) -> float:
    """Bytes of one activation element."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return 2.0 if precision == "amp_fp16" else 4.0


def gpu_family(name: str) -> str:
    """GPU model without board variant (V100-SXM2-16GB and V100-PCIE-32GB are one GPU for leave-one-out)."""
    return re.sub(r"-(PCIE|SXM\d?|NVL)\b.*$", "", name)


def family_of(gpu: str) -> str:
    """The GPU family held out together (board variants and same-chip products)."""
    return gpu_family(SAME_CHIP.get(gpu, gpu))
