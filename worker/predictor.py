"""The whole-step predictor of a machine type: trained from its measurements, stored, versioned.

A model is stored in PostgreSQL as LightGBM model text (never a pickle) with the ids of the
step measurements it learnt from, its feature names and its held-out evaluation.
"""

from functools import lru_cache
from typing import Any

from shared import layers, machines
from shared.db import Json, one, transaction
from shared.errors import InvalidRequest
from worker import features, models

KIND = "lightgbm_ratio"
BUILTIN_CLASSES = 1000  # whole steps are measured with torchvision's default classes

SELECT_STEPS = """
SELECT id, cnn_name, batch_size, image_size, optimizer, precision, environment_id, step_ms
FROM step_measurements WHERE machine_type = %s AND NOT oom
ORDER BY id"""
# Layer rows of the step's own environment: timings of two environments are never combined.
SELECT_LAYERS = """
SELECT signature_id, oom, forward_ms, backward_data_ms, backward_weight_ms FROM layer_benchmarks
WHERE machine_type = %s AND batch_size = %s AND precision = %s AND environment_id = %s
  AND signature_id = ANY(%s)"""
SELECT_LATEST = """
SELECT * FROM predictor_models WHERE machine_type = %s ORDER BY version DESC LIMIT 1"""
INSERT_MODEL = """
INSERT INTO predictor_models (machine_type, version, kind, params, training_rows, evaluation)
SELECT %(machine)s, COALESCE(MAX(version), 0) + 1, %(kind)s, %(params)s, %(rows)s, %(evaluation)s
FROM predictor_models WHERE machine_type = %(machine)s
RETURNING *"""


def dataset(machine: str) -> list[models.Point]:
    """Every whole step measured on a machine type whose layer benchmarks (same environment) are all stored."""
    spec = machines.get_by_name(name=machine)
    with transaction() as cur:
        cur.execute(SELECT_STEPS, (machine,))
        steps = [dict(r) for r in cur.fetchall()]
    points = []
    for s in steps:
        key = {"name": s["cnn_name"], "image_size": s["image_size"], "num_classes": BUILTIN_CLASSES}
        members = layers.members(**key)
        if not members:
            continue
        with transaction() as cur:
            cur.execute(
                SELECT_LAYERS,
                (machine, s["batch_size"], s["precision"], s["environment_id"], [m[0] for m in members]),
            )
            rows = {r["signature_id"]: dict(r) for r in cur.fetchall()}
        if len(rows) < len(members):
            continue  # layer benchmarks of this environment not all there yet
        work = layers.workload(**key)
        x = features.vector(
            members=members, rows=rows, workload=work, batch_size=s["batch_size"],
            image_size=s["image_size"], optimizer=s["optimizer"], machine=spec,
        )  # fmt: skip
        if x is None:
            continue
        f = dict(zip(features.NAMES, x, strict=True))
        flops = f["conv_gflops"] * 1e9 + sum(f[f"{k}_mflops"] * 1e6 for k in features.WORK_KINDS)
        cnn = s["cnn_name"]
        points.append(models.Point(s["id"], cnn, features.family(cnn), x, f["conv_ms"], flops, s["step_ms"]))
    return points


def train(*, machine: str) -> dict[str, Any]:
    """Fit, evaluate (held-out CNNs and families, baselines beside) and store a new model version."""
    points = dataset(machine)
    cnns = {p.cnn for p in points}
    if len(cnns) < 2:
        raise InvalidRequest(
            f"need whole-step measurements of at least 2 CNNs on {machine} (with their layer benchmarks), "
            f"found {len(cnns)}; run `traincast calibrate --machine {machine}` first",
            machine=machine,
        )
    evaluation = models.evaluate(points)
    evaluation["loco_mape"] = evaluation["loco"]["lightgbm"]["mape"]
    params = {"features": list(features.NAMES), "boosters": models.fit_lgbm(points)}
    with transaction() as cur:
        cur.execute(
            INSERT_MODEL,
            {
                "machine": machine,
                "kind": KIND,
                "params": Json(params),
                "rows": Json([p.id for p in points]),
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


@lru_cache(maxsize=32)
def _boosters(model_id: int) -> dict[str, Any]:
    with transaction() as cur:
        cur.execute("SELECT params FROM predictor_models WHERE id = %s", (model_id,))
        return models.load(one(cur)["params"]["boosters"])


def predict_ms(model: dict[str, Any], x: list[float], conv_ms: float) -> tuple[float, float, float]:
    """(P10, median, P90) iteration time in milliseconds."""
    if model["params"].get("features") != list(features.NAMES):
        raise InvalidRequest(f"model v{model['version']} was trained on other features; retrain it")
    return models.predict(_boosters(model["id"]), x, conv_ms)
