"""Writing measurements: idempotent, so a redelivered task adds nothing twice."""

from gpu_agent.layer_bench import LayerResult
from gpu_agent.step_bench import StepResult
from shared.db import Json, transaction

SELECT_LAYER_DONE = """
SELECT batch_size FROM layer_benchmarks
WHERE signature_id = %s AND machine_type = %s AND precision = %s AND environment_id = %s"""
INSERT_LAYER = """
INSERT INTO layer_benchmarks (signature_id, machine_type, batch_size, precision, environment_id, oom,
                              forward_ms, backward_data_ms, backward_weight_ms, stats)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (signature_id, machine_type, batch_size, precision, environment_id) DO NOTHING"""
SELECT_STEP_DONE = """
SELECT batch_size FROM step_measurements
WHERE cnn_name = %s AND machine_type = %s AND image_size = %s AND optimizer = %s
  AND precision = %s AND environment_id = %s"""
INSERT_STEP = """
INSERT INTO step_measurements (cnn_name, machine_type, batch_size, image_size, optimizer, precision,
                               environment_id, oom, step_ms, stats)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (cnn_name, machine_type, batch_size, image_size, optimizer, precision, environment_id) DO NOTHING"""


def layer_batch_sizes_done(*, signature_id: int, machine: str, precision: str, environment_id: int) -> set[int]:
    """Batch sizes already measured for a signature in this environment (resume, don't re-measure)."""
    with transaction() as cur:
        cur.execute(SELECT_LAYER_DONE, (signature_id, machine, precision, environment_id))
        return {r["batch_size"] for r in cur.fetchall()}


def save_layer(
    *, signature_id: int, machine: str, batch_size: int, precision: str, environment_id: int, result: LayerResult
) -> None:
    """Store one layer measurement."""
    ms: tuple[float | None, float | None, float | None] = (None, None, None)
    if not result.oom:
        assert result.forward and result.backward_data and result.backward_weight
        ms = (result.forward.median_ms, result.backward_data.median_ms, result.backward_weight.median_ms)
    with transaction() as cur:
        cur.execute(
            INSERT_LAYER,
            (signature_id, machine, batch_size, precision, environment_id, result.oom, *ms, Json(result.stats())),
        )


def step_batch_sizes_done(
    *, cnn: str, machine: str, image_size: int, optimizer: str, precision: str, environment_id: int
) -> set[int]:
    """Batch sizes whose whole step is already measured in this environment."""
    with transaction() as cur:
        cur.execute(SELECT_STEP_DONE, (cnn, machine, image_size, optimizer, precision, environment_id))
        return {r["batch_size"] for r in cur.fetchall()}


def save_step(
    *,
    cnn: str,
    machine: str,
    batch_size: int,
    image_size: int,
    optimizer: str,
    precision: str,
    environment_id: int,
    result: StepResult,
) -> None:
    """Store one whole-step measurement."""
    step_ms = result.timing.median_ms if result.timing else None
    with transaction() as cur:
        cur.execute(
            INSERT_STEP,
            (
                cnn,
                machine,
                batch_size,
                image_size,
                optimizer,
                precision,
                environment_id,
                result.oom,
                step_ms,
                Json(result.stats()),
            ),
        )
