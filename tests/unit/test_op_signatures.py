"""Op signatures read from CNNs: counts that follow the modules, sharing across CNNs, each op runnable."""

from collections import Counter
from typing import Any

import torch
import torchvision

from gpu_agent import op_bench
from shared.cnn import zoo as cnn_zoo
from shared.cnn.aten_ops import from_aten
from shared.cnn.op_signatures import NO_BACKWARD, OpSignature
from shared.training import TrainConfig

SIZE = 64


def module_calls(name: str, kind: type[torch.nn.Module]) -> Counter[tuple[int, ...]]:
    """Per-sample input shapes of every call of modules of one kind in a real forward pass (hooks count reuse)."""
    model = torchvision.models.get_model(name, weights=None).train()
    seen: Counter[tuple[int, ...]] = Counter()

    def hook(_m: Any, inputs: tuple[torch.Tensor, ...], _out: Any) -> None:
        seen[tuple(inputs[0].shape[1:])] += 1

    for m in model.modules():
        if isinstance(m, kind):
            m.register_forward_hook(hook)
    model(torch.randn(2, 3, SIZE, SIZE))
    return seen


def extracted(name: str, op: str) -> Counter[OpSignature]:
    """The op signatures of one kind extraction recorded for a CNN, with their counts."""
    read = cnn_zoo.conv_layers(name, SIZE)
    return Counter({s: n for s, n in zip(read.ops, read.op_counts, strict=True) if s.op == op})


def numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def test_resnet18_counts_follow_its_modules() -> None:
    """Each ReLU, BatchNorm2d and Linear call of resnet18 is one signature use, of its per-sample shape."""
    relus = module_calls("resnet18", torch.nn.ReLU)  # one module called twice per BasicBlock: hooks count both
    assert extracted("resnet18", "relu") == Counter(
        {OpSignature.of("relu", (numel(shape),)): n for shape, n in relus.items()}
    )
    norms = module_calls("resnet18", torch.nn.BatchNorm2d)
    assert extracted("resnet18", "batch_norm") == Counter(
        {OpSignature.of("batch_norm", shape): n for shape, n in norms.items()}
    )
    model = torchvision.models.resnet18()
    blocks = sum(isinstance(m, torchvision.models.resnet.BasicBlock) for m in model.modules())
    adds = extracted("resnet18", "add")
    assert sum(n for s, n in adds.items() if not s.arguments.get("step")) == blocks  # out += identity, once per block
    # Each batch norm's num_batches_tracked += 1: once per step, whatever the batch size.
    counter = OpSignature.of("add", (1,), other=0, batched=False, step=True, grad=False, dtype="int64")
    assert adds[counter] == sum(norms.values())
    fc = model.fc
    assert extracted("resnet18", "linear") == Counter(
        {OpSignature.of("linear", (1, fc.in_features), out=fc.out_features, bias=True): 1}
    )
    assert sum(extracted("resnet18", "cross_entropy").values()) == 1
    (step,) = extracted("resnet18", "optimizer")
    assert step.arguments["shapes"] == [list(p.shape) for p in model.parameters()]


def test_signatures_are_shared_across_cnns() -> None:
    """resnet34 uses resnet18's ops (more often) and only its optimizer step is its own."""
    r18 = cnn_zoo.conv_layers("resnet18", SIZE)
    r34 = cnn_zoo.conv_layers("resnet34", SIZE)
    assert {s.op for s in set(r34.ops) - set(r18.ops)} == {"optimizer"}
    assert sum(r34.op_counts) > sum(r18.op_counts)
    # Same op and size in any CNN, in-place or not: one signature, one hash.
    x = torch.empty(2, 64, 8, 8, device="meta")
    inplace, plain = from_aten("relu_", (x,), x, 2), from_aten("relu", (x,), x, 2)
    assert (
        inplace == plain
        and inplace is not None
        and plain is not None
        and inplace.hash == OpSignature.from_json(plain.to_json()).hash
    )


def test_every_op_of_the_calibration_cnns_runs_on_the_agent() -> None:
    """The agent can build and run forward and backward of every op signature (and optimizer step) it may be sent."""
    from calibration.run import DEFAULT_CNNS

    sigs = {s for cnn in DEFAULT_CNNS for s in cnn_zoo.conv_layers(cnn, SIZE).ops}
    config = TrainConfig(optimizer="adamw", precision="amp_fp16", channels_last=True)
    for sig in sigs:
        prepared = op_bench.prepare(sig, 2, config, torch.device("cpu"))
        one_phase = sig.op == "optimizer" or sig.op in NO_BACKWARD or sig.arguments.get("grad") is False
        assert set(prepared.phases) == ({"step"} if one_phase else {"forward", "backward"}), sig
        for phase in prepared.phases.values():
            phase()
