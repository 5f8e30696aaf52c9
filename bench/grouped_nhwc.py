"""What channels_last does to CNNs with grouped convs in the reference's answers, beside the rule it replaced.

Run: .venv/bin/python bench/grouped_nhwc.py  (no database; under a minute; writes its section of docs/PERFORMANCE.md)
Predicted NHWC step over NCHW step (autocast fp16, SGD with momentum, cudnn.benchmark off, 224 px) for CNNs whose
convs are all dense, partly grouped and mostly grouped, on three GPUs. Baseline, in the same run: the rule before,
where grouped convs took the dense tensor-core convs' NHWC multiplier (grouped.is_grouped answering no for every
conv). No measurement of ours has grouped convs in NHWC: these are answers, not errors.
"""

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.perf_doc import publish  # noqa: E402
from prediction.reference import convs, grouped, load, sanity  # noqa: E402
from prediction.reference.specs import GpuSpecs  # noqa: E402
from prediction.reference.wholestep import network  # noqa: E402
from shared.training import TrainConfig  # noqa: E402

COMMAND = ".venv/bin/python bench/grouped_nhwc.py"
TITLE = "channels_last and grouped convs (bench/grouped_nhwc.py)"
CNNS = ("resnet50", "resnext50_32x4d", "regnet_y_1_6gf", "regnet_y_400mf", "regnet_x_400mf")
GPUS = ("RTX-3090", "A100-SXM4-80GB", "H100-SXM5-80GB")
BATCHES = (32, 128, 256)
AMP = TrainConfig(optimizer="sgd", momentum=0.9, precision="amp_fp16")


@contextmanager
def old_rule() -> Iterator[None]:
    """The rule before: no conv counted as grouped, so grouped convs took the dense convs' NHWC multiplier."""
    with mock.patch.object(grouped, "is_grouped", lambda g: np.zeros(len(g.cin), dtype=bool)):
        yield


def ratios(cnn: str, gpu: GpuSpecs) -> list[float]:
    """NHWC step over NCHW step at each of BATCHES."""
    layers, work = network(cnn, 224)
    model = load()
    steps = {
        nhwc: model.predict_steps(convs=layers, workload=work, batch_sizes=list(BATCHES), gpu=gpu,
                                  training=AMP.model_copy(update={"channels_last": nhwc}))
        for nhwc in (False, True)
    }  # fmt: skip
    return [b.step_ms / a.step_ms for a, b in zip(steps[False], steps[True], strict=True)]


def grouped_share(cnn: str) -> float:
    """The share of a CNN's forward conv FLOPs in grouped (not depthwise) convs."""
    layers, _ = network(cnn, 224)
    g = convs.geometry([s for s, _ in layers])
    per_call = convs.phase_work(g, np.ones((1, 1)), "fp32")["forward"][0][:, 0]
    flops = per_call * np.array([n for _, n in layers], dtype=float)
    return float(flops[grouped.is_grouped(g)].sum() / flops.sum())


def report() -> str:
    """The markdown section."""
    rows = sanity.gpu_rows()
    head = " | ".join(f"b{b} now | b{b} before" for b in BATCHES)
    lines = [
        f"Command: `{COMMAND}` (no database; under a minute). Predicted NHWC step ÷ NCHW step, autocast fp16, SGD with "
        "momentum, cudnn.benchmark off, 224 px, by the shipped model; *before*: the same run with grouped convs "
        "taking the dense convs' NHWC multiplier, the rule this replaced. *Grouped*: the share of the CNN's forward "
        "conv FLOPs in grouped convs that are not depthwise.",
        "",
        f"| GPU | CNN | grouped | {head} |",
        "|---|---|---:|" + "---:|---:|" * len(BATCHES),
    ]
    for name in GPUS:
        gpu = GpuSpecs.from_row(rows[name])
        for cnn in CNNS:
            now = ratios(cnn, gpu)
            with old_rule():
                before = ratios(cnn, gpu)
            cells = " | ".join(f"{a:.2f}× | {b:.2f}×" for a, b in zip(now, before, strict=True))
            lines.append(f"| {name} | {cnn} | {grouped_share(cnn):.0%} | {cells} |")
    lines += [
        "",
        "What it rests on: no step or layer of ours ran grouped convs in NHWC; the principle is public reports that "
        "cuDNN has no fast NHWC kernels for them (PyTorch issues 34977: ResNeXt-101 layers 30-40x slower in NHWC on a "
        'V100, cuDNN 7.6; 70954: "generally unusable for quite a range of group sizes" on an RTX 3090, PyTorch '
        "1.10; AMD's MIGraphX forces NCHW for them, 2025) and, from the team's check on an RTX 3090 with AMP "
        "(PyTorch 1.12), regnet_x_400mf's step 1.51x slower in NHWC where resnet50's was 0.68x. The answer costs "
        "them at their NCHW time plus copies of their activations to and from NCHW: the least such a fallback costs, "
        "so a CNN that is mostly grouped convs still gains a little from channels_last here where that check lost "
        "51%. How much slower cuDNN's NHWC grouped kernels are, and on which versions, needs a GPU "
        "(docs/GPU.md, next-GPU item 6).",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    publish(TITLE, report())
