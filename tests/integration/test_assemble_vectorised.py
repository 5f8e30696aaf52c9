"""Assembly answers every point of a machine type in one model call, with the numbers of each point alone."""

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from calibration import run as calibrate
from prediction import features, points, step_model
from shared import jobs, machine_types
from shared.cnn import registry as cnns
from shared.jobs.request import JobRequest
from shared.measurements import layers, ops
from tests.support.jobflow import drain_agent_queue, submit
from worker import planning, predictor

CNNS = ("resnet18", "squeezenet1_1")


def point_features(
    members: Sequence[tuple[int, dict[str, Any], int]],
    rows: Mapping[int, Mapping[str, Any]],
    work: Mapping[str, Any],
    bs: int,
    request: JobRequest,
    machine_info: Mapping[str, Any],
    op_members: Sequence[tuple[int, dict[str, Any], int]],
    op_rows: Mapping[int, Mapping[str, Any]],
) -> list[float] | None:
    """One point's features computed on their own, field by field (the per-point way assembly used to)."""
    f: dict[str, float] = dict.fromkeys(features.NAMES, 0.0)
    for sig, spec, count in members:
        row = rows[sig]
        if row["oom"]:
            return None
        phases = (row["forward_ms"], row["backward_data_ms"], row["backward_weight_ms"])
        kind = features.layer_kind(spec)
        f["forward_ms"] += count * phases[0]
        f["backward_data_ms"] += count * phases[1]
        f["backward_weight_ms"] += count * phases[2]
        f[f"{kind}_ms"] += count * sum(phases)
        f[f"{kind}_convs"] += count
    f["conv_ms"] = f["forward_ms"] + f["backward_data_ms"] + f["backward_weight_ms"]
    kinds = work.get("ops") or {}
    for kind in features.WORK_KINDS:
        totals = kinds.get(kind) or {}
        f[f"{kind}_mflops"] = totals.get("flops", 0.0) * bs / 1e6
        f[f"{kind}_mbytes"] = totals.get("bytes", 0.0) * bs / 1e6
        f[f"{kind}_ops"] = totals.get("count", 0)
    f["conv_gflops"] = (kinds.get("conv") or {}).get("flops", 0.0) * bs / 1e9
    f["mparameters"] = (work.get("parameters") or 0) / 1e6
    f["parameter_tensors"] = work.get("parameter_tensors") or 0
    f["activation_memory_mbytes"] = (work.get("activation_bytes") or 0.0) * bs / 1e6
    operators = [(sig, spec, count) for sig, spec, count in op_members if not ops.is_optimizer(spec)]
    timed = 0
    for sig, spec, count in operators:
        op_row = op_rows.get(sig)
        if op_row is None:
            continue
        if op_row["oom"]:
            return None
        if op_row["forward_ms"] is not None:
            f["other_ms"] += count * (op_row["forward_ms"] + op_row["backward_ms"])
            if spec["op"] in ("linear", "bmm"):  # measured matmuls, also a part of other_ms
                f["linear_ms"] += count * (op_row["forward_ms"] + op_row["backward_ms"])
            timed += 1
    f["ops_measured"] = float(bool(operators) and timed == len(operators))
    step = next((op_rows.get(sig) for sig, spec, _c in op_members if ops.is_optimizer(spec)), None)
    if step is not None and step["oom"]:
        return None
    if step is not None and step["forward_ms"] is not None:
        f["optimizer_ms"] = step["forward_ms"]
        f["optimizer_measured"] = 1.0
    f.update(batch_size=bs, image_size=request.image_size, adam=float(request.optimizer == "adam"))
    for name in features.MACHINE_SPECS:
        f[name] = float(machine_info[name]) if machine_info.get(name) is not None else math.nan
    return [float(f[n]) for n in features.NAMES]


def test_vectorised_assembly_equals_each_point_alone(clean_db: None) -> None:
    """Two CNNs × two batch sizes on local: every time is the one its point's own features and model give."""
    calibrate.send(calibrate.Plan(machine_type="local", cnns=CNNS, batch_sizes=(2,), image_size=32))
    drain_agent_queue()
    model = predictor.train(machine_type="local")
    sizes = [1, 2]
    job = submit(cnns=list(CNNS), batch_sizes=sizes)
    planning.plan_job(job["id"])
    drain_agent_queue()
    assert planning.finish_if_complete(job["id"])
    stored = jobs.get(job_id=job["id"])
    assert stored["status"] == "succeeded", stored["error"]
    request = JobRequest.model_validate(stored["request"])
    local = machine_types.get_by_name(name="local")
    assert stored["result"] is not None
    by_point = {(p["cnn"], p["batch_size"]): p for p in stored["result"]["predictions"]}
    assert len(by_point) == len(CNNS) * len(sizes)
    tables, alone = [], []
    for cnn in CNNS:
        key: dict[str, Any] = {"name": cnn, "image_size": 32, "num_classes": cnns.variant_classes(cnn, None)}
        members, work, op_members = layers.members(**key), layers.workload(**key), ops.members(**key)
        rows = layers.newest(signature_ids=[m[0] for m in members], machine_types=["local"], batch_sizes=sizes,
                             precision="fp32")  # fmt: skip
        op_rows = ops.newest(signature_ids=[m[0] for m in op_members], machine_types=["local"], batch_sizes=sizes,
                             config=request.training())  # fmt: skip
        x, usable = features.table(
            members=members, rows=rows, workload=work, batch_sizes=sizes, image_size=32,
            optimizer=request.optimizer, machine_info=local, op_members=op_members, op_rows=op_rows,
        )  # fmt: skip
        for i, bs in enumerate(sizes):
            own = point_features(
                members, {sig: rows[(sig, bs)] for sig, _, _ in members}, work, bs, request, local, op_members,
                {sig: r for (sig, b), r in op_rows.items() if b in (bs, 0)},
            )  # fmt: skip
            assert own is not None and usable[i]
            # Machine figures local lacks are NaN in both: compared as arrays, where NaN equals NaN.
            np.testing.assert_array_equal(features.matrix(x[i : i + 1])[0], own, err_msg=f"{cnn} at batch {bs}")
            low, mid, high = predictor.predict_ms(model, own, own[features.NAMES.index("conv_ms")])
            point = by_point[(cnn, bs)]
            times = (point["iteration_seconds_p10"], point["iteration_seconds"], point["iteration_seconds_p90"])
            assert times == tuple(points.significant(np.array([low, mid, high]) / 1000).tolist())
            assert point["conv_ms"] == points.significant(np.array(own[features.NAMES.index("conv_ms") :][:1]))[0]
            alone.append((low, mid, high))
        tables.append(x)
    # One call for every CNN and batch size gives each point's own numbers.
    fitted = step_model.load(model["params"])
    assert step_model.predict_table(fitted, np.concatenate(tables)) == alone
