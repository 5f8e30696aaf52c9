"""Features of one (CNN, machine, batch size) point for the whole-step model.

The conv part is measured (summed layer benchmarks, also split by layer kind); so are, where the
CNN's reader knows its operators (torchvision and PyTorch models, not ONNX graphs or JSON layer
lists), the other operators (`other_ms`: Σ count × forward+backward of each op signature) and the
optimizer step (`optimizer_ms`). The rest of the step is described by the extractor's workload, the
parameter count and the machine's specs, which stand in for the ops where they are not measured
(`ops_measured`, `optimizer_measured` say which). Nothing here is a timing that was not measured on
the machine in question.
"""

import math
from typing import Any

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
    "conv_gflops", "mparameters", "parameter_tensors", "activation_mbytes", *MACHINE_SPECS,
    "other_ms", "optimizer_ms", "ops_measured", "optimizer_measured",
)  # fmt: skip
OpMembers = list[tuple[int, dict[str, Any], int]]


def family(cnn: str) -> str:
    """The architecture family a CNN belongs to (its own name if none is known)."""
    return next((fam for prefix, fam in FAMILIES if cnn.startswith(prefix)), cnn)


def layer_kind(spec: dict[str, Any]) -> str:
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
    members: list[tuple[int, dict[str, Any], int]],
    rows: dict[int, dict[str, Any]],
    workload: dict[str, Any],
    batch_size: int,
    image_size: int,
    optimizer: str,
    machine: dict[str, Any],
    op_members: OpMembers = (),  # type: ignore[assignment]
    op_rows: dict[int, dict[str, Any]] | None = None,
) -> list[float] | None:
    """The feature vector in NAMES order; None when a layer or op ran out of memory at this batch size.

    members: (signature id, spec, count); rows: signature id → its layer benchmark at this batch size.
    op_members: (op signature id, spec, count), the optimizer step among them; op_rows: op signature id →
    its benchmark at this batch size (the optimizer's at batch size 0), absent where none is stored.
    """
    f: dict[str, float] = dict.fromkeys(NAMES, 0.0)
    for sig_id, spec, count in members:
        row = rows[sig_id]
        if row["oom"]:
            return None
        phases = (row["forward_ms"], row["backward_data_ms"], row["backward_weight_ms"])
        kind = layer_kind(spec)
        f["forward_ms"] += count * phases[0]
        f["backward_data_ms"] += count * phases[1]
        f["backward_weight_ms"] += count * phases[2]
        f[f"{kind}_ms"] += count * sum(phases)
        f[f"{kind}_convs"] += count
    f["conv_ms"] = f["forward_ms"] + f["backward_data_ms"] + f["backward_weight_ms"]
    ops = workload.get("ops") or {}
    for kind in WORK_KINDS:
        totals = ops.get(kind) or {}
        f[f"{kind}_mflops"] = totals.get("flops", 0.0) * batch_size / 1e6
        f[f"{kind}_mbytes"] = totals.get("bytes", 0.0) * batch_size / 1e6
        f[f"{kind}_ops"] = totals.get("count", 0)
    f["conv_gflops"] = (ops.get("conv") or {}).get("flops", 0.0) * batch_size / 1e9
    f["mparameters"] = (workload.get("parameters") or 0) / 1e6
    f["parameter_tensors"] = workload.get("parameter_tensors") or 0
    f["activation_mbytes"] = (workload.get("activation_bytes") or 0.0) * batch_size / 1e6
    if not _add_ops(f, op_members, op_rows or {}):
        return None
    f.update(batch_size=batch_size, image_size=image_size, adam=float(optimizer == "adam"))
    for spec_name in MACHINE_SPECS:
        value = machine.get(spec_name)
        f[spec_name] = float(value) if value is not None else math.nan
    return [float(f[n]) for n in NAMES]


def _add_ops(f: dict[str, float], op_members: OpMembers, op_rows: dict[int, dict[str, Any]]) -> bool:
    """Sum the measured op and optimizer times into f; False when one ran out of memory."""
    operators = [(sig, spec, count) for sig, spec, count in op_members if spec.get("op") != "optimizer"]
    timed = 0
    for sig, _spec, count in operators:
        row = op_rows.get(sig)
        if row is None:
            continue
        if row["oom"]:
            return False
        if row["forward_ms"] is not None:  # else infeasible on this device: learnt, not measured
            f["other_ms"] += count * (row["forward_ms"] + row["backward_ms"])
            timed += 1
    f["ops_measured"] = float(bool(operators) and timed == len(operators))
    step = next((op_rows.get(sig) for sig, spec, _c in op_members if spec.get("op") == "optimizer"), None)
    if step is not None and step["oom"]:
        return False
    if step is not None and step["forward_ms"] is not None:
        f["optimizer_ms"] = step["forward_ms"]
        f["optimizer_measured"] = 1.0
    return True
