"""ResNet-50 throughput the reference predicts for every catalog GPU in each precision and layout, and the orderings
any such table must keep (bench/sanity.py prints it, tests/unit/test_reference_sanity.py checks the orderings).

The orderings are physics, not data: autocast is not slower than fp32 on a GPU with tensor cores (Volta and later),
and within one GPU model a variant with at least as much of every figure (SMs, fp32 and 16-bit tensor peak, memory
bandwidth, power) is not slower. Pairs where one variant has more of one figure and less of another are not ordered.
"""

import csv
from dataclasses import dataclass
from functools import cache

from prediction.reference import data
from prediction.reference.data import ROOT
from prediction.reference.model import ReferenceModel
from prediction.reference.specs import GpuSpecs, family_of
from prediction.reference.wholestep import network
from shared.training import Precision, TrainConfig

CATALOGS = (ROOT / "data" / "aws_gpu_instances.csv", ROOT / "data" / "cloud_gpu_machines.csv")
BATCH = 256
# DeepLearningExamples' ResNet-50 recipe (what Lambda's public figures ran): SGD with momentum 0.9.
SETTINGS = {
    f"{precision} {'NHWC' if nhwc else 'NCHW'}": TrainConfig(optimizer="sgd", momentum=0.9, precision=precision,
                                                            channels_last=nhwc)
    for precision in ("fp32", "amp_fp16", "amp_bf16") for nhwc in (False, True)
}  # fmt: skip
# Figures whose being larger makes a GPU faster, never slower.
FIGURES = ("sm_count", "fp32_tflops", "fp16_tflops", "mem_bandwidth_gbs", "tdp_watts")


@dataclass(frozen=True)
class Row:
    """One GPU's predicted ResNet-50 images/s at BATCH, per setting (None: the GPU cannot run that precision)."""

    gpu: str
    images_per_s: dict[str, float | None]


def catalog_gpus() -> list[str]:
    """Every GPU model some catalog machine type has."""
    names: set[str] = set()
    for path in CATALOGS:
        with open(path, newline="") as fh:
            names |= {r["gpu"] for r in csv.DictReader(fh)}
    return sorted(names)


@cache
def gpu_rows() -> dict[str, dict[str, str]]:
    """data/gpus.csv by GPU name (read once)."""
    return {r["gpu"]: r for r in data.gpu_rows()}


def table(model: ReferenceModel, gpus: list[str], batch: int = BATCH) -> list[Row]:
    """Predicted images/s of ResNet-50 at 224 px for each GPU and setting."""
    convs, work = network("resnet50", 224)
    specs = gpu_rows()
    out = []
    for name in gpus:
        row, gpu = specs[name], GpuSpecs.from_row(specs[name])
        values: dict[str, float | None] = {}
        for label, config in SETTINGS.items():
            if config.precision == "amp_bf16" and row["bf16"].strip().lower() != "true":
                values[label] = None
                continue
            [est] = model.predict_steps(convs=convs, workload=work, batch_sizes=[batch], gpu=gpu, training=config)
            values[label] = batch / est.step_ms * 1e3
        out.append(Row(name, values))
    return out


def dominates(a: dict[str, str], b: dict[str, str]) -> bool:
    """Whether GPU a has at least as much of every figure as b, more of one, in the same family."""
    if family_of(a["gpu"]) != family_of(b["gpu"]):
        return False
    pairs = [(float(a[f] or 0), float(b[f] or 0)) for f in FIGURES]
    return all(x >= y for x, y in pairs) and any(x > y for x, y in pairs)


def violations(rows: list[Row], tolerance: float = 0.005) -> list[str]:
    """Every ordering the table breaks, in words (empty: none)."""
    specs = gpu_rows()
    out = []
    for r in rows:
        # Tensor cores (Volta, compute capability 7.0, and later) for 16-bit inputs.
        tensor16 = float(specs[r.gpu]["compute_capability"]) >= 7.0
        for layout in ("NCHW", "NHWC"):
            fp32 = r.images_per_s[f"fp32 {layout}"]
            for amp in ("amp_fp16", "amp_bf16"):
                value = r.images_per_s[f"{amp} {layout}"]
                if tensor16 and fp32 and value is not None and value < fp32 * (1 - tolerance):
                    out.append(f"{r.gpu}: {amp} {layout} {value:.0f} images/s below fp32's {fp32:.0f}")
    for a in rows:
        for b in rows:
            if a is b or not dominates(specs[a.gpu], specs[b.gpu]):
                continue
            for label, value in a.images_per_s.items():
                other = b.images_per_s[label]
                if value is not None and other is not None and value < other * (1 - tolerance):
                    out.append(f"{a.gpu} ({label}) {value:.0f} images/s below {b.gpu}'s {other:.0f}")
    return out


def as_lambda(model: ReferenceModel, gpu: str, precision: Precision, batch: int) -> float:
    """Predicted ResNet-50 images/s as Lambda's DeepLearningExamples runs train it: SGD with momentum, NCHW,
    cudnn.benchmark on, at its batch."""
    convs, work = network("resnet50", 224)
    config = TrainConfig(optimizer="sgd", momentum=0.9, precision=precision, cudnn_benchmark=True)
    [est] = model.predict_steps(
        convs=convs, workload=work, batch_sizes=[batch], gpu=GpuSpecs.from_row(gpu_rows()[gpu]), training=config
    )
    return batch / est.step_ms * 1e3
