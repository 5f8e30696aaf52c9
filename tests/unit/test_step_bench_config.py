"""The agent's whole-step bench builds exactly the optimizer and precision a configuration names (CPU, tiny CNN)."""

import threading

import pytest
import torch

from gpu_agent import environment, step_bench, windows
from gpu_agent.timing import Policy
from shared.core.errors import InvalidRequest
from shared.training import TrainConfig

CPU = torch.device("cpu")


def tiny() -> torch.nn.Sequential:
    """A small CNN: conv, batch norm, ReLU, pooling, linear."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 1000),
    )  # fmt: skip


def stepped(config: TrainConfig) -> tuple[torch.nn.Sequential, torch.optim.Optimizer, list[torch.dtype]]:
    """A tiny CNN after one prepared step with that configuration, and the dtypes its conv output had."""
    model = tiny()
    if config.channels_last:
        model = model.to(memory_format=torch.channels_last)
    seen: list[torch.dtype] = []
    model[0].register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    opt = step_bench.make_optimizer(model.parameters(), config)
    step_bench.prepare(model, opt, 2, 8, config, CPU).phases["step"]()
    return model, opt, seen


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_keeps_momentum_buffers_only_with_momentum(momentum: float) -> None:
    """SGD(momentum, weight_decay) as asked: a momentum buffer per parameter exists iff momentum > 0."""
    model, opt, _ = stepped(TrainConfig(optimizer="sgd", momentum=momentum, weight_decay=1e-4))
    assert type(opt) is torch.optim.SGD
    assert opt.param_groups[0]["momentum"] == momentum and opt.param_groups[0]["weight_decay"] == 1e-4
    buffers = [opt.state[p].get("momentum_buffer") for p in model.parameters()]
    assert all(b is not None for b in buffers) if momentum else all(b is None for b in buffers)


@pytest.mark.parametrize(("name", "cls"), [("adam", torch.optim.Adam), ("adamw", torch.optim.AdamW)])
def test_adam_and_adamw_with_two_states(name: str, cls: type) -> None:
    """Adam and AdamW of their own types, with the weight decay given and two states per parameter."""
    model, opt, _ = stepped(TrainConfig(optimizer=name, weight_decay=0.01))  # type: ignore[arg-type]
    assert type(opt) is cls and opt.param_groups[0]["weight_decay"] == 0.01
    state = opt.state[next(model.parameters())]
    assert "exp_avg" in state and "exp_avg_sq" in state


def test_autocast_runs_convs_in_the_precision_and_keeps_fp32_master_weights() -> None:
    """amp_bf16 runs the conv in bfloat16 (the weights stay fp32); fp32 and tf32 run it in float32."""
    model, _, seen = stepped(TrainConfig(precision="amp_bf16"))
    assert seen and set(seen) == {torch.bfloat16}
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    for precision in ("fp32", "tf32"):
        _, _, seen = stepped(TrainConfig(precision=precision))  # type: ignore[arg-type]
        assert set(seen) == {torch.float32}


def test_fp16_autocast_runs_with_a_grad_scaler_or_is_refused_clearly() -> None:
    """amp_fp16 on the CPU: run in float16 with a GradScaler where this torch can, else refused by name."""
    config = TrainConfig(precision="amp_fp16")
    try:
        step_bench.check_autocast(config, CPU)
    except InvalidRequest as exc:
        assert "amp_fp16 is not supported on cpu by torch" in exc.detail
        return
    _, _, seen = stepped(config)
    assert set(seen) == {torch.float16}


def test_every_timed_fp16_step_runs_the_optimizer() -> None:
    """amp_fp16 with AdamW: no timed step is one GradScaler skips. With gradients that overflow float16 at
    GradScaler's default starting scale (2**16), every step would skip the optimizer's work, where training past its
    first steps runs it on nearly every step."""
    config = TrainConfig(optimizer="adamw", weight_decay=0.01, precision="amp_fp16")
    try:
        step_bench.check_autocast(config, CPU)
    except InvalidRequest as exc:
        assert "amp_fp16 is not supported on cpu by torch" in exc.detail
        return
    model = tiny()
    norm = model[1]
    assert isinstance(norm, torch.nn.BatchNorm2d)
    with torch.no_grad():
        norm.weight.fill_(1000.0)  # batch norm's scale: activations, and the linear layer's gradients, large
    opt = step_bench.make_optimizer(model.parameters(), config)
    prepared = step_bench.prepare(model, opt, 2, 8, config, CPU)
    assert prepared.info["grad_scale"] == 1.0  # stored in the row's stats: how it was timed
    step = prepared.phases["step"]
    first = next(model.parameters())
    assert opt.state[first], "the prepared steps skipped the optimizer"
    before = int(opt.state[first]["step"])
    for _ in range(3):
        step()
    assert int(opt.state[first]["step"]) == before + 3


def test_channels_last_images_and_weights() -> None:
    """channels_last puts the conv weights and the images in that memory format."""
    model, _, _ = stepped(TrainConfig(channels_last=True))
    conv = model[0]
    assert isinstance(conv, torch.nn.Conv2d)
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)


def test_cudnn_benchmark_is_set_for_the_step_only() -> None:
    """The step runs with cudnn.benchmark as its configuration asks and leaves the process's setting as it found it
    (the agent's layer benchmarks have their own)."""
    seen: list[bool] = []
    for asked in (True, False):
        torch.backends.cudnn.benchmark = not asked
        model, opt, _ = stepped(TrainConfig(cudnn_benchmark=asked))
        hook = model[0].register_forward_hook(lambda *_: seen.append(torch.backends.cudnn.benchmark))
        prepared = step_bench.prepare(model, opt, 2, 8, TrainConfig(cudnn_benchmark=asked), CPU)
        prepared.phases["step"]()
        hook.remove()
        assert seen[-1] is asked and torch.backends.cudnn.benchmark is (not asked)


def test_whole_steps_run_forward_and_backward_in_a_thread_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """measure() times its steps on a new thread that also runs their backward (cuDNN caches its chosen algorithms per
    thread: a step must not inherit the layer benchmarks' or another setting's), and errors come back to the caller."""
    seen: list[tuple[str, int, bool]] = []

    class Spy(torch.autograd.Function):
        @staticmethod
        def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            seen.append(("forward", threading.get_ident(), torch.autograd.is_multithreading_enabled()))
            return x.clone()

        @staticmethod
        def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            seen.append(("backward", threading.get_ident(), torch.autograd.is_multithreading_enabled()))
            return grad

    class Spied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = tiny()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(Spy.apply(x.requires_grad_()))

    def build(*_: object) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        model = Spied()
        return model, step_bench.make_optimizer(model.parameters(), TrainConfig())

    monkeypatch.setattr(step_bench, "build", build)
    saved: list[int] = []
    left = step_bench.measure(
        "resnet18", [2], 8, TrainConfig(), CPU, policy=Policy(time_cap_s=0.05, min_rounds=1), window_points=1,
        save=lambda bs, outcome: saved.append(bs), stop=lambda: False,
    )  # fmt: skip
    assert left == [] and saved == [2]
    assert {kind for kind, _, _ in seen} == {"forward", "backward"}
    threads = {tid for _, tid, _ in seen}
    assert len(threads) == 1 and threading.get_ident() not in threads, seen
    assert not any(multi for _, _, multi in seen)

    def fails(*_: object, **__: object) -> list[int]:
        raise RuntimeError("a failure inside the step's thread")

    monkeypatch.setattr(windows, "run", fails)
    with pytest.raises(RuntimeError, match="inside the step's thread"):
        step_bench.measure("resnet18", [2], 8, TrainConfig(), CPU, policy=Policy(time_cap_s=0.05), window_points=1,
                           save=lambda *_: None, stop=lambda: False)  # fmt: skip


@pytest.mark.parametrize("search", [False, True])
def test_layer_benchmarks_search_algorithms_only_where_the_agent_is_told(
    monkeypatch: pytest.MonkeyPatch, search: bool
) -> None:
    """The agent's cudnn.benchmark is AGENT_CUDNN_BENCHMARK's (off by default: cuDNN's heuristics, as PyTorch)."""
    from shared.core.settings import get_settings

    monkeypatch.setenv("AGENT_CUDNN_BENCHMARK", "true" if search else "false")
    get_settings.cache_clear()
    environment.configure.cache_clear()
    before = torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.benchmark = not search
        environment.configure()
        assert torch.backends.cudnn.benchmark is search
    finally:
        torch.backends.cudnn.benchmark = before
        get_settings.cache_clear()
        environment.configure.cache_clear()
