"""The GPUs Traincast knows by their figures (data/gpus.csv), found by name or alias whatever the spelling."""

import csv
import difflib
import re
from functools import cache
from pathlib import Path

GPUS_CSV = Path(__file__).resolve().parent.parent / "data" / "gpus.csv"
# The numeric GPU figures a machine type row carries, as named in data/gpus.csv → machine_types column.
COLUMNS = {
    "memory_gib": "gpu_memory_gib", "fp32_tflops": "gpu_fp32_tflops", "tf32_tflops": "gpu_tf32_tflops",
    "fp16_tflops": "gpu_fp16_tflops", "fp16_acc16_tflops": "gpu_fp16_acc16_tflops",
    "mem_bandwidth_gbs": "gpu_mem_bandwidth_gbs", "sm_count": "gpu_sm_count", "l2_mib": "gpu_l2_mib",
    "tdp_watts": "gpu_tdp_watts",
}  # fmt: skip
# A machine type's figure → data/gpus.csv's column: what registering a type by a known GPU's name fills in.
FIGURES = {figure: column for column, figure in COLUMNS.items()}


@cache
def _rows() -> tuple[dict[str, str], ...]:
    with GPUS_CSV.open(newline="") as f:
        return tuple({k: (v or "").strip() for k, v in r.items()} for r in csv.DictReader(f))


def rows() -> list[dict[str, str]]:
    """Each GPU's figures, aliases and source."""
    return [dict(r) for r in _rows()]


def _key(name: str) -> str:
    """A name without case, spaces, dashes or underscores: 'GeForce RTX 4090' and 'geforce_rtx-4090' are one."""
    return re.sub(r"[^0-9a-z]", "", name.lower())


@cache
def _by_key() -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for r in _rows():
        for name in [r["gpu"], *r["aliases"].split(";")]:
            if name.strip():
                out.setdefault(_key(name), r)
    return out


def find(name: str) -> dict[str, str] | None:
    """The GPU this name or alias means, or None."""
    found = _by_key().get(_key(name))
    return dict(found) if found is not None else None


def nearest(name: str) -> list[str]:
    """Known GPU names spelled nearest to this one (at most three)."""
    names = [r["gpu"] for r in _rows()]
    keys = {_key(n): n for n in names}
    return [keys[k] for k in difflib.get_close_matches(_key(name), list(keys), n=3, cutoff=0.6)]
