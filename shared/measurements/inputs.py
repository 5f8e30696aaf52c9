"""The input pipeline's measured CPU cost per machine type: the `input_rates` table."""

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from shared.core.db import Cursor, Json, insert_new, rows_of, transaction

# What the agent measures (gpu_agent/input_bench.py): ImageNet-sized JPEGs (500x375, quality 90) decoded with PIL
# and put through torchvision's standard ImageNet training transforms to 224 px.
PIPELINE = "imagenet-train/500x375/q90/224"


class InputRate(BaseModel):
    """One measurement of decoding and augmenting images on a machine type's CPUs."""

    machine_type: str
    environment_id: int
    pipeline: str = PIPELINE
    host_cpus: int = Field(gt=0, description="the CPUs the agent's host let it use")
    decode_ms: float = Field(gt=0, description="decoding one JPEG in one worker process")
    augment_ms: float = Field(gt=0, description="the training transforms of one decoded image in one worker")
    images_per_s_all: float = Field(gt=0, description="images per second with a worker on every CPU, all together")
    jpeg_kb: float = Field(gt=0, description="mean size of the JPEGs measured")
    stats: dict[str, Any] = Field(default_factory=dict)
    measured_at: datetime | None = None

    @property
    def per_cpu(self) -> float:
        """Images per second one CPU gives with every CPU busy."""
        return self.images_per_s_all / self.host_cpus


INSERT = """
INSERT INTO input_rates (machine_type, environment_id, pipeline, host_cpus, decode_ms, augment_ms, images_per_s_all,
                         jpeg_kb, stats)
VALUES (%(machine_type)s, %(environment_id)s, %(pipeline)s, %(host_cpus)s, %(decode_ms)s, %(augment_ms)s,
        %(images_per_s_all)s, %(jpeg_kb)s, %(stats)s)
ON CONFLICT (machine_type, environment_id, pipeline) DO NOTHING"""
SELECT_STORED = """
SELECT 1 FROM input_rates WHERE machine_type = %s AND environment_id = %s AND pipeline = %s"""
# The newest measurement of each machine type: a type's rate comes from one environment, never an average.
SELECT_NEWEST = """
SELECT DISTINCT ON (machine_type) machine_type, environment_id, pipeline, host_cpus, decode_ms, augment_ms,
       images_per_s_all, jpeg_kb, stats, measured_at
FROM input_rates WHERE pipeline = %s ORDER BY machine_type, measured_at DESC, id DESC"""


def save(*, rate: InputRate) -> None:
    """Store a measurement (once per machine type, environment and pipeline)."""
    row = rate.model_dump(exclude={"measured_at"})
    with transaction() as cur:
        cur.execute(INSERT, {**row, "stats": Json(row["stats"])})


def stored(*, machine_type: str, environment_id: int, pipeline: str = PIPELINE) -> bool:
    """Whether this environment's rate on the machine type is stored (the agent measures it once)."""
    with transaction() as cur:
        cur.execute(SELECT_STORED, (machine_type, environment_id, pipeline))
        return cur.fetchone() is not None


def newest(*, pipeline: str = PIPELINE) -> dict[str, InputRate]:
    """Machine type → its newest measurement, for every machine type measured."""
    with transaction() as cur:
        cur.execute(SELECT_NEWEST, (pipeline,))
        return {r["machine_type"]: InputRate.model_validate(dict(r)) for r in cur.fetchall()}


# Bundles (shared/measurements/bundle.py): input-pipeline rates of machine types, oldest first; stored elsewhere
# with ids mapped to that installation's own, each once.
BUNDLE_COLUMNS = (
    "machine_type", "environment_id", "pipeline", "host_cpus", "decode_ms", "augment_ms", "images_per_s_all",
    "jpeg_kb", "stats", "measured_at"
)  # fmt: skip
EXPORT_INPUT_RATES = f"""
SELECT {", ".join(BUNDLE_COLUMNS)} FROM input_rates WHERE machine_type = ANY(%s) ORDER BY id"""
IMPORT_INPUT_RATES = f"""
INSERT INTO input_rates ({", ".join(BUNDLE_COLUMNS)}) VALUES %s
ON CONFLICT (machine_type, environment_id, pipeline) DO NOTHING RETURNING 1"""


def export_rows(cur: Cursor, *, machine_types: list[str]) -> list[dict[str, Any]]:
    """This table's rows of the machine types, as plain JSON values, in the caller's transaction."""
    return rows_of(cur, EXPORT_INPUT_RATES, (machine_types,))


def import_rows(cur: Cursor, *, rows: list[dict[str, Any]]) -> int:
    """Store rows another installation exported (ids already mapped to this one's); how many were new."""
    return insert_new(cur, IMPORT_INPUT_RATES, BUNDLE_COLUMNS, rows)
