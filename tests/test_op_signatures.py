"""Non-conv op signatures: canonical, shared by CNNs, counted as torchvision runs its modules; measured by agents."""

import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torchvision

from gpu_agent import op_bench
from shared import cnn_zoo, layers, ops, tasks
from shared.op_signatures import OpSignature, from_aten
from shared.training import TrainConfig
from tests.conftest import Stack, queued_tasks
from tests.test_agent import rows
from tests.test_agent_life import SLOW_AGENT, wait_until

SIZE = 64
OP_BATCH_SIZES = [2, 3, 4, 5]


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


def test_resnet18_counts_follow_its_modules() -> None:
    """Each ReLU, BatchNorm2d and Linear call of resnet18 is one signature use, of its per-sample shape."""
    relus = module_calls("resnet18", torch.nn.ReLU)  # one module called twice per BasicBlock: hooks count both
    assert extracted("resnet18", "relu") == Counter(
        {OpSignature.of("relu", (_numel(shape),)): n for shape, n in relus.items()}
    )
    norms = module_calls("resnet18", torch.nn.BatchNorm2d)
    assert extracted("resnet18", "batch_norm") == Counter(
        {OpSignature.of("batch_norm", shape): n for shape, n in norms.items()}
    )
    model = torchvision.models.resnet18()
    blocks = sum(isinstance(m, torchvision.models.resnet.BasicBlock) for m in model.modules())
    assert sum(extracted("resnet18", "add").values()) == blocks  # out += identity, once per block
    fc = model.fc
    assert extracted("resnet18", "linear") == Counter(
        {OpSignature.of("linear", (1, fc.in_features), out=fc.out_features, bias=True): 1}
    )
    assert sum(extracted("resnet18", "cross_entropy").values()) == 1
    (step,) = extracted("resnet18", "optimizer")
    assert step.arguments["shapes"] == [list(p.shape) for p in model.parameters()]


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def test_signatures_are_shared_across_cnns() -> None:
    """resnet34 uses resnet18's ops (more often) and only its optimizer step is its own."""
    r18 = cnn_zoo.conv_layers("resnet18", SIZE)
    r34 = cnn_zoo.conv_layers("resnet34", SIZE)
    assert {s.op for s in set(r34.ops) - set(r18.ops)} == {"optimizer"}
    assert sum(r34.op_counts) > sum(r18.op_counts)
    # Same op and size in any CNN, in-place or not: one signature, one hash.
    x = torch.empty(2, 64, 8, 8, device="meta")
    inplace, plain = from_aten("relu_", (x,), x, 2), from_aten("relu", (x,), x, 2)
    assert inplace == plain and inplace is not None and inplace.hash == OpSignature.from_json(plain.to_json()).hash


def test_every_op_of_the_calibration_cnns_runs_on_the_agent() -> None:
    """The agent can build and run forward and backward of every op signature (and optimizer step) it may be sent."""
    from worker.calibrate import DEFAULT_CNNS

    sigs = {s for cnn in DEFAULT_CNNS for s in cnn_zoo.conv_layers(cnn, SIZE).ops}
    config = TrainConfig(optimizer="adamw", precision="amp_fp16", channels_last=True)
    for sig in sigs:
        prepared = op_bench.prepare(sig, 2, config, torch.device("cpu"))
        assert set(prepared.phases) == ({"step"} if sig.op == "optimizer" else {"forward", "backward"}), sig
        for phase in prepared.phases.values():
            phase()


@pytest.fixture
def stack(service_env: dict[str, str], tmp_path: Path) -> Iterator[Stack]:
    """Processes started by the test, stopped afterwards."""
    s = Stack(service_env, tmp_path)
    s.env.update(SLOW_AGENT, AGENT_HEARTBEAT_S="1", BENCH_TIME_CAP_S="2")  # an op window: about a second
    yield s
    for name in list(s.procs):
        s.stop(name, signal.SIGKILL)


def send_first_norm() -> int:
    """Send one op task (resnet18's first batch norm at 224 px, four batch sizes); returns its op signature id."""
    layers.register_builtin(name="resnet18", image_size=224)
    members = ops.members(name="resnet18", image_size=224, num_classes=1000)
    sig_id, spec, _count = next(m for m in members if m[1]["op"] == "batch_norm" and m[1]["shape"][0] == 64)
    item = {"signature_id": sig_id, "hash": "", "spec": spec, "batch_sizes": OP_BATCH_SIZES}
    tasks.send(
        tasks.BENCH_OPS, queue=tasks.bench_queue("local"), machine_type="local",
        config=TrainConfig().model_dump(), items=[item],
    )  # fmt: skip
    return sig_id


def stored() -> list[dict[str, Any]]:
    """Op rows in the order they were written."""
    return rows("SELECT id, batch_size, variant, environment_id, forward_ms FROM op_benchmarks ORDER BY id")


def test_sigterm_and_kill_mid_op_window_leave_no_duplicate(stack: Stack, clean_db: None) -> None:
    """SIGTERM finishes the op window and requeues; kill -9 redelivers; every batch size is stored once."""
    stack.start("agent")
    send_first_norm()
    wait_until(lambda: stored(), "a first op row", stack)
    time.sleep(0.3)
    before = stored()
    assert stack.stop("agent") == 0
    at_exit = stored()
    assert len(at_exit) == len(before) + 1 < len(OP_BATCH_SIZES), stack.log("agent")[-3000:]
    assert queued_tasks("bench.local") == [tasks.BENCH_OPS]

    stack.start("agent")
    wait_until(lambda: len(stored()) > len(at_exit), "a row after the restart", stack)
    stack.stop("agent", signal.SIGKILL)
    stack.env["VISIBILITY_TIMEOUT_S"] = "2"  # so the unacknowledged message comes back within the test
    stack.start("agent")
    wait_until(lambda: len(stored()) == len(OP_BATCH_SIZES), "all op rows", stack)
    time.sleep(2.5)  # a second delivery, if any, would have stored a duplicate by now
    final = stored()
    assert final[: len(at_exit)] == at_exit  # resumed: nothing stored was measured again
    assert sorted(r["batch_size"] for r in final) == OP_BATCH_SIZES
    assert all(r["variant"] == "fp32" and r["forward_ms"] > 0 for r in final)
