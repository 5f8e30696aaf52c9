"""Public GPU figures for bench/memory.py: CDECatapult's VGG-16 peaks, Lambda's ResNet-50 batch sizes."""

import csv
import statistics
from pathlib import Path
from typing import Any

from shared.cnn import step_memory
from shared.cnn import zoo as cnn_zoo
from shared.cnn.workload import WorkloadJson

PUBLIC = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "public"
CDE = PUBLIC / "cdecatapult"
# Lambda's single-GPU rows and each GPU's memory (GB as sold, counted as 10^9 bytes: the smaller reading).
LAMBDA_GPUS = {
    "LambdaCloud V100 16GB": 16, "LambdaCloud A10": 24, "RTX 3090": 24, "LambdaCloud A100 40GB PCIe": 40,
    "RTX A6000": 48, "A100 80GB SXM4": 80,
}  # fmt: skip


def workload(cnn: str, image_size: int) -> WorkloadJson:
    """The CNN's workload as a job reads it (saved bytes per sample included)."""
    return cnn_zoo.conv_layers(cnn, image_size).workload.copy()


def saved_over_activation(cnn: str, image_size: int) -> float:
    """The bytes backward keeps per sample over the activations' bytes, as the CNN's workload records them."""
    work = workload(cnn, image_size)
    saved, activation = work["saved_bytes"], work["activation_bytes"]
    assert saved is not None and activation is not None, f"{cnn}'s workload has no saved or activation bytes"
    return saved / activation


def old_guard(r: dict[str, Any]) -> float:
    """The agent's guard estimate before this model: (2 + states) × params + 4 × conv inputs and outputs."""
    convs = cnn_zoo.conv_layers(r["cnn"], r["image_size"])
    per_sample = sum(
        c * (s.in_channels * s.in_h * s.in_w + _out(s)) for s, c in zip(convs.signatures, convs.counts, strict=True)
    )
    states = 2 if r["optimizer"] in ("adam", "adamw") else 1
    inputs = r["batch_size"] * 3 * r["image_size"] ** 2
    return 4.0 * ((2 + states) * r["parameters"] + inputs + 4 * per_sample * r["batch_size"])


def _out(sig: Any) -> int:
    from gpu_agent.memory import out_numel

    return out_numel(sig)


def ape(pred: float, real: float) -> float:
    """Absolute percentage error."""
    return abs(pred - real) / real * 100


def cdecatapult() -> dict[str, list[tuple[int, float]]]:
    """VGG-16 on a V100: (batch size, peak bytes) per optimizer file (MB = 10^6 bytes, as the script wrote)."""
    out: dict[str, list[tuple[int, float]]] = {}
    for name in ("sgd", "adam"):
        [path] = CDE.glob(f"benchmark_VGG16_V100_{name}_*.csv")
        with path.open() as f:
            rows = list(csv.reader(f, skipinitialspace=True))[1:]
        out[name] = [(int(r[3]), float(r[6]) * 1e6) for r in rows]
    return out


def gpu_report() -> tuple[list[str], dict[str, float]]:
    """GPU_SCALE and GPU_WORKSPACE fitted on the SGD file; the error on the Adam file, which the fit never saw."""
    import numpy as np

    vgg = workload("vgg16", 224)
    vgg_parameters = vgg["parameters"]
    assert vgg_parameters is not None, "a torchvision CNN's workload counts its parameters"
    data = cdecatapult()
    tensors = {
        name: [
            step_memory.step_peak(vgg, bs, optimizer=name, gpu=True, tensors_only=True).total  # type: ignore[union-attr]
            for bs, _ in data[name]
        ]
        for name in data
    }
    a = np.column_stack([tensors["sgd"], np.ones(len(tensors["sgd"]))])
    scale, fixed = np.linalg.lstsq(a, np.array([m for _, m in data["sgd"]]), rcond=None)[0]
    lines = [
        "| optimizer | batch | measured MB | model MB | error | parameters × 4 | old guard estimate |",
        "|---|---|---|---|---|---|---|",
    ]
    errs: dict[str, list[float]] = {"sgd": [], "adam": []}
    for name in ("sgd", "adam"):
        for (bs, real), t in zip(data[name], tensors[name], strict=True):
            pred = scale * t + fixed
            errs[name].append(ape(pred, real))
            base = old_guard(
                {
                    "cnn": "vgg16",
                    "image_size": 224,
                    "batch_size": bs,
                    "optimizer": name,
                    "parameters": vgg["parameters"],
                }
            )
            lines.append(
                f"| {name}{' (held out)' if name == 'adam' else ' (fit)'} | {bs} | {real / 1e6:,.0f} | "
                f"{pred / 1e6:,.0f} | {errs[name][-1]:.1f}% | {ape(4.0 * vgg_parameters, real):.0f}% | "
                f"{ape(base, real):.0f}% |"
            )
    return lines, {
        "GPU_SCALE": float(scale),
        "GPU_WORKSPACE": float(fixed),
        "sgd_mape": statistics.fmean(errs["sgd"]),
        "adam_mape": statistics.fmean(errs["adam"]),
    }


def lambda_report() -> list[str]:
    """ResNet-50's batch size per GPU in Lambda's PyTorch benchmark beside the model's largest batch that fits."""
    work = workload("resnet50", 224)
    lines = [
        "| GPU | memory | precision | Lambda ran batch | model: largest batch that fits |",
        "|---|---|---|---|---|",
    ]
    for precision, label in (("fp32", "fp32"), ("fp16", "amp_fp16")):
        with (PUBLIC / "lambda" / f"pytorch-train-bs-{precision}.csv").open() as f:
            rows = {r["name_gpu"]: int(r["resnet50"]) for r in csv.DictReader(f)}
        for gpu, gb in LAMBDA_GPUS.items():
            if gpu in rows:
                largest = step_memory.max_batch_size(
                    work, gb * 1e9, cap=4096, optimizer="sgd_momentum", precision=label
                )
                lines.append(f"| {gpu} | {gb} GB | {label} | {rows[gpu]} | {largest} |")
    return lines
