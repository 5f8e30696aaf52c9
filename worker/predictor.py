"""The whole-step predictor of a machine type: trained from its measurements, stored, versioned.

A model is stored in PostgreSQL as LightGBM model text (never a pickle) with the ids of the
step measurements it learnt from, its feature names, its P10–P90 interval (from out-of-fold errors)
and its held-out evaluation (prediction/validation.py).
"""

from datetime import datetime
from functools import lru_cache
from typing import Any, TypedDict, cast

from prediction import features, step_model, validation
from shared import machine_types
from shared.core.db import Json, one, transaction
from shared.core.errors import InvalidRequest
from shared.measurements import layers, ops
from shared.measurements import steps as whole_steps
from shared.training import LAYER_PRECISION, TrainConfig

KIND = "base_ratio_interval"  # older kinds carry quantile-model intervals: retrain
DEFAULT_KEY = TrainConfig().cost_key()  # what a request asks by default: SGD without momentum, fp32
BUILTIN_CLASSES = 1000  # whole steps are measured with torchvision's default classes


class PredictorModel(TypedDict):
    """A `predictor_models` row: one fitted whole-step model of a machine type for a cost key, versioned."""

    id: int
    machine_type: str
    version: int
    kind: str  # KIND; an older kind must be retrained
    cost_key: str  # the training configuration's work it learnt (shared/training.py)
    params: dict[str, Any]  # LightGBM model text and the fit's terms (never a pickle)
    training_rows: list[int]  # ids of the whole steps it learnt from
    evaluation: dict[str, Any]  # held-out figures (prediction/validation.py)
    created_at: datetime


# Below this many CNNs with whole steps of its own, a machine type's model pools every type's steps.
MIN_OWN_CNNS = 5
SELECT_LATEST = """
SELECT * FROM predictor_models WHERE machine_type = %s AND cost_key = %s ORDER BY version DESC LIMIT 1"""
SELECT_LATEST_OF = """
SELECT DISTINCT ON (machine_type) * FROM predictor_models WHERE machine_type = ANY(%s) AND cost_key = %s
ORDER BY machine_type, version DESC"""
SELECT_PARAMS = "SELECT params FROM predictor_models WHERE id = %s"
SELECT_KEYS_OF = "SELECT DISTINCT machine_type, cost_key FROM predictor_models WHERE machine_type = ANY(%s)"
INSERT_MODEL = """
INSERT INTO predictor_models (machine_type, version, kind, cost_key, params, training_rows, evaluation)
SELECT %(machine_type)s, COALESCE(MAX(version), 0) + 1, %(kind)s, %(cost_key)s, %(params)s, %(rows)s, %(evaluation)s
FROM predictor_models WHERE machine_type = %(machine_type)s
RETURNING *"""


def step_config(step: whole_steps.MeasuredStep) -> TrainConfig:
    """The training configuration a stored whole step was measured in."""
    return TrainConfig(
        optimizer=step["optimizer"], momentum=step["momentum"], weight_decay=step["weight_decay"],
        precision=step["precision"], channels_last=step["channels_last"], cudnn_benchmark=step["cudnn_benchmark"],
    )  # fmt: skip


def dataset(machine_type: str, cost_key: str = DEFAULT_KEY) -> list[step_model.Point]:
    """Every whole step of this cost key measured on a machine type with its layer benchmarks (same environment)."""
    info = machine_types.get_by_name(name=machine_type)
    steps = whole_steps.measured(machine_type=machine_type)
    points = []
    for s in steps:
        if step_config(s).cost_key() != cost_key:
            continue
        found = point(machine_type=machine_type, info=info, cnn=s["cnn_name"], image_size=s["image_size"],
                      batch_size=s["batch_size"], config=step_config(s), environment_id=s["environment_id"],
                      step_ms=s["step_ms"], step_id=s["id"])  # fmt: skip
        if found is not None:
            points.append(found)
    return points


def point(
    *, machine_type: str, info: machine_types.MachineTypeInfo, cnn: str, image_size: int, batch_size: int,
    config: TrainConfig, environment_id: int, step_ms: float, step_id: int,
) -> step_model.Point | None:  # fmt: skip
    """A whole step as a model's point: its features from the layer and op timings of its own environment; None
    while any of its layers there is missing."""
    key: dict[str, Any] = {"name": cnn, "image_size": image_size, "num_classes": BUILTIN_CLASSES}
    members = layers.members(**key)
    if not members:
        return None
    rows = layers.in_environment(
        machine_type=machine_type,
        batch_size=batch_size,
        precision=LAYER_PRECISION[config.precision],
        channels_last=config.channels_last,
        environment_id=environment_id,
        signature_ids=[m[0] for m in members],
    )
    if len(rows) < len(members):
        return None  # layer benchmarks of this environment not all there yet
    work = layers.workload(**key)
    op_members = ops.members(**key)
    # The op timings of the step's own environment too; a step without them falls back to the guessed terms.
    op_rows = ops.in_environment(
        machine_type=machine_type, environment_id=environment_id, signature_ids=[m[0] for m in op_members],
        batch_size=batch_size, config=config,
    )  # fmt: skip
    x = features.vector(
        members=members, rows=rows, workload=work, batch_size=batch_size,
        image_size=image_size, optimizer=config.optimizer, machine_info=info,
        op_members=op_members, op_rows={sig: row for (sig, _bs), row in op_rows.items()},
    )  # fmt: skip
    if x is None:
        return None
    f = dict(zip(features.NAMES, x, strict=True))
    flops = f["conv_gflops"] * 1e9 + sum(f[f"{k}_mflops"] * 1e6 for k in features.WORK_KINDS)
    family = features.family(cnn)
    return step_model.Point(step_id, cnn, family, x, f["conv_ms"], flops, step_ms, machine_type=machine_type)


def train(*, machine_type: str, pool: bool | None = None, config: TrainConfig | None = None) -> PredictorModel:
    """Fit (model chosen on inner folds, interval from their errors), evaluate held out, store a new version.

    config: the training configuration whose whole steps it learns from, and which alone it will serve
    (any with the same cost key); default SGD without momentum in fp32.
    pool: learn from the whole steps of every machine type (their specs are features), for a type
    with few of its own; None: pool when the type has whole steps of fewer than MIN_OWN_CNNS CNNs.
    """
    config = config or TrainConfig()
    key = config.cost_key()
    points = dataset(machine_type, key)
    if pool is None:
        pool = len({p.cnn for p in points}) < MIN_OWN_CNNS
    sources = [machine_type]
    if pool:
        others = whole_steps.measured_types(other_than=machine_type)
        for other in others:
            theirs = dataset(other, key)
            points += theirs
            sources += [other] if theirs else []
    cnns = {p.cnn for p in points}
    if len(cnns) < 2:
        where = "on any machine type" if pool else f"on {machine_type}"
        raise InvalidRequest(
            f"need whole-step measurements ({key}) of at least 2 CNNs {where} (with their layer benchmarks), "
            f"found {len(cnns)}; run `{config.calibrate_command(machine_type)}` first",
            machine_type=machine_type,
        )
    evaluation = validation.evaluate(points)
    evaluation["loco_mape"] = evaluation["loco"]["model"]["mape"]
    # Share of held-out CNNs' steps inside their P10-P90 (about 0.8 when the interval means what it says).
    evaluation["interval_coverage"] = evaluation["loco"]["model"]["coverage"]
    evaluation["pooled_from"] = sorted(sources)
    evaluation["own_rows"] = sum(1 for p in points if p.machine_type == machine_type)
    evaluation["training"] = key
    params = {
        "features": list(features.NAMES),
        "base_terms": list(step_model.BASE_TERMS),
        **validation.fit_model(points),
    }
    with transaction() as cur:
        cur.execute(
            INSERT_MODEL,
            {
                "machine_type": machine_type,
                "kind": KIND,
                "cost_key": key,
                "params": Json(params),
                "rows": Json([p.id for p in points]),
                "evaluation": Json(evaluation),
            },
        )
        return cast(PredictorModel, one(cur))


def latest(*, machine_type: str, cost_key: str = DEFAULT_KEY) -> PredictorModel | None:
    """The newest model of a machine type for a cost key, or None."""
    with transaction() as cur:
        cur.execute(SELECT_LATEST, (machine_type, cost_key))
        return cast(PredictorModel | None, cur.fetchone())


def latest_of(*, machine_types: list[str], cost_key: str = DEFAULT_KEY) -> dict[str, PredictorModel]:
    """The newest model for this cost key of each of these machine types that has one."""
    with transaction() as cur:
        cur.execute(SELECT_LATEST_OF, (machine_types, cost_key))
        return {r["machine_type"]: cast(PredictorModel, r) for r in cur.fetchall()}


def keys_of(*, machine_types: list[str]) -> dict[str, list[str]]:
    """The cost keys each of these machine types has a model for (those with none are absent)."""
    with transaction() as cur:
        cur.execute(SELECT_KEYS_OF, (machine_types,))
        rows = cur.fetchall()
    out: dict[str, list[str]] = {}
    for r in rows:
        out.setdefault(r["machine_type"], []).append(r["cost_key"])
    return {m: sorted(k) for m, k in out.items()}


@lru_cache(maxsize=32)
def _fitted(model_id: int) -> step_model.Fitted:
    with transaction() as cur:
        cur.execute(SELECT_PARAMS, (model_id,))
        return step_model.load(one(cur)["params"])


def predict_ms(model: PredictorModel, x: list[float], conv_ms: float) -> tuple[float, float, float]:
    """(P10, median, P90) iteration time in milliseconds."""
    _check_kind(model)
    return step_model.predict(_fitted(model["id"]), x, conv_ms)


def predict_table(model: PredictorModel, x: Any) -> list[tuple[float, float, float]]:
    """(P10, median, P90) ms of every point of a features.table, in one model call."""
    _check_kind(model)
    return step_model.predict_table(_fitted(model["id"]), x)


def _check_kind(model: PredictorModel) -> None:
    if model["kind"] != KIND or model["params"].get("features") != list(features.NAMES):
        raise InvalidRequest(f"model v{model['version']} ({model['kind']}) is of an older kind; retrain it")
