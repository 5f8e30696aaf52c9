"""Whole steps from measurement bundles committed under data/measured/: rows for the reference's fit.

A bundle (docs/BUNDLES.md) is what an agent measured on a real GPU, exported with its environment. Each whole step
that ran on a CUDA device data/gpus.csv knows (by CUDA's name for it) joins the fit as a set of its own (one per
bundle file), so every GPU anyone measured teaches the answers for the GPUs nobody measured. Steps of a CPU, of a
GPU without figures, or that ran out of memory carry nothing the fit can use and are left out.
"""

from functools import cache
from pathlib import Path

from prediction.reference.data import ROOT
from prediction.reference.step_rows import StepRow
from shared.local_machine import gpu_row
from shared.measurements import transfer
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


@cache
def _rows_of(path: Path, _mtime_ns: int, _size: int) -> tuple[StepRow, ...]:
    """One bundle's usable steps, read once per version of the file (a refit reads them for every nested fit)."""
    with path.open("rb") as raw:
        bundle = transfer.read(raw)
    details = {e.hash: e.details for e in bundle.environments}
    rows = []
    for step in bundle.rows["step"]:
        env = details[step.environment]
        known = gpu_row(str(env.get("gpu", ""))) if env.get("device_type") == "cuda" else None
        if step.oom or step.step_ms is None or known is None:
            continue
        config = TrainConfig(
            optimizer=step.optimizer, momentum=step.momentum, weight_decay=step.weight_decay,
            precision=step.precision, channels_last=step.channels_last, cudnn_benchmark=step.cudnn_benchmark,
        )  # fmt: skip
        rows.append(
            StepRow(
                f"{SET_PREFIX}{path.name.removesuffix('.jsonl.gz')}",
                known["gpu"],
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
