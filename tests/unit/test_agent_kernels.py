"""The kernels of a point's phases recorded in one profiler run: each op's kernels go to the phase around it."""

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from gpu_agent import layer_bench
from shared.cnn.signatures import ConvSignature

CPU = torch.device("cpu")
HOST, DEVICE = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA
SIG = ConvSignature.from_json(
    {"in_channels": 8, "out_channels": 16, "in_h": 8, "in_w": 8, "kernel": [3, 3], "stride": [1, 1],
     "padding": [1, 1], "dilation": [1, 1], "groups": 1, "bias": False, "transposed": False,
     "output_padding": [0, 0], "dtype": "float32"}
)  # fmt: skip


def test_each_phase_gets_the_ops_run_inside_its_range() -> None:
    """One CPU profile of the three phases: every phase finds its own ops (on CUDA: their kernels), no other's."""
    phases = layer_bench.prepare(SIG, 2, "fp32", CPU).phases
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for name, fn in phases.items():
            with record_function(layer_bench.PHASE_LABEL + name):
                fn()
    found = layer_bench.by_phase(prof.events(), lambda e: {e.name})
    assert set(found) == set(layer_bench.PHASES)
    assert "aten::convolution" in found["forward"] and "aten::convolution_backward" not in found["forward"]
    for backward in ("backward_data", "backward_weight"):
        assert "aten::convolution_backward" in found[backward] and "aten::convolution" not in found[backward]


def event(name: str, device_type: Any, kernels: tuple[str, ...] = (), children: tuple[Any, ...] = ()) -> Any:
    """Stands in for a profiler FunctionEvent (a CUDA profile cannot be made on this machine)."""
    return SimpleNamespace(
        name=name, device_type=device_type, kernels=[SimpleNamespace(name=k) for k in kernels],
        cpu_children=list(children),
    )  # fmt: skip


def test_the_ranges_copy_on_the_device_timeline_adds_nothing_and_takes_nothing() -> None:
    """A range shows on the GPU's timeline too, with no ops under it: the host range's kernels stand."""
    conv = event("aten::cudnn_convolution", HOST, kernels=("sm90_xmma_fprop",))
    host = event(layer_bench.PHASE_LABEL + "forward", HOST, children=(event("aten::convolution", HOST, (), (conv,)),))
    on_device = event(layer_bench.PHASE_LABEL + "forward", DEVICE)
    for events in ([host, on_device], [on_device, host]):
        found = layer_bench.by_phase(events, lambda e: {k.name for k in e.kernels})
        assert found == {"forward": ["sm90_xmma_fprop"]}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; this machine has none")
def test_on_cuda_one_profile_names_the_kernels_each_phase_alone_names() -> None:
    """The kernels found for each phase in one profiler run are those a profiler run of that phase alone finds."""
    torch.backends.cudnn.benchmark = True
    phases = layer_bench.prepare(SIG, 4, "fp32", torch.device("cuda")).phases
    together = layer_bench.cuda_kernels_of(phases)
    assert all(together[name] for name in phases)
    assert together == {name: layer_bench.cuda_kernels(fn) for name, fn in phases.items()}
