"""Writing measurements: idempotent, so a redelivered task adds nothing twice."""

from typing import Any

from gpu_agent.windows import Outcome
from shared.db import Json, transaction
from shared.training import TrainConfig

METHOD = "interleaved-rounds"

SELECT_LAYER_DONE = """
SELECT batch_size FROM layer_benchmarks
WHERE signature_id = %s AND machine_type = %s AND precision = %s AND channels_last = %s AND environment_id = %s"""
INSERT_LAYER = """
INSERT INTO layer_benchmarks (signature_id, machine_type, batch_size, precision, channels_last, environment_id, oom,
                              forward_ms, backward_data_ms, backward_weight_ms, stats)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (signature_id, machine_type, batch_size, precision, channels_last, environment_id) DO NOTHING"""
SELECT_OP_DONE = """
SELECT batch_size FROM op_benchmarks
WHERE op_signature_id = %s AND machine_type = %s AND variant = %s AND environment_id = %s"""
# An infeasible op is stored without timings: done, and learnt rather than measured.
INSERT_OP = """
INSERT INTO op_benchmarks (op_signature_id, machine_type, batch_size, variant, environment_id, oom,
                           forward_ms, backward_ms, stats)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (op_signature_id, machine_type, batch_size, variant, environment_id) DO NOTHING"""
# Infeasible steps count as done: measuring them again would fail the same way.
_STEP_KEY = """cnn_name = %(cnn)s AND machine_type = %(machine)s AND image_size = %(image_size)s
  AND optimizer = %(optimizer)s AND momentum = %(momentum)s AND weight_decay = %(weight_decay)s
  AND precision = %(precision)s AND channels_last = %(channels_last)s AND environment_id = %(env)s"""
SELECT_STEP_DONE = f"""
SELECT batch_size FROM step_measurements WHERE {_STEP_KEY}
UNION
SELECT batch_size FROM step_failures WHERE {_STEP_KEY}"""
_STEP_COLUMNS = """cnn_name, machine_type, batch_size, image_size, optimizer, momentum, weight_decay, precision,
    channels_last, environment_id"""
_STEP_VALUES = """%(cnn)s, %(machine)s, %(batch_size)s, %(image_size)s, %(optimizer)s, %(momentum)s, %(weight_decay)s,
    %(precision)s, %(channels_last)s, %(env)s"""
INSERT_STEP = f"""
INSERT INTO step_measurements ({_STEP_COLUMNS}, oom, step_ms, stats)
VALUES ({_STEP_VALUES}, %(oom)s, %(step_ms)s, %(stats)s)
ON CONFLICT ({_STEP_COLUMNS}) DO NOTHING"""
INSERT_STEP_FAILURE = f"""
INSERT INTO step_failures ({_STEP_COLUMNS}, reason)
VALUES ({_STEP_VALUES}, %(reason)s)
ON CONFLICT ({_STEP_COLUMNS}) DO NOTHING"""

INSERT_LAYER_FAILURE = """
INSERT INTO layer_failures (signature_id, machine_type, precision, environment_id, batch_sizes, error)
VALUES (%s, %s, %s, %s, %s, %s)"""
INSERT_OP_FAILURE = """
INSERT INTO op_failures (op_signature_id, machine_type, variant, environment_id, batch_sizes, error)
VALUES (%s, %s, %s, %s, %s, %s)"""


def stats(outcome: Outcome) -> dict[str, Any]:
    """The stats column: every phase's statistics and what it was timed with, or the reason it has none."""
    if outcome.timings is None:
        return {"reason": outcome.reason}
    return {
        **{phase: t.to_json() for phase, t in outcome.timings.items()},
        "method": METHOD,
        "window": list(outcome.window),
        **outcome.info,
    }


def layer_batch_sizes_done(
    *, signature_id: int, machine: str, precision: str, environment_id: int, channels_last: bool = False
) -> set[int]:
    """Batch sizes already measured for a signature in this environment (resume, don't re-measure)."""
    with transaction() as cur:
        cur.execute(SELECT_LAYER_DONE, (signature_id, machine, precision, channels_last, environment_id))
        return {r["batch_size"] for r in cur.fetchall()}


def op_batch_sizes_done(*, signature_id: int, machine: str, variant: str, environment_id: int) -> set[int]:
    """Batch sizes already stored for an op signature in this variant and environment."""
    with transaction() as cur:
        cur.execute(SELECT_OP_DONE, (signature_id, machine, variant, environment_id))
        return {r["batch_size"] for r in cur.fetchall()}


def save_op(
    *, signature_id: int, machine: str, batch_size: int, variant: str, environment_id: int, outcome: Outcome
) -> None:
    """Store one op measurement (forward and backward; the optimizer's step as forward, backward 0), OOM or reason."""
    ms: tuple[float | None, float | None] = (None, None)
    if outcome.timings is not None:
        t = outcome.timings
        ms = (t["step"].value_ms, 0.0) if "step" in t else (t["forward"].value_ms, t["backward"].value_ms)
    with transaction() as cur:
        cur.execute(
            INSERT_OP,
            (signature_id, machine, batch_size, variant, environment_id, outcome.oom, *ms, Json(stats(outcome))),
        )


def save_layer(
    *, signature_id: int, machine: str, batch_size: int, precision: str, environment_id: int, outcome: Outcome,
    channels_last: bool = False,
) -> None:  # fmt: skip
    """Store one layer measurement (or its out of memory)."""
    if outcome.infeasible:
        raise ValueError(f"a layer is measured or out of memory, never infeasible: {outcome.reason}")
    ms: tuple[float | None, ...] = (None, None, None)
    if outcome.timings is not None:
        ms = tuple(outcome.timings[p].value_ms for p in ("forward", "backward_data", "backward_weight"))
    with transaction() as cur:
        cur.execute(
            INSERT_LAYER,
            (
                signature_id, machine, batch_size, precision, channels_last, environment_id, outcome.oom, *ms,
                Json(stats(outcome)),
            ),
        )  # fmt: skip


def _step_params(cnn: str, machine: str, image_size: int, config: TrainConfig, env: int) -> dict[str, Any]:
    return {"cnn": cnn, "machine": machine, "image_size": image_size, "env": env, **config.model_dump()}


def step_batch_sizes_done(
    *, cnn: str, machine: str, image_size: int, config: TrainConfig, environment_id: int
) -> set[int]:
    """Batch sizes whose whole step is stored in this environment and configuration, measured or infeasible."""
    with transaction() as cur:
        cur.execute(SELECT_STEP_DONE, _step_params(cnn, machine, image_size, config, environment_id))
        return {r["batch_size"] for r in cur.fetchall()}


def save_step(
    *, cnn: str, machine: str, batch_size: int, image_size: int, config: TrainConfig, environment_id: int,
    outcome: Outcome,
) -> None:  # fmt: skip
    """Store one whole-step measurement, its out of memory, or why the CNN cannot take the step."""
    params = _step_params(cnn, machine, image_size, config, environment_id) | {"batch_size": batch_size}
    with transaction() as cur:
        if outcome.infeasible:
            cur.execute(INSERT_STEP_FAILURE, {**params, "reason": outcome.reason})
            return
        step_ms = outcome.timings["step"].value_ms if outcome.timings else None
        cur.execute(INSERT_STEP, {**params, "oom": outcome.oom, "step_ms": step_ms, "stats": Json(stats(outcome))})


def save_layer_failure(
    *, signature_id: int, machine: str, precision: str, environment_id: int, batch_sizes: list[int], error: str
) -> None:
    """Record that measuring a signature raised, so the worker can fail the jobs waiting for it."""
    with transaction() as cur:
        cur.execute(INSERT_LAYER_FAILURE, (signature_id, machine, precision, environment_id, batch_sizes, error[:2000]))


def save_op_failure(
    *, signature_id: int, machine: str, variant: str, environment_id: int, batch_sizes: list[int], error: str
) -> None:
    """Record that measuring an op signature raised, so the worker can fail the jobs waiting for it."""
    with transaction() as cur:
        cur.execute(INSERT_OP_FAILURE, (signature_id, machine, variant, environment_id, batch_sizes, error[:2000]))
