"""Features of one (CNN, machine, batch size) point for the whole-step model.

The conv part is measured (summed layer benchmarks, also split by layer kind); so are, where the
CNN's reader knows its operators (torchvision and PyTorch models, not ONNX graphs or JSON layer
lists), the other operators (`other_ms`: Σ count × forward+backward of each op signature, which is
every kernel of the step that is not a conv: per-step ones such as batch norm's counter and
backward's gradient sums included; shared/cnn/op_signatures.py) and the optimizer step
(`optimizer_ms`). The rest of the step is described by the extractor's workload, the parameter
count and the machine's specs, which stand in for the ops where they are not measured
(`ops_measured`, `optimizer_measured` say which). Nothing here is a timing that was not measured on
the machine in question.
"""

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from shared.cnn.workload import WorkloadJson
from shared.measurements.members import Member

if TYPE_CHECKING:
    from shared.machine_types import MachineTypeInfo

FAMILIES = (
    ("wide_resnet", "resnet"), ("resnext", "resnet"), ("resnet", "resnet"), ("vgg", "vgg"),
    ("densenet", "densenet"), ("mobilenet_v2", "mobilenet_v2"), ("mobilenet_v3", "mobilenet_v3"),
    ("efficientnet", "efficientnet"), ("regnet", "regnet"), ("squeezenet", "squeezenet"),
    ("shufflenet", "shufflenet"), ("mnasnet", "mnasnet"), ("alexnet", "alexnet"), ("googlenet", "inception"),
    ("inception", "inception"), ("convnext", "convnext"),
)  # fmt: skip
LAYER_KINDS = ("pointwise", "grouped", "strided", "spatial")
WORK_KINDS = ("batch_norm", "activation", "pooling", "linear", "elementwise", "concat", "softmax_loss", "other")
MACHINE_SPECS = ("gpu_fp32_tflops", "gpu_fp16_tflops", "gpu_mem_bandwidth_gbs", "gpu_memory_gib", "vcpus")
NAMES = (
    "batch_size", "image_size", "adam", "conv_ms", "forward_ms", "backward_data_ms", "backward_weight_ms",
    *(f"{k}_ms" for k in LAYER_KINDS), *(f"{k}_convs" for k in LAYER_KINDS),
    *(f"{k}_mflops" for k in WORK_KINDS), *(f"{k}_mbytes" for k in WORK_KINDS), *(f"{k}_ops" for k in WORK_KINDS),
    "conv_gflops", "mparameters", "parameter_tensors", "activation_memory_mbytes", *MACHINE_SPECS,
    "other_ms", "optimizer_ms", "ops_measured", "optimizer_measured", "linear_ms",
)  # fmt: skip
OpMembers = list[Member]
# One point's features as a record with a field per name (float64): a table of points is a structured array
# of it, read by name (`table["conv_ms"]`), and `matrix()` gives the models' columns in NAMES order. (Models
# stored by older extractors had "activation_mbytes" twice, the activation memory overwriting the activation ops'
# bytes; their feature list differs, so they are refused until retrained.)
DTYPE = np.dtype([(name, np.float64) for name in NAMES])
Rows = Mapping[tuple[int, int], Mapping[str, Any]]


def family(cnn: str) -> str:
    """The architecture family a CNN belongs to (its own name if none is known)."""
    return next((fam for prefix, fam in FAMILIES if cnn.startswith(prefix)), cnn)


def layer_kind(spec: Mapping[str, Any]) -> str:
    """Depthwise/grouped, 1x1, strided or plain k×k: kinds whose speed per FLOP differs."""
    if spec["groups"] > 1:
        return "grouped"
    if tuple(spec["kernel"]) == (1, 1):
        return "pointwise"
    if max(spec["stride"]) > 1:
        return "strided"
    return "spatial"


def vector(
    *,
    members: list[Member],
    rows: Mapping[int, Mapping[str, Any]],
    workload: WorkloadJson,
    batch_size: int,
    image_size: int,
    optimizer: str,
    machine_info: "MachineTypeInfo",
    op_members: OpMembers = (),  # type: ignore[assignment]
    op_rows: Mapping[int, Mapping[str, Any]] | None = None,
) -> list[float] | None:
    """The feature vector in NAMES order; None when a layer or op ran out of memory at this batch size.

    members: (signature id, spec, count); rows: signature id → its layer benchmark at this batch size.
    op_members: (op signature id, spec, count), the optimizer step among them; op_rows: op signature id →
    its benchmark at this batch size (the optimizer's at batch size 0), absent where none is stored.
    """
    steps = {sig: row for sig, row in (op_rows or {}).items()}
    x, usable = table(
        members=members, rows={(sig, batch_size): row for sig, row in rows.items()}, workload=workload,
        batch_sizes=[batch_size], image_size=image_size, optimizer=optimizer, machine_info=machine_info,
        op_members=op_members,
        op_rows={(sig, 0 if _is_optimizer(spec) else batch_size): steps[sig] for sig, spec, _c in op_members
                 if sig in steps},
    )  # fmt: skip
    return [float(x[0][name]) for name in NAMES] if usable[0] else None


def table(
    *,
    members: Sequence[tuple[int, Mapping[str, Any], int]],
    rows: Rows,
    workload: WorkloadJson,
    batch_sizes: Sequence[int],
    image_size: int,
    optimizer: str,
    machine_info: Mapping[str, Any],
    op_members: Sequence[tuple[int, Mapping[str, Any], int]] = (),
    op_rows: Rows | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(features of each batch size as a DTYPE array, whether each is usable: nothing ran out of memory).

    rows: (signature id, batch size) → its layer benchmark; op_rows: (op signature id, batch size) → its op
    benchmark (the optimizer step's at batch size 0), absent where none is stored. Sums run layer by layer in
    member order, as the models were trained on, so each point's features are those of that point alone.
    """
    n = len(batch_sizes)
    f = np.zeros(n, dtype=DTYPE)
    usable = np.ones(n, dtype=bool)
    for sig, spec, count in members:
        got = [rows[(sig, b)] for b in batch_sizes]
        oom = np.array([bool(r["oom"]) for r in got], dtype=bool)
        usable &= ~oom
        phases = np.array(
            [(0.0, 0.0, 0.0) if r["oom"] else (r["forward_ms"], r["backward_data_ms"], r["backward_weight_ms"])
             for r in got], dtype=np.float64,
        ).reshape(n, 3)  # fmt: skip
        kind = layer_kind(spec)
        f["forward_ms"] += count * phases[:, 0]
        f["backward_data_ms"] += count * phases[:, 1]
        f["backward_weight_ms"] += count * phases[:, 2]
        f[f"{kind}_ms"] += count * (phases[:, 0] + phases[:, 1] + phases[:, 2])
        f[f"{kind}_convs"] += count
    f["conv_ms"] = f["forward_ms"] + f["backward_data_ms"] + f["backward_weight_ms"]
    sizes = np.asarray(batch_sizes, dtype=np.float64)
    ops = workload.get("ops") or {}
    for kind in WORK_KINDS:
        totals = ops.get(kind)
        f[f"{kind}_mflops"] = (totals["flops"] if totals else 0.0) * sizes / 1e6
        f[f"{kind}_mbytes"] = (totals["bytes"] if totals else 0.0) * sizes / 1e6
        f[f"{kind}_ops"] = totals["count"] if totals else 0
    f["conv_gflops"] = (ops["conv"]["flops"] if "conv" in ops else 0.0) * sizes / 1e9
    f["mparameters"] = (workload.get("parameters") or 0) / 1e6
    f["parameter_tensors"] = workload.get("parameter_tensors") or 0
    f["activation_memory_mbytes"] = (workload.get("activation_bytes") or 0.0) * sizes / 1e6
    usable &= _add_ops(f, op_members, op_rows or {}, batch_sizes)
    f["batch_size"] = sizes
    f["image_size"] = image_size
    f["adam"] = float(optimizer == "adam")
    for spec_name in MACHINE_SPECS:
        value = machine_info.get(spec_name)
        f[spec_name] = float(value) if value is not None else math.nan
    return f, usable


def matrix(x: np.ndarray) -> np.ndarray:
    """A DTYPE table as a float matrix (points × NAMES), the models' column order."""
    return np.column_stack([x[name] for name in NAMES]) if len(x) else np.zeros((0, len(NAMES)))


# Ops whose measured time is a matmul's (part of other_ms too): compute-bound where the rest is memory-bound, so the
# whole-step base gives them a coefficient of their own (convnext's block MLPs are most of its step).
MATMULS = ("linear", "bmm")


def _is_optimizer(spec: Mapping[str, Any]) -> bool:
    return spec.get("op") == "optimizer"


def _add_ops(
    f: np.ndarray, op_members: Sequence[tuple[int, Mapping[str, Any], int]], op_rows: Rows, batch_sizes: Sequence[int]
) -> np.ndarray:
    """Sum the measured op and optimizer times into f; per batch size, False where one ran out of memory."""
    n = len(batch_sizes)
    usable = np.ones(n, dtype=bool)
    operators = [(sig, spec, count) for sig, spec, count in op_members if not _is_optimizer(spec)]
    timed = np.zeros(n, dtype=np.int64)
    for sig, spec, count in operators:
        got = [op_rows.get((sig, b)) for b in batch_sizes]
        usable &= np.array([r is None or not r["oom"] for r in got], dtype=bool)
        # A row without times is infeasible on this device: learnt, not measured.
        timed_here = np.array([r is not None and not r["oom"] and r["forward_ms"] is not None for r in got])
        pairs = zip(got, timed_here.tolist(), strict=True)
        ms = np.array([r["forward_ms"] + r["backward_ms"] if r is not None and t else 0.0 for r, t in pairs])
        f["other_ms"] += np.where(timed_here, count * ms, 0.0)
        if spec.get("op") in MATMULS:
            f["linear_ms"] += np.where(timed_here, count * ms, 0.0)
        timed += timed_here
    f["ops_measured"] = (bool(operators) & (timed == len(operators))).astype(np.float64)
    step: Mapping[str, Any] | None = next(
        (op_rows.get((sig, 0)) for sig, spec, _c in op_members if _is_optimizer(spec)), None
    )
    if step is not None and step["oom"]:
        usable[:] = False
    elif step is not None and step["forward_ms"] is not None:
        f["optimizer_ms"] = step["forward_ms"]
        f["optimizer_measured"] = 1.0
    return usable
