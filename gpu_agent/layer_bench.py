"""Forward, backward-data and backward-weight time of one conv layer over a task's batch sizes."""

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from gpu_agent import memory, windows
from gpu_agent.timing import Policy, sync
from gpu_agent.windows import Outcome, PointSetup, Prepared
from shared.cnn.signatures import ConvSignature
from shared.core.settings import get_settings

log = logging.getLogger(__name__)
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
PHASES = ("forward", "backward_data", "backward_weight")
# Names the profiler range around one phase when the kernels of a point's phases are recorded together.
PHASE_LABEL = "traincast.phase:"


def measure(
    sig: ConvSignature,
    batch_sizes: Sequence[int],
    precision: str,
    device: torch.device,
    *,
    policy: Policy,
    window_points: int,
    save: Callable[[int, Outcome], None],
    stop: Callable[[], bool],
    channels_last: bool = False,
) -> list[int]:
    """Time the three phases at each batch size, interleaved; returns the batch sizes left by a stop."""
    setup = PointSetup(
        prepare=lambda bs: prepare(sig, bs, precision, device, channels_last),
        footprint=lambda sizes: memory.layer_bytes(sig, sizes, precision),
    )
    return windows.run(
        batch_sizes, setup, device=device, policy=policy, window_points=window_points, save=save, stop=stop
    )


def prepare(
    sig: ConvSignature, batch_size: int, precision: str, device: torch.device, channels_last: bool = False
) -> Prepared:
    """Tensors of one batch size and its three phases, each called once (the first call is not a sample).

    channels_last: input, weight and output gradient in that memory format, as a channels_last model has them.
    """
    dtype = DTYPES[precision]
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(batch_size, sig.in_channels, sig.in_h, sig.in_w, device=device, dtype=dtype)
    x = x.contiguous(memory_format=fmt)
    if sig.transposed:
        w_shape = (sig.in_channels, sig.out_channels // sig.groups, *sig.kernel)
    else:
        w_shape = (sig.out_channels, sig.in_channels // sig.groups, *sig.kernel)
    w = torch.randn(w_shape, device=device, dtype=dtype).contiguous(memory_format=fmt)
    b = torch.randn(sig.out_channels, device=device, dtype=dtype) if sig.bias else None
    conv_args = (
        list(sig.stride),
        list(sig.padding),
        list(sig.dilation),
        sig.transposed,
        list(sig.output_padding),
        sig.groups,
    )
    bias_sizes = [sig.out_channels] if sig.bias else None

    # No tensor requires grad, so autograd records nothing: each phase is the bare kernel call.
    def forward() -> torch.Tensor:
        return torch.ops.aten.convolution(x, w, b, *conv_args)

    grad_y = torch.randn_like(forward()).contiguous(memory_format=fmt)

    def backward_data() -> object:
        return torch.ops.aten.convolution_backward(grad_y, x, w, bias_sizes, *conv_args, [True, False, False])

    def backward_weight() -> object:
        return torch.ops.aten.convolution_backward(grad_y, x, w, bias_sizes, *conv_args, [False, True, sig.bias])

    phases: dict[str, Callable[[], object]] = {
        "forward": forward,
        "backward_data": backward_data,
        "backward_weight": backward_weight,
    }
    for fn in phases.values():
        fn()  # warm-up: cuDNN's choice of algorithm (a search with cudnn.benchmark on), allocation, caches
    sync(device)
    info: dict[str, Any] = {}
    if device.type == "cuda" and get_settings().bench_record_kernels:
        info["kernels"] = cuda_kernels_of(phases)
    return Prepared(phases=phases, info=info)


def cuda_kernels_of(phases: dict[str, Callable[[], object]]) -> dict[str, list[str] | None]:
    """Names of the CUDA kernels each phase launches, from one profiler run of all of them (a profiler run costs
    milliseconds, three per batch size before); a phase that run could not tell apart is profiled alone."""
    found: dict[str, list[str]] = {}
    try:
        from torch.profiler import ProfilerActivity, profile, record_function

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for name, fn in phases.items():
                with record_function(PHASE_LABEL + name):
                    fn()
                    torch.cuda.synchronize()
        # A kernel belongs to the op that launched it (the profiler links them), the op to the phase around it.
        found = by_phase(prof.events(), lambda e: {k.name for k in e.kernels})
    except Exception:  # recording is a nicety; the timing does not depend on it
        log.warning("could not record CUDA kernel names of a point's phases together", exc_info=True)
    return {name: found.get(name) or cuda_kernels(fn) for name, fn in phases.items()}


def by_phase(events: Iterable[Any], names_of: Callable[[Any], set[str]]) -> dict[str, list[str]]:
    """What names_of() finds in each PHASE_LABEL range of a profile and in the host events under it, by phase."""
    out: dict[str, set[str]] = {}
    for event in events:
        # The range is also shown on the device's timeline: only its host event holds the ops under it.
        if not event.name.startswith(PHASE_LABEL) or event.device_type != torch.autograd.DeviceType.CPU:
            continue
        names, under = out.setdefault(event.name.removeprefix(PHASE_LABEL), set()), [event]
        while under:
            e = under.pop()
            names |= names_of(e)
            under.extend(e.cpu_children)
    return {phase: sorted(names) for phase, names in out.items()}


def cuda_kernels(fn: Callable[[], object]) -> list[str] | None:
    """Names of the CUDA kernels one call launches: which algorithm cuDNN chose."""
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
    except Exception:  # recording is a nicety; the timing does not depend on it
        log.warning("could not record CUDA kernel names", exc_info=True)
        return None
