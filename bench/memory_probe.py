"""One measured training-step peak on this CPU, in a fresh process (run by bench/memory.py).

    .venv/bin/python bench/memory_probe.py resnet18 112 16 sgd fp32 [threads]   # prints one JSON line

The peak is the most bytes held by torch's CPU allocator at once, from torch.profiler's memory
events (every tensor allocation and free, with its size) summed in time order from before the
model is built: the CPU counterpart of torch.cuda.max_memory_allocated. Peak RSS above the
post-import baseline is printed beside it; it also holds oneDNN's primitive caches, glibc's
retained heap and the profiler's own records, so it is not what the model predicts. Threads (default 1) change
the peak a little: some kernels keep a buffer per thread.
"""

import json
import resource
import sys
from pathlib import Path
from typing import Any

import torch
import torchvision
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shared.cnn import zoo as cnn_zoo  # noqa: E402


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def optimizer_of(name: str, params: Any) -> torch.optim.Optimizer:
    """The optimizer as PyTorch users write it (default foreach implementation)."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01)
    if name == "sgd_momentum":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3)
    return torch.optim.AdamW(params, lr=1e-3)


def probe(cnn: str, image_size: int, batch: int, optimizer: str, precision: str, threads: int = 1) -> dict[str, Any]:
    """Two training steps (the second with optimizer state); the allocator's peak and the RSS peak."""
    torch.set_num_threads(threads)  # the machine is shared: one by default
    rss0 = _rss()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model = cnn_zoo.build(cnn, device="cpu").train()
        opt = optimizer_of(optimizer, model.parameters())
        x = torch.randn(batch, 3, image_size, image_size)
        target = torch.randint(0, 1000, (batch,))
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "amp_bf16"):
                out = model(x)
                logits = out.logits if hasattr(out, "logits") else out
                loss = torch.nn.functional.cross_entropy(logits, target)
            loss.backward()
            opt.step()
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    # The raw allocation records (FunctionEvents fold most of them into the op that allocated).
    records = prof.profiler.kineto_results.events() if prof.profiler and prof.profiler.kineto_results else []
    events = sorted((e.start_ns(), e.nbytes()) for e in records if e.name() == "[memory]")
    held = peak = 0
    for _t, delta in events:
        held += delta
        peak = max(peak, held)
    return {
        "cnn": cnn,
        "image_size": image_size,
        "batch_size": batch,
        "optimizer": optimizer,
        "precision": precision,
        "peak_bytes": peak,
        "rss_above_baseline": peak_rss - rss0,
        "parameters": sum(p.numel() for p in model.parameters()),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
    }


if __name__ == "__main__":
    name, size, bs, opt_name, prec = sys.argv[1:6]
    print(json.dumps(probe(name, int(size), int(bs), opt_name, prec, int(sys.argv[6]) if len(sys.argv) > 6 else 1)))
