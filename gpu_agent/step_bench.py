"""Whole training iteration of a CNN: zero_grad, forward, loss, backward, optimizer step."""

import gc
from dataclasses import dataclass
from typing import Any

import torch
import torchvision

from gpu_agent.layer_bench import DTYPES, is_oom
from gpu_agent.timing import Timing, measure


@dataclass(frozen=True)
class StepResult:
    """A whole-step measurement; timing None when it ran out of memory."""

    oom: bool
    timing: Timing | None = None
    reason: str | None = None

    def stats(self) -> dict[str, Any]:
        """Statistics for the stats column."""
        return {"reason": self.reason} if self.oom else {"step": self.timing.to_json() if self.timing else None}


def run(
    cnn: str,
    batch_size: int,
    image_size: int,
    optimizer: str,
    precision: str,
    device: torch.device,
    *,
    time_cap_s: float,
) -> StepResult:
    """Time full training steps on synthetic data already on the device."""
    try:
        return StepResult(oom=False, timing=_run(cnn, batch_size, image_size, optimizer, precision, device, time_cap_s))
    except Exception as exc:
        if not is_oom(exc):
            raise
        return StepResult(oom=True, reason=str(exc).splitlines()[0][:300])
    finally:
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()


def _run(
    cnn: str, batch_size: int, image_size: int, optimizer: str, precision: str, device: torch.device, time_cap_s: float
) -> Timing:
    kwargs: dict[str, Any] = {"weights": None}
    if cnn in ("googlenet", "inception_v3"):
        kwargs["init_weights"] = False
    model = torchvision.models.get_model(cnn, **kwargs).to(device=device, dtype=DTYPES[precision]).train()
    params = model.parameters()
    opt: torch.optim.Optimizer = (
        torch.optim.SGD(params, lr=0.01, momentum=0.9) if optimizer == "sgd" else torch.optim.Adam(params, lr=1e-3)
    )
    x = torch.randn(batch_size, 3, image_size, image_size, device=device, dtype=DTYPES[precision])
    target = torch.randint(0, 1000, (batch_size,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        out = model(x)
        logits = out.logits if hasattr(out, "logits") else out  # inception/googlenet aux outputs
        loss_fn(logits, target).backward()
        opt.step()

    return measure(step, device, time_cap_s=time_cap_s, max_runs=20)
