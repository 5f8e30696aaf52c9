"""Whole training iterations of a CNN as its configuration says: zero_grad, forward, loss, backward, optimizer step.

The optimizer is built as a PyTorch user writes it (torch.optim.SGD with the momentum and weight decay given,
Adam, AdamW; every other argument PyTorch's default, so foreach on CUDA), autocast runs the step for amp_fp16
and amp_bf16 (with a GradScaler for fp16), TF32 matmuls are allowed for tf32 only, channels_last puts the
model and the images in that memory format, and cudnn.benchmark is on for the step only where it asks. The steps
run in a thread of their own, backward included (own_thread): cuDNN keeps the algorithm it chose for a shape per
thread, whichever setting chose it, so without that a step reused the choices of the layer benchmarks or of an
earlier step in another setting, where a training process makes its own. An
untimed step of each batch size (with the optimizer's state in place) records the step's peak memory (the
allocator's, as torch.cuda.max_memory_allocated counts it), stored with the timing.
"""

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, TypeVar

import torch

from gpu_agent import memory, windows
from gpu_agent.timing import Policy, sync
from gpu_agent.windows import Outcome, PointSetup, Prepared
from shared.cnn import zoo as cnn_zoo
from shared.core.errors import InvalidRequest
from shared.training import TrainConfig

AUTOCAST = {"amp_fp16": torch.float16, "amp_bf16": torch.bfloat16}
T = TypeVar("T")


def measure(
    cnn: str,
    batch_sizes: Sequence[int],
    image_size: int,
    config: TrainConfig,
    device: torch.device,
    *,
    policy: Policy,
    window_points: int,
    save: Callable[[int, Outcome], None],
    stop: Callable[[], bool],
) -> list[int]:
    """Time training steps at each batch size, interleaved; returns the batch sizes left by a stop.

    A step the CNN cannot take at a batch size (e.g. batch norm with one value per channel) is
    recorded as infeasible with torch's message; out of memory is recorded as such.
    """
    try:
        model, opt = build(cnn, config, device)
    except InvalidRequest as exc:  # a precision this device's torch cannot run: every point says why
        for bs in batch_sizes:
            save(bs, Outcome(reason=exc.detail))
        return []
    except Exception as exc:
        if not windows.is_oom(exc):
            raise
        reason = windows.first_line(exc.with_traceback(None))
        windows.free(device, collect=True)
        for bs in batch_sizes:
            save(bs, Outcome(oom=True, reason=f"model does not fit: {reason}"))
        return []
    work = cnn_zoo.conv_layers(cnn, image_size).workload

    def footprint(sizes: Sequence[int]) -> int:
        return memory.step_bytes(
            workload=work,
            batch_sizes=sizes,
            image_size=image_size,
            config=config,
            gpu=device.type == "cuda",
        )

    setup = PointSetup(
        prepare=lambda bs: prepare(model, opt, bs, image_size, config, device),
        footprint=footprint,
        # torch raises ValueError for a configuration the model cannot train in (batch norm over
        # a single value per channel); anything else is a failure of the task.
        infeasible=(ValueError,),
    )
    # One untimed step before each block: a whole CNN at several batch sizes has more oneDNN
    # primitives than its cache holds (densenet121: 120 convs × 3 phases × 4 batch sizes), so the
    # first step after a switch rebuilds them (2.5× slower, measured; not with a 4096-entry cache),
    # which training never does.
    policy = replace(policy, rewarm=max(policy.rewarm, 1))
    return own_thread(
        lambda: windows.run(
            batch_sizes, setup, device=device, policy=policy, window_points=window_points, save=save, stop=stop
        )
    )


def own_thread(run: Callable[[], T]) -> T:
    """run() in a new thread that ends with it, its backward passes on that thread too: a fresh cuDNN plan cache.

    PyTorch caches cuDNN's chosen plan per shape in thread-local storage and looks there before it asks whether
    cudnn.benchmark is on; a CUDA backward otherwise runs on autograd's long-lived device thread, whose cache would
    carry one setting's choices into the next. One thread of backward changes no kernel, only which thread
    dispatches them.
    """

    def isolated() -> T:
        with torch.autograd.set_multithreading_enabled(False):
            return run()

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="traincast-step") as pool:
        return pool.submit(isolated).result()


def make_optimizer(params: Any, config: TrainConfig) -> torch.optim.Optimizer:
    """The optimizer the configuration names, with PyTorch's defaults for everything it does not set."""
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=0.01, momentum=config.momentum, weight_decay=config.weight_decay)
    cls = torch.optim.Adam if config.optimizer == "adam" else torch.optim.AdamW
    return cls(params, lr=1e-3, weight_decay=config.weight_decay)


def check_autocast(config: TrainConfig, device: torch.device) -> None:
    """Raise InvalidRequest when this torch cannot autocast to the configuration's dtype on the device."""
    dtype = AUTOCAST.get(config.precision)
    if dtype is None:
        return
    try:
        with torch.autocast(device.type, dtype=dtype):
            out = torch.nn.functional.conv2d(
                torch.ones(1, 1, 3, 3, device=device), torch.ones(1, 1, 1, 1, device=device)
            )
        ok = out.dtype == dtype
    except Exception:  # torch raises (or warns and disables) for an unsupported dtype
        ok = False
    if not ok:
        raise InvalidRequest(
            f"{config.precision} is not supported on {device.type} by torch {torch.__version__} "
            "(autocast to that dtype does not run convolutions in it)"
        )


def build(cnn: str, config: TrainConfig, device: torch.device) -> tuple[torch.nn.Module, Any]:
    """A freshly initialised CNN in training mode on the device (fp32 master weights), with its optimizer."""
    import torchvision  # here, not at the agent's start: its import pulls torch._dynamo (~1.3 s), steps alone need it

    check_autocast(config, device)
    kwargs: dict[str, Any] = {"weights": None}
    if cnn in ("googlenet", "inception_v3"):
        kwargs["init_weights"] = False
    model = torchvision.models.get_model(cnn, **kwargs).to(device=device).train()
    if config.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model, make_optimizer(model.parameters(), config)


def prepare(
    model: torch.nn.Module, opt: Any, batch_size: int, image_size: int, config: TrainConfig, device: torch.device
) -> Prepared:
    """Synthetic data of one batch size already on the device, and one step run once (not a sample), whose peak
    memory is recorded (gpu_agent/memory.peak_of)."""
    fmt = torch.channels_last if config.channels_last else torch.contiguous_format
    x = torch.randn(batch_size, 3, image_size, image_size, device=device).to(memory_format=fmt)
    target = torch.randint(0, 1000, (batch_size,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()
    dtype = AUTOCAST.get(config.precision)
    # GradScaler only for fp16 (bf16 has fp32's range); it scales the loss, unscales and checks the gradients for inf
    # each step, whatever its scale. Training starts it at 2**16 and halves it on every step whose gradients overflow,
    # skipping that step's optimizer: fresh weights on random data overflow for several steps (on a CPU: vgg11 at
    # batch 8-32, mobilenet_v2 for 3-4), so timed steps would be skips without the optimizer's work, where training
    # past its first steps skips about one in growth_interval (2,000). A scale of 1 that never grows keeps every
    # timed step a whole one: the same kernels, no overflow.
    scaler = (
        torch.amp.GradScaler(device.type, init_scale=1.0, growth_interval=2**30)
        if config.precision == "amp_fp16"
        else None
    )
    tf32 = config.precision == "tf32"

    def step() -> None:
        torch.backends.cuda.matmul.allow_tf32 = tf32  # process-wide: set on every step, other tasks share it
        # Process-wide too, and the layer benchmarks have their own (environment.configure): set for the step only.
        agent_setting, torch.backends.cudnn.benchmark = torch.backends.cudnn.benchmark, config.cudnn_benchmark
        try:
            _step()
        finally:
            torch.backends.cudnn.benchmark = agent_setting

    def _step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            out = model(x)
            logits = out.logits if hasattr(out, "logits") else out  # inception/googlenet aux outputs
            loss = loss_fn(logits, target)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

    if not opt.state and (config.optimizer != "sgd" or config.momentum):
        # Its state is created at the end of the first step, after the activations are freed; every later step
        # holds both, so the peak is taken on a step that starts with the state.
        step()
    opt.zero_grad(set_to_none=True)  # the previous point's gradients are no part of this step
    own = [*model.parameters(), *model.buffers(), *optimizer_state(opt), x, target]
    peak = memory.peak_of(step, own=own, device=device)
    sync(device)
    info: dict[str, Any] = {"peak_memory_bytes": peak}
    if scaler is not None:
        info["grad_scale"] = scaler.get_scale()  # how the row was timed, in its stats: 1.0, never grown
    return Prepared(phases={"step": step}, info=info)


def optimizer_state(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The tensors the optimizer keeps between steps (momentum buffers, Adam's moments)."""
    return [v for state in opt.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
