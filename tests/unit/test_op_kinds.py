"""The op kinds beyond layers: read from real CNNs as their modules and autograd's graph say, measured by op_bench."""

from collections import Counter
from collections.abc import Iterator
from math import prod
from typing import Any

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
import torchvision

from gpu_agent import op_bench
from gpu_agent.timing import Policy
from gpu_agent.windows import Outcome
from shared.cnn import zoo as cnn_zoo
from shared.cnn.op_signatures import NO_BACKWARD, OpSignature
from shared.core.settings import get_settings
from shared.training import TrainConfig

SIZE = 64
CPU = torch.device("cpu")


def model(name: str) -> torch.nn.Module:
    """A real torchvision model on the CPU, in training mode."""
    return torchvision.models.get_model(name, weights=None).train()


def extracted(name: str, op: str) -> Counter[OpSignature]:
    """The op signatures of one kind extraction recorded for a CNN, with their counts."""
    read = cnn_zoo.conv_layers(name, SIZE)
    return Counter({s: n for s, n in zip(read.ops, read.op_counts, strict=True) if s.op == op})


def calls(name: str, kind: type[torch.nn.Module]) -> list[tuple[torch.nn.Module, torch.Tensor]]:
    """Each call of modules of one kind in a real forward pass: the module and its input."""
    net, seen = model(name), []
    for m in net.modules():
        if isinstance(m, kind):
            m.register_forward_hook(lambda mod, inputs, _out: seen.append((mod, inputs[0])))
    net(torch.randn(2, 3, SIZE, SIZE))
    return seen


def autograd_sums(name: str) -> int:
    """Gradient sums autograd's engine does in a real backward: an input of a node reached by more than one edge."""
    out = model(name)(torch.randn(2, 3, SIZE, SIZE))
    loss = F.cross_entropy(out, torch.zeros(2, dtype=torch.long))
    edges: Counter[tuple[Any, int]] = Counter()
    assert loss.grad_fn is not None
    seen, todo = set(), [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        for child, nr in node.next_functions:
            if child is not None:
                edges[(child, nr)] += 1
                todo.append(child)
    return sum(n - 1 for n in edges.values())


@pytest.mark.parametrize("name", ["resnet18", "efficientnet_b0", "convnext_tiny", "densenet121", "shufflenet_v2_x1_0"])
def test_gradient_sums_are_those_of_autograds_graph(name: str) -> None:
    """Backward sums the gradients of a tensor used twice: as many sums as the real graph has shared inputs."""
    assert sum(extracted(name, "accumulate").values()) == autograd_sums(name)


def test_convnext_block_mlps_layer_scale_and_norms_follow_its_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Linear call is a linear over its rows per sample; layer_scale * x per block; each layer norm over a
    permuted view (as the CPU runs it: channels-last after the first block, so only the stem's) rebuilt as one."""
    linears = calls("convnext_tiny", torch.nn.Linear)
    assert extracted("convnext_tiny", "linear") == Counter(
        OpSignature.of("linear", (prod(x.shape[1:-1]), x.shape[-1]), out=m.out_features, bias=True) for m, x in linears
    )
    blocks = [m for m in model("convnext_tiny").modules() if isinstance(m, torchvision.models.convnext.CNBlock)]
    # layer_scale (C×1×1, a parameter) times the block's output: the parameter is the broadcast operand.
    scales = Counter({s: n for s, n in extracted("convnext_tiny", "mul").items() if s.arguments["other"] > 1})
    assert Counter(s.arguments["other"] for s in scales.elements()) == Counter(b.layer_scale.numel() for b in blocks)
    assert all(s.arguments["batched"] is False for s in scales)
    normed: list[torch.Tensor] = []
    real = F.layer_norm

    def recording(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        normed.append(x)
        return real(x, *args, **kwargs)

    monkeypatch.setattr(F, "layer_norm", recording)
    model("convnext_tiny")(torch.randn(2, 3, SIZE, SIZE))
    norms = extracted("convnext_tiny", "layer_norm")
    assert sum(norms.values()) == len(normed)
    # op_bench rebuilds each input with its sizes and strides (a permuted view where the net's is one).
    make = op_bench._Make(2, torch.float32, CPU, False, True)
    rebuilt: Counter[tuple[tuple[int, ...], tuple[int, ...]]] = Counter()
    for sig, n in norms.items():
        view = make.input(sig)[0]
        rebuilt[(tuple(view.shape), view.stride())] += n
    assert Counter((tuple(x.shape), x.stride()) for x in normed) == rebuilt
    assert any(not x.is_contiguous() for x in normed)


def test_stochastic_depth_batch_norm_counters_and_autograd_copies_are_ops() -> None:
    """Each stochastic depth draws per-sample noise; each batch norm counts its steps; in-place SiLU is copied."""
    depth = [m for m in model("convnext_tiny").modules() if isinstance(m, torchvision.ops.StochasticDepth)]
    noise = extracted("convnext_tiny", "bernoulli")
    assert sum(noise.values()) == sum(m.p > 0 for m in depth) and set(noise) == {OpSignature.of("bernoulli", (1,))}
    counter = OpSignature.of("add", (1,), other=0, batched=False, step=True, grad=False, dtype="int64")
    norms = calls("efficientnet_b0", torch.nn.BatchNorm2d)
    assert extracted("efficientnet_b0", "add")[counter] == len(norms)
    # silu_'s backward needs its input, so autograd copies it first (a real kernel, which no gradient flows back
    # through: timed without a backward); SE's SiLU is not in place.
    silu = [(m, x) for m, x in calls("efficientnet_b0", torch.nn.SiLU) if m.inplace]
    assert extracted("efficientnet_b0", "copy") == Counter(
        OpSignature.of("copy", (x[0].numel(),), grad=False) for _m, x in silu
    )


def test_shufflenet_channel_shuffle_copies_a_permuted_view(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each channel shuffle copies a transposed view, rebuilt with its strides; chunk's backward concatenates."""
    from torchvision.models import shufflenetv2

    # Extraction first: where no earlier test of this process has extracted the CNN, it traces the model, and a trace
    # under the recording stand-in below would record every shuffle twice.
    copies = extracted("shufflenet_v2_x1_0", "copy")
    shuffled: list[torch.Tensor] = []
    real = shufflenetv2.channel_shuffle

    def recording(x: torch.Tensor, groups: int) -> torch.Tensor:
        b, c, h, w = x.shape
        shuffled.append(x.view(b, groups, c // groups, h, w).transpose(1, 2))
        return real(x, groups)

    monkeypatch.setattr(shufflenetv2, "channel_shuffle", recording)
    model("shufflenet_v2_x1_0")(torch.randn(2, 3, SIZE, SIZE))
    assert sum(copies.values()) == len(shuffled) and all("grad" not in s.arguments for s in copies)  # a backward
    make = op_bench._Make(2, torch.float32, CPU, False, True)
    assert {(tuple(x.shape), x.stride()) for x in shuffled} == {
        (tuple(v.shape), v.stride()) for v in (make.input(s)[0] for s in copies)
    }
    stride_one = [m for m in model("shufflenet_v2_x1_0").modules() if isinstance(m, shufflenetv2.InvertedResidual)]
    assert sum(extracted("shufflenet_v2_x1_0", "split").values()) == sum(1 for m in stride_one if m.stride == 1)


NEW_KINDS = ("linear", "layer_norm", "mul", "bernoulli", "accumulate", "copy", "split", "add")


def new_kinds() -> list[OpSignature]:
    """One signature of each kind the extraction used to drop, as read from real CNNs."""
    chosen: dict[str, OpSignature] = {}
    for name in ("convnext_tiny", "shufflenet_v2_x1_0", "efficientnet_b0", "resnet18"):
        for sig in cnn_zoo.conv_layers(name, SIZE).ops:
            a = sig.arguments
            new = (
                (sig.op == "linear" and sig.shape[0] > 1) or "layout" in a or a.get("step") or a.get("grad") is False
                or sig.op in ("bernoulli", "accumulate", "copy", "split")
            )  # fmt: skip
            key = f"{sig.op}/{sorted(a)}"
            if new and sig.op in NEW_KINDS and key not in chosen:
                chosen[key] = sig
    return list(chosen.values())


@pytest.fixture
def memory_fraction(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A memory guard that lets batch 2 through and refuses batch 2^30 of any of these ops."""
    monkeypatch.setenv("AGENT_MEMORY_FRACTION", "0.01")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.parametrize("precision", ["fp32", "amp_bf16"])
def test_each_new_kind_is_measured_with_its_phases_and_oom_as_data(precision: str, memory_fraction: None) -> None:
    """op_bench times each new kind at a small batch (forward and backward, or one phase where no gradient flows)
    and records what would not fit as out of memory, as for every other op."""
    sigs = new_kinds()
    assert {s.op for s in sigs} == set(NEW_KINDS)
    config = TrainConfig(precision=precision)  # type: ignore[arg-type]
    policy = Policy(time_cap_s=0.05, min_rounds=1, max_rounds=2, max_reps=2, quiet_wait=float("inf"))
    for sig in sigs:
        saved: dict[int, Outcome] = {}
        per_step = bool(sig.arguments.get("step"))  # no batch dimension: its size does not grow with the batch
        sizes = [2] if per_step else [2, 2**30]
        left = op_bench.measure(
            sig, sizes, config, CPU, policy=policy, window_points=2, save=saved.__setitem__, stop=lambda: False
        )
        assert left == [] and set(saved) == set(sizes), sig
        assert per_step or (saved[2**30].oom and "memory guard" in str(saved[2**30].reason)), sig
        timings = saved[2].timings
        assert timings is not None, (sig, saved[2].reason)
        one_phase = sig.op in NO_BACKWARD or sig.arguments.get("grad") is False
        assert set(timings) == ({"step"} if one_phase else {"forward", "backward"}), sig
        assert all(t.value_ms > 0 for t in timings.values()), sig
