"""The public layer measurements copied into data/reference/layers, read into one table.

`python -m prediction.reference.data` re-copies the subsets from the shared public folder (values
unchanged; only the columns and rows used are kept). Sources are cited in data/reference/LAYERS.md.
"""

import csv
import gzip
import io
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shared import gpu_catalog

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ROOT / "data" / "reference" / "layers"
GPUS_CSV = gpu_catalog.GPUS_CSV
PUBLIC = ROOT.parent / "shared" / "data" / "public"
NEUSIGHT_GPUS = ("NVIDIA_A100_80GB_PCIe", "Tesla_V100-PCIE-32GB", "Tesla_T4", "Tesla_P100-PCIE-16GB", "Tesla_P4")
# DeepBench names its sheets by short names that data/gpus.csv does not list as aliases; the
# sheets say only "NVIDIA V100" / "NVIDIA Tesla P100", so the variant is an assumption (LAYERS.md).
DEEPBENCH_GPU = {
    "V100": "V100-SXM2-16GB", "P100": "P100-PCIE-16GB", "T4": "T4", "1080Ti": "GTX-1080-Ti", "TitanXp": "TITAN-Xp",
}  # fmt: skip


def _read(path: Path) -> Iterator[dict[str, str]]:
    with gzip.open(path, "rt", newline="") as fh:
        yield from csv.DictReader(fh)


def _write(path: Path, header: list[str], rows: list[list[Any]]) -> None:
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(header)
    out.writerows(rows)
    # mtime=0 keeps the gzip bytes identical from one copy to the next
    path.write_bytes(gzip.compress(buf.getvalue().encode(), mtime=0))


def copy_public() -> None:
    """Copy the used subsets of the public layer data into data/reference/layers (unchanged values)."""
    LAYERS.mkdir(parents=True, exist_ok=True)
    cols = {
        "conv": ["Device", "Latency", "B", "Input_Channel", "Output_Channel", "Kernel_Szie", "Input_Size", "Stride",
                 "Padding"],
        "linear": ["Device", "Latency", "B", "M", "N", "K"],
        "relu": ["Device", "Latency", "B", "H"],
        "add": ["Device", "Latency", "B", "H"],
    }  # fmt: skip
    for op, keep in cols.items():
        rows: list[list[str]] = []
        for path in sorted((PUBLIC / "neusight" / op).glob("*.csv.gz")):
            rows.extend([r[c] for c in keep] for r in _read(path))
        _write(LAYERS / f"neusight_{op}.csv.gz", keep, rows)
    with open(PUBLIC / "deepbench" / "deepbench_conv.csv", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        _write(LAYERS / "deepbench_conv.csv.gz", header, list(reader))
    lat = list(_read(PUBLIC / "benanza" / "latency_fp32.csv.gz"))
    header = list(lat[0].keys())
    _write(LAYERS / "benanza_conv_latency.csv.gz", header, [list(r.values()) for r in lat if r["LayerType"] == "Conv"])
    shapes = []
    for path in sorted((PUBLIC / "benanza" / "layer_stats").glob("*.md.gz")):
        model = path.name.removesuffix(".md.gz")
        with gzip.open(path, "rt") as fh:
            lines = fh.readlines()
        for line in lines:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) >= 6 and cells[1] == "Conv":
                shapes.append([model, cells[0], cells[1], cells[4], cells[5]])
    _write(LAYERS / "benanza_conv_shapes.csv.gz", ["model", "LAYERNAME", "LAYERTYPE", "INPUTSHAPES", "OUTPUTSHAPES"],
           shapes)  # fmt: skip


def gpu_rows() -> list[dict[str, str]]:
    """The rows of data/gpus.csv, as the catalog reads them (shared/gpu_catalog.py owns the file)."""
    return gpu_catalog.rows()


def alias_map() -> dict[str, str]:
    """Every name a GPU goes by (aliases, underscores or spaces) → its data/gpus.csv name."""
    out: dict[str, str] = {}
    for row in gpu_rows():
        for name in [row["gpu"], *row.get("aliases", "").split(";")]:
            if name.strip():
                out[name.strip().lower()] = row["gpu"]
                out[name.strip().replace(" ", "_").lower()] = row["gpu"]
    return out


@dataclass
class LayerTable:
    """Measured conv layers: one row per (source, GPU, precision, layer, batch); ms = fwd, bwd-data, bwd-weight."""

    source: list[str] = field(default_factory=list)
    gpu: list[str] = field(default_factory=list)
    precision: list[str] = field(default_factory=list)
    specs: list[dict[str, Any]] = field(default_factory=list)
    batch: list[int] = field(default_factory=list)
    ms: list[tuple[float, float, float]] = field(default_factory=list)

    def add(self, source: str, gpu: str, precision: str, spec: dict[str, Any], batch: int, ms: tuple) -> None:
        """Append one measured layer."""
        self.source.append(source)
        self.gpu.append(gpu)
        self.precision.append(precision)
        self.specs.append(spec)
        self.batch.append(batch)
        self.ms.append(ms)

    def array(self) -> np.ndarray:
        """Times as an (R, 3) array, NaN where a phase was not measured."""
        return np.array(self.ms, dtype=float).reshape(-1, 3)


def spec(cin: int, cout: int, h: int, w: int, kh: int, kw: int, sh: int, sw: int, ph: int, pw: int, groups: int = 1):
    """A ConvSignature-like spec dict."""
    return {
        "in_channels": cin, "out_channels": cout, "in_h": h, "in_w": w, "kernel": [kh, kw], "stride": [sh, sw],
        "padding": [ph, pw], "dilation": [1, 1], "groups": groups, "bias": False, "transposed": False,
        "output_padding": [0, 0], "dtype": "float32",
    }  # fmt: skip


def _stride_pad(size: int, out: int, k: int) -> tuple[int, int]:
    best: tuple[int, int, int] | None = None
    for s in range(1, 5):
        for p in range(0, k + 1):
            if (size + 2 * p - k) // s + 1 == out:
                cand = (abs(p - (k - 1) // 2), s, p)
                best = cand if best is None or cand < best else best
    return (best[1], best[2]) if best else (max(1, round(size / out)), (k - 1) // 2)


def load_layers() -> LayerTable:
    """Every copied conv measurement, GPUs named as in data/gpus.csv (rows of unknown GPUs dropped); the
    refit adds our agent's (measured.with_layers)."""
    names = alias_map()
    table = LayerTable()
    for r in _read(LAYERS / "neusight_conv.csv.gz"):
        k, size, s, p = int(r["Kernel_Szie"]), int(r["Input_Size"]), int(r["Stride"]), int(r["Padding"])
        sp = spec(int(r["Input_Channel"]), int(r["Output_Channel"]), size, size, k, k, s, s, p, p)
        table.add(
            "neusight", names[r["Device"].lower()], "fp32", sp, int(r["B"]), (float(r["Latency"]), np.nan, np.nan)
        )
    for r in _read(LAYERS / "deepbench_conv.csv.gz"):
        times = tuple(float(r[c]) if _isnum(r[c]) else np.nan for c in ("fwd_ms", "bwd_input_ms", "bwd_weight_ms"))
        sp = spec(int(r["C"]), int(r["K"]), int(r["H"]), int(r["W"]), int(r["R"]), int(r["S"]), int(r["stride_h"]),
                  int(r["stride_w"]), int(r["pad_h"]), int(r["pad_w"]))  # fmt: skip
        precision = "fp32" if r["precision"] == "fp32" else "amp_fp16"
        table.add("deepbench", DEEPBENCH_GPU[r["gpu"]], precision, sp, int(r["N"]), times)  # type: ignore[arg-type]
    shapes: dict[tuple[str, str], dict[str, Any]] = {}
    for r in _read(LAYERS / "benanza_conv_shapes.csv.gz"):
        ins = [[int(v) for v in re.findall(r"\d+", part)] for part in r["INPUTSHAPES"].split("],[")]
        out = [int(v) for v in re.findall(r"\d+", r["OUTPUTSHAPES"])]
        x, wt = ins[0], ins[1]
        if len(x) != 4 or len(wt) != 4 or len(out) < 4:
            continue
        groups = max(1, x[1] // wt[1])
        sh, ph = _stride_pad(x[2], out[2], wt[2])
        sw, pw = _stride_pad(x[3], out[3], wt[3])
        shapes[(r["model"], r["LAYERNAME"])] = spec(x[1], wt[0], x[2], x[3], wt[2], wt[3], sh, sw, ph, pw, groups)
    summed: dict[tuple[str, str, str, int], float] = defaultdict(float)
    for r in _read(LAYERS / "benanza_conv_latency.csv.gz"):
        summed[(r["gpu"], r["model"], r["LayerName"], int(r["batch_size"]))] += float(r["RealTime(ms)"])
    for (gpu, model, layer, batch), ms in sorted(summed.items()):
        found = shapes.get((model, layer))
        if found is not None and gpu.lower() in names:
            table.add("benanza", names[gpu.lower()], "fp32", found, batch, (ms, np.nan, np.nan))
    return table


def _isnum(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


if __name__ == "__main__":
    copy_public()
