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

KIND = "lightgbm_base_ratio"
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
SELECT_MEASURED_TYPES = "SELECT DISTINCT machine_type FROM step_measurements WHERE NOT oom AND machine_type <> %s"
# Below this many CNNs with whole steps of its own, a machine type's model pools every type's steps.
MIN_OWN_CNNS = 5
SELECT_LATEST = """
SELECT * FROM predictor_models WHERE machine_type = %s ORDER BY version DESC LIMIT 1"""
SELECT_LATEST_OF = """
SELECT DISTINCT ON (machine_type) * FROM predictor_models WHERE machine_type = ANY(%s)
ORDER BY machine_type, version DESC"""
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
        points.append(
            models.Point(s["id"], cnn, features.family(cnn), x, f["conv_ms"], flops, s["step_ms"], machine=machine)
        )
    return points


def train(*, machine: str, pool: bool | None = None) -> dict[str, Any]:
    """Fit, evaluate (held-out CNNs and families, baselines beside) and store a new model version.

    pool: learn from the whole steps of every machine type (their specs are features), for a type
    with few of its own; None: pool when the type has whole steps of fewer than MIN_OWN_CNNS CNNs.
    """
    points = dataset(machine)
    if pool is None:
        pool = len({p.cnn for p in points}) < MIN_OWN_CNNS
    sources = [machine]
    if pool:
        with transaction() as cur:
            cur.execute(SELECT_MEASURED_TYPES, (machine,))
            others = [r["machine_type"] for r in cur.fetchall()]
        for other in others:
            theirs = dataset(other)
            points += theirs
            sources += [other] if theirs else []
    cnns = {p.cnn for p in points}
    if len(cnns) < 2:
        where = "on any machine type" if pool else f"on {machine}"
        raise InvalidRequest(
            f"need whole-step measurements of at least 2 CNNs {where} (with their layer benchmarks), "
            f"found {len(cnns)}; run `traincast calibrate --machine {machine}` first",
            machine=machine,
        )
    evaluation = models.evaluate(points)
    evaluation["loco_mape"] = evaluation["loco"]["lightgbm"]["mape"]
    evaluation["pooled_from"] = sorted(sources)
    evaluation["own_rows"] = sum(1 for p in points if p.machine == machine)
    params = {"features": list(features.NAMES), "base_terms": list(models.BASE_TERMS), **models.fit_lgbm(points)}
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


def latest_of(*, machines: list[str]) -> dict[str, dict[str, Any]]:
    """The newest model of each of these machine types that has one."""
    with transaction() as cur:
        cur.execute(SELECT_LATEST_OF, (machines,))
        return {r["machine_type"]: dict(r) for r in cur.fetchall()}


@lru_cache(maxsize=32)
def _fitted(model_id: int) -> models.Fitted:
    with transaction() as cur:
        cur.execute("SELECT params FROM predictor_models WHERE id = %s", (model_id,))
        return models.load(one(cur)["params"])


def predict_ms(model: dict[str, Any], x: list[float], conv_ms: float) -> tuple[float, float, float]:
    """(P10, median, P90) iteration time in milliseconds."""
    if model["kind"] != KIND or model["params"].get("features") != list(features.NAMES):
        raise InvalidRequest(f"model v{model['version']} ({model['kind']}) is of an older kind; retrain it")
    return models.predict(_fitted(model["id"]), x, conv_ms)
