"""Whole training iterations of a CNN: zero_grad, forward, loss, backward, optimizer step."""

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
import torchvision

from gpu_agent import memory, windows
from gpu_agent.layer_bench import DTYPES
from gpu_agent.timing import Policy, sync
from gpu_agent.windows import Outcome, Prepared, Spec
from shared import cnn_zoo


def measure(
    cnn: str,
    batch_sizes: Sequence[int],
    image_size: int,
    optimizer: str,
    precision: str,
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
        model, opt = build(cnn, optimizer, precision, device)
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
            optimizer=optimizer,
            precision=precision,
            gpu=device.type == "cuda",
        )

    spec = Spec(
        prepare=lambda bs: prepare(model, opt, bs, image_size, precision, device),
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
    return windows.run(
        batch_sizes, spec, device=device, policy=policy, window_points=window_points, save=save, stop=stop
    )


def build(cnn: str, optimizer: str, precision: str, device: torch.device) -> tuple[torch.nn.Module, Any]:
    """A freshly initialised CNN in training mode on the device, with its optimizer."""
    kwargs: dict[str, Any] = {"weights": None}
    if cnn in ("googlenet", "inception_v3"):
        kwargs["init_weights"] = False
    model = torchvision.models.get_model(cnn, **kwargs).to(device=device, dtype=DTYPES[precision]).train()
    params = model.parameters()
    opt: torch.optim.Optimizer = (
        torch.optim.SGD(params, lr=0.01, momentum=0.9) if optimizer == "sgd" else torch.optim.Adam(params, lr=1e-3)
    )
    return model, opt


def prepare(
    model: torch.nn.Module, opt: Any, batch_size: int, image_size: int, precision: str, device: torch.device
) -> Prepared:
    """Synthetic data of one batch size already on the device, and one step run once (not a sample)."""
    x = torch.randn(batch_size, 3, image_size, image_size, device=device, dtype=DTYPES[precision])
    target = torch.randint(0, 1000, (batch_size,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        out = model(x)
        logits = out.logits if hasattr(out, "logits") else out  # inception/googlenet aux outputs
        loss_fn(logits, target).backward()
        opt.step()

    step()
    sync(device)
    return Prepared(phases={"step": step})
