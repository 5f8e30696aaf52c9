"""Whole training steps as the reference's step fit reads them: the row type, and our own steps timed by
bench/gpu_settings.py's method (data/reference/h100/, data/reference/h200/). The public rows are read by
wholestep.py, bundles' rows by measured.py."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prediction.reference.data import ROOT
from shared.training import TrainConfig


@dataclass(frozen=True)
class StepRow:
    """One public whole-network measurement."""

    set: str
    gpu: str
    cnn: str
    image_size: int
    batch: int
    precision: str
    framework: str
    optimizer: str
    includes: str
    step_ms: float
    input_bound: bool
    training: TrainConfig | None = None  # how it trained, where the source says exactly (our own steps)
    # cudnn.benchmark: on in NVIDIA's DeepLearningExamples (Lambda: ConvNets main.py sets it) and MXNet's default
    # autotune; off in our H100 steps (PyTorch's default)
    autotuned: bool = True

    @property
    def category(self) -> str:
        """headline (PyTorch full steps, not input-bound), input_bound, partial_step or other_framework."""
        if not self.framework.lower().startswith("pytorch"):
            return "other_framework"
        if not self.includes.startswith("fwd+bwd+opt") or self.precision not in ("fp32", "amp_fp16", "amp_bf16"):
            return "partial_step"
        return "input_bound" if self.input_bound else "headline"


STEPS = ROOT / "data" / "reference" / "h100" / "steps.jsonl"
GPU = "H100-SXM5-80GB"
FAMILY = "H100"  # layerfit.family_of(GPU): the GPUs (H100 boards, H200) whose points quote these figures
SET = "h100_own"
# The other runs of ours on the same machine kind: cudnn.benchmark on (the team's, SGD fp32) and the settings run
# (channels_last x cudnn.benchmark in every configuration, bench/gpu_settings.py); each is a set of its own.
CUDNN_SET, SETTINGS_SET = "h100_own_cudnn", "h100_own_settings"
ENVIRONMENT = "H100 SXM 80GB, PyTorch 2.11, cuDNN 9.19, cudnn.benchmark off, NCHW"
CONFIGS = {
    "sgd/fp32": TrainConfig(optimizer="sgd", precision="fp32"),
    "sgd+momentum/amp_bf16": TrainConfig(optimizer="sgd", momentum=0.9, precision="amp_bf16"),
    "adamw+wd/amp_fp16": TrainConfig(optimizer="adamw", weight_decay=0.01, precision="amp_fp16"),
    # the optimizer and the precision crossed (data/reference/h200/): what separates fp16 from AdamW
    "sgd+momentum/amp_fp16": TrainConfig(optimizer="sgd", momentum=0.9, precision="amp_fp16"),
    "adamw+wd/amp_bf16": TrainConfig(optimizer="adamw", weight_decay=0.01, precision="amp_bf16"),
}
# (changed, reference) configurations whose step ratio one run measured, one thing swapped in each: fp16 and its
# GradScaler against bf16 under the same optimizer, AdamW against SGD with momentum in fp16 and in bf16.
CROSSED_PAIRS = (
    ("sgd+momentum/amp_fp16", "sgd+momentum/amp_bf16"),
    ("adamw+wd/amp_fp16", "sgd+momentum/amp_fp16"),
    ("adamw+wd/amp_bf16", "sgd+momentum/amp_bf16"),
)
GRID = (16, 32, 64, 128, 256)  # every CNN and configuration; the sweep's other sizes are vgg16 and resnet50 only


# Our other H100 files: the same machine kind, software and timing in other settings (channels_last,
# cudnn.benchmark), each with its environment on its first line. Their rows join the fit; evaluate() scores the
# default-setting rows of STEPS, and bench/reference_accuracy.py the settings' effects.
SETTINGS_FILES = {
    CUDNN_SET: ROOT / "data" / "reference" / "h100" / "steps_cudnn_benchmark_on.jsonl",
    SETTINGS_SET: ROOT / "data" / "reference" / "h100" / "steps_settings.jsonl",
}
# Runs whose cudnn.benchmark=true rows did not search: each step ran right after the same step with it off, in the same
# process and threads, and PyTorch keeps the cuDNN plan it chose per thread under a key without the flag, so these
# steps reused the heuristics' plans (data/reference/h100/README.md). Repeats of the default under another label, they
# would teach the setting an effect of 1x: left out of the fit and the scores.
UNSEARCHED = frozenset({SETTINGS_SET})


# Our steps on an H200 (a lent machine, 2026-11-28): the five configurations above in the default setting, each CNN's
# back to back in one run, so that fp16 with SGD and bf16 with AdamW sit beside the three the H100 ties together.
# They teach the H200's own constants and, being the only steps that cross optimizer and precision, the shared ones.
H200_GPU = "H200-SXM-141GB"
H200_FILES = {
    "h200_own_crossed": ROOT / "data" / "reference" / "h200" / "steps_crossed.jsonl",
    "h200_own_more": ROOT / "data" / "reference" / "h200" / "steps_more.jsonl",
}


def load_h100(settings: bool = True) -> list[StepRow]:
    """The measured steps (rows with an error, a CNN that cannot run, are left out); settings: with the rows of
    SETTINGS_FILES (channels_last, cudnn.benchmark) beside the default-setting rows of STEPS."""
    return _load({SET: STEPS, **(SETTINGS_FILES if settings else {})}, GPU)


def load_own() -> list[StepRow]:
    """Every step of ours in these files: the H100's (all settings) and the H200's."""
    return [*load_h100(), *_load(H200_FILES, H200_GPU)]


def config_name(row: StepRow) -> str:
    """The name in CONFIGS of the configuration a row of ours trained in ("" for another)."""
    return next((k for k, v in CONFIGS.items() if v == row.training), "")


def crossed_pairs(rows: list[StepRow]) -> list[tuple[StepRow, StepRow]]:
    """(changed, reference) rows of one run, CNN and batch size for each of CROSSED_PAIRS."""
    found = {(r.set, r.cnn, r.image_size, r.batch, config_name(r)): r for r in rows}
    return [
        (r, d)
        for (run, cnn, image, batch, name), r in found.items()
        for changed, reference in CROSSED_PAIRS
        if name == changed and (d := found.get((run, cnn, image, batch, reference))) is not None
    ]


def _load(files: dict[str, Path], gpu: str) -> list[StepRow]:
    rows = []
    for name, path in ((n, f) for n, f in files.items() if f.exists()):
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        meta: dict[str, Any] = next((r["meta"] for r in lines if "meta" in r), {})
        for r in lines:
            if "ms" not in r:
                continue
            tuned = bool(r.get("cudnn_benchmark", meta.get("cudnn_benchmark", False)))
            if tuned and name in UNSEARCHED:
                continue
            config = CONFIGS[r["config"]].model_copy(
                update={"channels_last": bool(r.get("channels_last", False)), "cudnn_benchmark": tuned}
            )
            rows.append(
                StepRow(
                    name,
                    gpu,
                    r["cnn"],
                    int(r["image"]),
                    int(r["batch"]),
                    config.precision,
                    "pytorch 2.11",
                    config.optimizer,
                    "fwd+bwd+opt (synthetic data)",
                    float(r["ms"]),
                    False,
                    config,
                    autotuned=tuned,
                )  # fmt: skip
            )
    return rows
