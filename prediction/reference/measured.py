"""Measurement bundles committed under data/measured/: whole steps and conv layers for the reference's fit.

A bundle (docs/BUNDLES.md) is what an agent measured on a real GPU, exported with its environment. Each whole step
that ran on a CUDA device data/gpus.csv knows (by CUDA's name for it) joins the fit as a set of its own (one per
bundle file), so every GPU anyone measured teaches the answers for the GPUs nobody measured. Steps of a CPU, of a
GPU without figures, or that ran out of memory carry nothing the fit can use and are left out.
"""

from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from prediction.reference import depthwise
from prediction.reference.data import ROOT, LayerTable
from prediction.reference.depthwise import LayerRow
from prediction.reference.step_rows import StepRow
from shared.local_machine import gpu_row
from shared.measurements import transfer
from shared.measurements.bundle import Bundle
from shared.training import TrainConfig

MEASURED = ROOT / "data" / "measured"
SET_PREFIX = "measured:"


def files() -> list[Path]:
    """The committed bundles, in a fixed order."""
    return sorted(MEASURED.glob("*.jsonl.gz"))


def load_rows() -> list[StepRow]:
    """Every usable whole step of every committed bundle."""
    return [row for path in files() for row in _rows_of(path, *_stamp(path))]


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size


def bundle(path: Path) -> Bundle:
    """A committed bundle, read once per version of the file (a refit reads them for every nested fit)."""
    return _read(path, *_stamp(path))


@cache
def _read(path: Path, _mtime_ns: int, _size: int) -> Bundle:
    with path.open("rb") as raw:
        return transfer.read(raw)


def known_gpu(details: Mapping[str, Any]) -> str | None:
    """The data/gpus.csv name of the CUDA GPU an environment ran on, None for a CPU or a GPU without figures."""
    known = gpu_row(str(details.get("gpu", ""))) if details.get("device_type") == "cuda" else None
    return None if known is None else str(known["gpu"])


def _timed_layers(paths: list[Path]) -> Iterator[LayerRow]:
    """Every NCHW conv layer these bundles timed on a GPU data/gpus.csv knows, all three phases timed, with the
    bundle's precision word (fp32, tf32, bf16, fp16)."""
    for path in paths:
        read = bundle(path)
        gpus = {e.hash: known_gpu(e.details) for e in read.environments}
        specs = {c.hash: c.spec for c in read.conv_signatures}
        for r in read.rows["layer"]:
            gpu = gpus[r.environment]
            phases = (r.forward_ms, r.backward_data_ms, r.backward_weight_ms)
            if gpu is None or r.oom or r.channels_last or None in phases:
                continue
            yield gpu, r.precision, specs[r.signature], r.batch_size, phases


def layer_rows() -> list[LayerRow]:
    """Every NCHW conv layer the committed bundles timed on a GPU data/gpus.csv knows, as 'fp32' or 'amp_fp16', for
    the conv model's fit beside the public layers."""
    return [
        (gpu, "fp32" if precision in ("fp32", "tf32") else "amp_fp16", spec, batch, phases)
        for gpu, precision, spec, batch, phases in _timed_layers(files())
    ]


def cudnn_depthwise_files() -> list[Path]:
    """The bundles cudnn_depthwise_rows reads: the committed ones and those kept outside_the_fit/."""
    return files() + sorted((MEASURED / "outside_the_fit").glob("*.jsonl.gz"))


def cudnn_depthwise_rows() -> list[LayerRow]:
    """The fp16 NCHW depthwise layers PyTorch ran on cuDNN at stride 1 (depthwise.cudnn_costed) in every bundle,
    outside_the_fit/'s too: the only timings of that path (the bundles here timed bf16), labelled
    depthwise.CUDNN_FP16."""
    return [
        (gpu, depthwise.CUDNN_FP16, spec, batch, phases)
        for gpu, precision, spec, batch, phases in _timed_layers(cudnn_depthwise_files())
        if precision == "fp16" and depthwise.cudnn_costed(spec, np.array([batch]))[0]
    ]


def depthwise_fit_rows() -> list[LayerRow]:
    """What the depthwise issue costs are fitted on (fit.fit_depthwise): committed layers and cuDNN-path ones."""
    return layer_rows() + cudnn_depthwise_rows()


def with_layers(table: LayerTable) -> LayerTable:
    """The layer table with every NCHW conv layer of the bundles appended (source "measured")."""
    for gpu, precision, conv, batch, times in layer_rows():
        table.add("measured", gpu, precision, conv, batch, times)
    return table


@cache
def _rows_of(path: Path, _mtime_ns: int, _size: int) -> tuple[StepRow, ...]:
    """One bundle's usable steps."""
    read = bundle(path)
    details = {e.hash: e.details for e in read.environments}
    rows = []
    for step in read.rows["step"]:
        env = details[step.environment]
        gpu = known_gpu(env)
        if step.oom or step.step_ms is None or gpu is None:
            continue
        config = TrainConfig(
            optimizer=step.optimizer, momentum=step.momentum, weight_decay=step.weight_decay,
            precision=step.precision, channels_last=step.channels_last, cudnn_benchmark=step.cudnn_benchmark,
        )  # fmt: skip
        rows.append(
            StepRow(
                f"{SET_PREFIX}{path.name.removesuffix('.jsonl.gz')}",
                gpu,
                step.cnn_name,
                step.image_size,
                step.batch_size,
                config.precision,
                f"pytorch {env.get('torch', '')}",
                config.optimizer,
                "fwd+bwd+opt (synthetic data)",
                step.step_ms,
                False,
                config,
                autotuned=step.cudnn_benchmark,
            )  # fmt: skip
        )
    return tuple(rows)
