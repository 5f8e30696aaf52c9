"""The predictor for now: summed conv layer time × a scale fitted on measured whole steps.

A later model (LightGBM) replaces the scale; the storage, versioning and the "no model"
path stay. Fitting minimises relative error, since step times span orders of magnitude.
"""

from collections import defaultdict
from typing import Any

from shared import layers
from shared.db import Json, one, transaction
from shared.errors import InvalidRequest

KIND = "conv_sum_scale"

SELECT_STEPS = """
SELECT id, cnn_name, batch_size, image_size, optimizer, precision, step_ms
FROM step_measurements WHERE machine_type = %s AND NOT oom
ORDER BY id"""
SELECT_MEMBERS = "SELECT signature_id, count FROM cnn_layers WHERE cnn_name = %s AND image_size = %s"
SELECT_LATEST = """
SELECT * FROM predictor_models WHERE machine_type = %s ORDER BY version DESC LIMIT 1"""
INSERT_MODEL = """
INSERT INTO predictor_models (machine_type, version, kind, params, training_rows, evaluation)
SELECT %(machine)s, COALESCE(MAX(version), 0) + 1, %(kind)s, %(params)s, %(rows)s, %(evaluation)s
FROM predictor_models WHERE machine_type = %(machine)s
RETURNING *"""


def conv_ms(
    *, members: list[tuple[int, int]], rows: dict[tuple[int, int], dict[str, Any]], batch_size: int
) -> float | None:
    """Summed forward+backward conv time of one iteration; None if a layer ran out of memory."""
    total = 0.0
    for sig, count in members:
        row = rows[(sig, batch_size)]
        if row["oom"]:
            return None
        total += count * (row["forward_ms"] + row["backward_data_ms"] + row["backward_weight_ms"])
    return total


def training_pairs(machine: str) -> list[dict[str, Any]]:
    """Whole-step measurements with the summed conv time of the same CNN and batch size."""
    with transaction() as cur:
        cur.execute(SELECT_STEPS, (machine,))
        steps = cur.fetchall()
        members: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for s in steps:
            key = (s["cnn_name"], s["image_size"])
            if key not in members:
                cur.execute(SELECT_MEMBERS, key)
                members[key] = [(r["signature_id"], r["count"]) for r in cur.fetchall()]
    pairs = []
    for s in steps:
        m = members[(s["cnn_name"], s["image_size"])]
        rows = layers.newest(
            signature_ids=[sig for sig, _ in m],
            machine=machine,
            batch_sizes=[s["batch_size"]],
            precision=s["precision"],
        )
        if not m or len(rows) < len(m):
            continue  # layer benchmarks not all there yet
        conv = conv_ms(members=m, rows=rows, batch_size=s["batch_size"])
        if conv:
            pairs.append({"id": s["id"], "cnn": s["cnn_name"], "conv_ms": conv, "step_ms": s["step_ms"]})
    return pairs


def fit_scale(pairs: list[dict[str, Any]]) -> float:
    """The scale k minimising the sum of squared relative errors of k × conv_ms against step_ms."""
    num = sum(p["conv_ms"] / p["step_ms"] for p in pairs)
    den = sum((p["conv_ms"] / p["step_ms"]) ** 2 for p in pairs)
    return num / den


def evaluate(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Leave-one-CNN-out error: each CNN predicted by a scale fitted without any of its rows."""
    by_cnn: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in pairs:
        by_cnn[p["cnn"]].append(p)
    per_cnn = {}
    all_ape: list[float] = []
    for cnn, held_out in sorted(by_cnn.items()):
        k = fit_scale([p for p in pairs if p["cnn"] != cnn])
        apes = [abs(k * p["conv_ms"] - p["step_ms"]) / p["step_ms"] * 100 for p in held_out]
        per_cnn[cnn] = {"mape": sum(apes) / len(apes), "max_ape": max(apes), "rows": len(apes)}
        all_ape.extend(apes)
    return {"loco_mape": sum(all_ape) / len(all_ape), "per_cnn": per_cnn, "rows": len(pairs)}


def train(*, machine: str) -> dict[str, Any]:
    """Fit, evaluate and store a new model version for a machine type from its measurements."""
    pairs = training_pairs(machine)
    cnns = {p["cnn"] for p in pairs}
    if len(cnns) < 2:
        raise InvalidRequest(
            f"need whole-step measurements of at least 2 CNNs on {machine} (with their layer benchmarks), "
            f"found {len(cnns)}; run `traincast calibrate --machine {machine}` first",
            machine=machine,
        )
    params = {"scale": fit_scale(pairs)}
    evaluation = evaluate(pairs)
    with transaction() as cur:
        cur.execute(
            INSERT_MODEL,
            {
                "machine": machine,
                "kind": KIND,
                "params": Json(params),
                "rows": Json([p["id"] for p in pairs]),
                "evaluation": Json(evaluation),
            },
        )
        return one(cur)


def latest(*, machine: str) -> dict[str, Any] | None:
    """The newest model of a machine type, or None."""
    with transaction() as cur:
        cur.execute(SELECT_LATEST, (machine,))
        row = cur.fetchone()
    return dict(row) if row else None


def predict_ms(model: dict[str, Any], conv_ms_value: float) -> float:
    """Iteration time in milliseconds from the summed conv time."""
    return float(model["params"]["scale"]) * conv_ms_value
