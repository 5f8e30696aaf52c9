"""All-reduce timings a multi-GPU host's agent measured: the `allreduce_timings` table."""

from dataclasses import dataclass
from typing import Any

from shared.core.db import Cursor, Json, insert_new, rows_of, transaction

INSERT = """
INSERT INTO allreduce_timings (machine_type, environment_id, backend, gpus, bytes, ms, stats)
VALUES (%(machine_type)s, %(environment_id)s, %(backend)s, %(gpus)s, %(bytes)s, %(ms)s, %(stats)s)
ON CONFLICT (machine_type, environment_id, backend, gpus, bytes) DO NOTHING"""
SELECT_DONE = """
SELECT DISTINCT gpus FROM allreduce_timings WHERE machine_type = %s AND environment_id = %s AND backend = %s"""
# Each (type, GPU count)'s largest message in its newest environment: the bus bandwidth a DDP bucket sees.
SELECT_LARGEST = """
SELECT DISTINCT ON (machine_type, gpus) machine_type, gpus, bytes, ms, environment_id, measured_at
FROM allreduce_timings WHERE backend = %s AND machine_type = ANY(%s)
ORDER BY machine_type, gpus, measured_at DESC, bytes DESC"""


@dataclass(frozen=True)
class Measured:
    """An all-reduce of `bytes` over `gpus` GPUs of a machine type that took `ms`, and NCCL's bus bandwidth of it."""

    machine_type: str
    gpus: int
    bytes: int
    ms: float
    environment_id: int

    @property
    def bus_gbs(self) -> float:
        """GB/s each GPU's links carried: 2(p-1)/p x bytes / time, as nccl-tests reports busbw."""
        return 2 * (self.gpus - 1) / self.gpus * self.bytes / (self.ms / 1000) / 1e9


def save(*, machine_type: str, environment_id: int, backend: str, gpus: int, timings: list[tuple[int, float]],
         stats: dict[str, Any]) -> None:  # fmt: skip
    """Store one GPU count's timings, (bytes, median ms) each."""
    rows = [{"machine_type": machine_type, "environment_id": environment_id, "backend": backend, "gpus": gpus,
             "bytes": size, "ms": ms, "stats": Json(stats)} for size, ms in timings]  # fmt: skip
    with transaction() as cur:
        cur.executemany(INSERT, rows)


def gpu_counts_done(*, machine_type: str, environment_id: int, backend: str) -> set[int]:
    """The GPU counts stored for this environment (the agent measures each once)."""
    with transaction() as cur:
        cur.execute(SELECT_DONE, (machine_type, environment_id, backend))
        return {int(r["gpus"]) for r in cur.fetchall()}


def largest(*, machine_types: list[str], backend: str = "nccl") -> dict[tuple[str, int], Measured]:
    """(machine type, GPUs) → its largest measured all-reduce in its newest environment."""
    with transaction() as cur:
        cur.execute(SELECT_LARGEST, (backend, machine_types))
        return {
            (r["machine_type"], r["gpus"]): Measured(
                r["machine_type"], r["gpus"], r["bytes"], r["ms"], r["environment_id"]
            )  # fmt: skip
            for r in cur.fetchall()
        }


# Bundles (shared/measurements/bundle.py): all-reduce timings of machine types, oldest first; stored elsewhere
# with ids mapped to that installation's own, each once.
BUNDLE_COLUMNS = (
    "machine_type", "environment_id", "backend", "gpus", "bytes", "ms", "stats", "measured_at"
)  # fmt: skip
EXPORT_ALLREDUCE_TIMINGS = f"""
SELECT {", ".join(BUNDLE_COLUMNS)} FROM allreduce_timings WHERE machine_type = ANY(%s) ORDER BY id"""
IMPORT_ALLREDUCE_TIMINGS = f"""
INSERT INTO allreduce_timings ({", ".join(BUNDLE_COLUMNS)}) VALUES %s
ON CONFLICT (machine_type, environment_id, backend, gpus, bytes) DO NOTHING RETURNING 1"""


def export_rows(cur: Cursor, *, machine_types: list[str]) -> list[dict[str, Any]]:
    """This table's rows of the machine types, as plain JSON values, in the caller's transaction."""
    return rows_of(cur, EXPORT_ALLREDUCE_TIMINGS, (machine_types,))


def import_rows(cur: Cursor, *, rows: list[dict[str, Any]]) -> int:
    """Store rows another installation exported (ids already mapped to this one's); how many were new."""
    return insert_new(cur, IMPORT_ALLREDUCE_TIMINGS, BUNDLE_COLUMNS, rows)
