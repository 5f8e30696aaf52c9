"""Forward, backward-data and backward-weight time of one conv layer at one batch size."""

import gc
from dataclasses import dataclass
from typing import Any

import torch

from gpu_agent.timing import Timing, measure
from shared.signatures import ConvSignature

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class LayerResult:
    """A layer measurement; all timings None when it ran out of memory."""

    oom: bool
    forward: Timing | None = None
    backward_data: Timing | None = None
    backward_weight: Timing | None = None
    reason: str | None = None

    def stats(self) -> dict[str, Any]:
        """Per-phase statistics for the stats column."""
        if self.oom:
            return {"reason": self.reason}
        assert self.forward and self.backward_data and self.backward_weight
        return {
            "forward": self.forward.to_json(),
            "backward_data": self.backward_data.to_json(),
            "backward_weight": self.backward_weight.to_json(),
        }


def is_oom(exc: BaseException) -> bool:
    """True for an allocation failure on any device."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and ("out of memory" in str(exc) or "can't allocate memory" in str(exc))


def run(sig: ConvSignature, batch_size: int, precision: str, device: torch.device, *, time_cap_s: float) -> LayerResult:
    """Measure the three phases as a training step runs them; out of memory is a result, not an error."""
    try:
        return _run(sig, batch_size, precision, device, time_cap_s)
    except Exception as exc:
        if not is_oom(exc):
            raise
        return LayerResult(oom=True, reason=str(exc).splitlines()[0][:300])
    finally:
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()


def _run(sig: ConvSignature, batch_size: int, precision: str, device: torch.device, time_cap_s: float) -> LayerResult:
    dtype = DTYPES[precision]
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # as a training run would: algorithm search, then reuse
    x = torch.randn(batch_size, sig.in_channels, sig.in_h, sig.in_w, device=device, dtype=dtype)
    if sig.transposed:
        w_shape = (sig.in_channels, sig.out_channels // sig.groups, *sig.kernel)
    else:
        w_shape = (sig.out_channels, sig.in_channels // sig.groups, *sig.kernel)
    w = torch.randn(w_shape, device=device, dtype=dtype)
    b = torch.randn(sig.out_channels, device=device, dtype=dtype) if sig.bias else None
    conv_args = (
        list(sig.stride),
        list(sig.padding),
        list(sig.dilation),
        sig.transposed,
        list(sig.output_padding),
        sig.groups,
    )

    def forward() -> torch.Tensor:
        return torch.ops.aten.convolution(x, w, b, *conv_args)

    with torch.no_grad():
        y = forward()
        grad_y = torch.randn_like(y)
        del y
        bias_sizes = [sig.out_channels] if sig.bias else None

        def backward(mask: list[bool]) -> object:
            return torch.ops.aten.convolution_backward(grad_y, x, w, bias_sizes, *conv_args, mask)

        fwd = measure(forward, device, time_cap_s=time_cap_s)
        bwd_data = measure(lambda: backward([True, False, False]), device, time_cap_s=time_cap_s)
        bwd_weight = measure(lambda: backward([False, True, sig.bias]), device, time_cap_s=time_cap_s)
    return LayerResult(oom=False, forward=fwd, backward_data=bwd_data, backward_weight=bwd_weight)
