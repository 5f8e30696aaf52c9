"""Whole training steps measured by agents (`step_measurements`) and the steps a CNN cannot take (`step_failures`)."""

from typing import Any, TypedDict, cast

from shared.core.db import Cursor, Json, insert_new, rows_of, transaction
from shared.training import Optimizer, Precision, TrainConfig

# Infeasible steps count as done: measuring them again would fail the same way.
_STEP_KEY = """cnn_name = %(cnn)s AND machine_type = %(machine_type)s AND image_size = %(image_size)s
  AND optimizer = %(optimizer)s AND momentum = %(momentum)s AND weight_decay = %(weight_decay)s
  AND precision = %(precision)s AND channels_last = %(channels_last)s AND cudnn_benchmark = %(cudnn_benchmark)s
  AND environment_id = %(env)s"""
SELECT_DONE = f"""
SELECT batch_size FROM step_measurements WHERE {_STEP_KEY}
UNION
SELECT batch_size FROM step_failures WHERE {_STEP_KEY}"""
_COLUMNS = """cnn_name, machine_type, batch_size, image_size, optimizer, momentum, weight_decay, precision,
    channels_last, cudnn_benchmark, environment_id"""
_VALUES = """%(cnn)s, %(machine_type)s, %(batch_size)s, %(image_size)s, %(optimizer)s, %(momentum)s, %(weight_decay)s,
    %(precision)s, %(channels_last)s, %(cudnn_benchmark)s, %(env)s"""
INSERT_STEP = f"""
INSERT INTO step_measurements ({_COLUMNS}, oom, step_ms, peak_memory_bytes, stats)
VALUES ({_VALUES}, %(oom)s, %(step_ms)s, %(peak)s, %(stats)s)
ON CONFLICT ({_COLUMNS}) DO NOTHING"""
INSERT_FAILURE = f"""
INSERT INTO step_failures ({_COLUMNS}, reason)
VALUES ({_VALUES}, %(reason)s)
ON CONFLICT ({_COLUMNS}) DO NOTHING"""

_CONFIG = """optimizer = %(optimizer)s AND momentum = %(momentum)s AND weight_decay = %(weight_decay)s
      AND precision = %(precision)s AND channels_last = %(channels_last)s AND cudnn_benchmark = %(cudnn_benchmark)s"""
# Measured and infeasible steps both count: a calibration is complete in an environment when each is one or other.
COUNT_BY_ENVIRONMENT = f"""
SELECT environment_id, count(DISTINCT (cnn_name, batch_size)) AS n FROM (
    SELECT environment_id, cnn_name, batch_size, image_size, machine_type, optimizer, momentum, weight_decay,
           precision, channels_last, cudnn_benchmark
    FROM step_measurements
    UNION ALL
    SELECT environment_id, cnn_name, batch_size, image_size, machine_type, optimizer, momentum, weight_decay,
           precision, channels_last, cudnn_benchmark
    FROM step_failures
) s
WHERE machine_type = %(machine_type)s AND image_size = %(image_size)s AND {_CONFIG}
  AND cnn_name = ANY(%(cnns)s) AND batch_size = ANY(%(batch_sizes)s)
GROUP BY environment_id"""
SELECT_FAILURES = f"""
SELECT DISTINCT cnn_name, batch_size, reason FROM step_failures
WHERE machine_type = %(machine_type)s AND image_size = %(image_size)s AND {_CONFIG}
  AND cnn_name = ANY(%(cnns)s) AND batch_size = ANY(%(batch_sizes)s)
ORDER BY cnn_name, batch_size"""
SELECT_MEASURED = """
SELECT id, cnn_name, batch_size, image_size, optimizer, momentum, weight_decay, precision, channels_last,
       cudnn_benchmark, environment_id, step_ms
FROM step_measurements WHERE machine_type = %s AND NOT oom
ORDER BY id"""
SELECT_MEASURED_TYPES = "SELECT DISTINCT machine_type FROM step_measurements WHERE NOT oom AND machine_type <> %s"


class StepFailure(TypedDict):
    """A whole step found infeasible (torch raised other than out of memory), with torch's reason."""

    cnn_name: str
    batch_size: int
    reason: str


class MeasuredStep(TypedDict):
    """A whole training step that ran (not out of memory): its setting, environment and time, for model fitting."""

    id: int
    cnn_name: str
    batch_size: int
    image_size: int
    optimizer: Optimizer
    momentum: float
    weight_decay: float
    precision: Precision
    channels_last: bool
    cudnn_benchmark: bool
    environment_id: int
    step_ms: float


def _key(cnn: str, machine_type: str, image_size: int, config: TrainConfig, env: int) -> dict[str, Any]:
    return {"cnn": cnn, "machine_type": machine_type, "image_size": image_size, "env": env, **config.model_dump()}


def _unit(
    machine_type: str, image_size: int, config: TrainConfig, cnns: list[str], batch_sizes: list[int]
) -> dict[str, Any]:
    return {
        **config.model_dump(), "machine_type": machine_type, "image_size": image_size, "cnns": cnns,
        "batch_sizes": batch_sizes,
    }  # fmt: skip


def batch_sizes_done(
    *, cnn: str, machine_type: str, image_size: int, config: TrainConfig, environment_id: int
) -> set[int]:
    """Batch sizes whose whole step is stored in this environment and configuration, measured or infeasible."""
    with transaction() as cur:
        cur.execute(SELECT_DONE, _key(cnn, machine_type, image_size, config, environment_id))
        return {r["batch_size"] for r in cur.fetchall()}


def save(
    *, cnn: str, machine_type: str, batch_size: int, image_size: int, config: TrainConfig, environment_id: int,
    oom: bool, step_ms: float | None, stats: dict[str, Any], peak_memory_bytes: int | None = None,
) -> None:  # fmt: skip
    """Store one whole-step measurement (with the peak memory the agent measured) or its out of memory (idempotent)."""
    params = _key(cnn, machine_type, image_size, config, environment_id) | {"batch_size": batch_size}
    row = {"oom": oom, "step_ms": step_ms, "peak": peak_memory_bytes, "stats": Json(stats)}
    with transaction() as cur:
        cur.execute(INSERT_STEP, params | row)


def save_failure(
    *,
    cnn: str,
    machine_type: str,
    batch_size: int,
    image_size: int,
    config: TrainConfig,
    environment_id: int,
    reason: str | None,
) -> None:
    """Store why the CNN cannot take this step (idempotent)."""
    params = _key(cnn, machine_type, image_size, config, environment_id) | {"batch_size": batch_size}
    with transaction() as cur:
        cur.execute(INSERT_FAILURE, {**params, "reason": reason})


def count_by_environment(
    *, machine_type: str, image_size: int, config: TrainConfig, cnns: list[str], batch_sizes: list[int]
) -> dict[int, int]:
    """Environment id → (CNN, batch size) steps stored there, measured or infeasible."""
    with transaction() as cur:
        cur.execute(COUNT_BY_ENVIRONMENT, _unit(machine_type, image_size, config, cnns, batch_sizes))
        return {r["environment_id"]: int(r["n"]) for r in cur.fetchall()}


def failures(
    *, machine_type: str, image_size: int, config: TrainConfig, cnns: list[str], batch_sizes: list[int]
) -> list[StepFailure]:
    """The (CNN, batch size) steps found infeasible, with torch's reason."""
    with transaction() as cur:
        cur.execute(SELECT_FAILURES, _unit(machine_type, image_size, config, cnns, batch_sizes))
        return cast(list[StepFailure], cur.fetchall())


def measured(*, machine_type: str) -> list[MeasuredStep]:
    """A machine type's whole steps that ran (not out of memory), oldest first."""
    with transaction() as cur:
        cur.execute(SELECT_MEASURED, (machine_type,))
        return cast(list[MeasuredStep], cur.fetchall())


def measured_types(*, other_than: str) -> list[str]:
    """The other machine types with whole steps that ran."""
    with transaction() as cur:
        cur.execute(SELECT_MEASURED_TYPES, (other_than,))
        return [r["machine_type"] for r in cur.fetchall()]


# Bundles (shared/measurements/bundle.py): whole steps of machine types, oldest first; stored elsewhere
# with ids mapped to that installation's own, each once.
BUNDLE_COLUMNS = (
    "cnn_name", "machine_type", "batch_size", "image_size", "optimizer", "momentum", "weight_decay", "precision",
    "channels_last", "cudnn_benchmark", "environment_id", "oom", "step_ms", "peak_memory_bytes", "stats",
    "measured_at"
)  # fmt: skip
EXPORT_STEP_MEASUREMENTS = f"""
SELECT {", ".join(BUNDLE_COLUMNS)} FROM step_measurements WHERE machine_type = ANY(%s) ORDER BY id"""
IMPORT_STEP_MEASUREMENTS = f"""
INSERT INTO step_measurements ({", ".join(BUNDLE_COLUMNS)}) VALUES %s
ON CONFLICT ({_COLUMNS}) DO NOTHING RETURNING 1"""


def export_rows(cur: Cursor, *, machine_types: list[str]) -> list[dict[str, Any]]:
    """This table's rows of the machine types, as plain JSON values, in the caller's transaction."""
    return rows_of(cur, EXPORT_STEP_MEASUREMENTS, (machine_types,))


def import_rows(cur: Cursor, *, rows: list[dict[str, Any]]) -> int:
    """Store rows another installation exported (ids already mapped to this one's); how many were new."""
    return insert_new(cur, IMPORT_STEP_MEASUREMENTS, BUNDLE_COLUMNS, rows)
