"""The `reference_conv_times` table: the reference model's conv predictions, shared by every worker process.

A cache of the model's output keyed by its version and inputs (prediction/reference/model.py `store_key`), so a
worker process that starts, or a job at batch sizes another process has answered, reads them instead of running
LightGBM again. A read or write that fails is logged and skipped: the model computes what it cannot read.
"""

import logging

import numpy as np
import psycopg2
import psycopg2.extras

from prediction.reference import ReferenceModel
from prediction.reference.model import Stored
from shared.core.db import transaction
from shared.core.errors import ServiceUnavailable

log = logging.getLogger(__name__)

SELECT_LAYERS = "SELECT key, times, tensor, known_mask FROM reference_conv_times WHERE key = ANY(%s)"
# A row only grows: a writer holds what it read plus what it computed, so it never has fewer known batch sizes.
UPSERT_LAYERS = """
INSERT INTO reference_conv_times (key, model_version, slots, known, times, tensor, known_mask) VALUES %s
ON CONFLICT (key) DO UPDATE SET slots = EXCLUDED.slots, known = EXCLUDED.known, times = EXCLUDED.times,
    tensor = EXCLUDED.tensor, known_mask = EXCLUDED.known_mask, stored_at = now()
WHERE reference_conv_times.known <= EXCLUDED.known"""


class PostgresLayers:
    """A LayerStore in PostgreSQL."""

    def load(self, keys: list[str]) -> dict[str, Stored]:
        """The stored layers among these keys (none if PostgreSQL cannot be read)."""
        try:
            with transaction() as cur:
                cur.execute(SELECT_LAYERS, (keys,))
                rows = cur.fetchall()
        except (psycopg2.Error, ServiceUnavailable) as exc:
            log.warning("reference conv predictions not read (%s): computing them", exc)
            return {}
        out = {}
        for row in rows:
            # psycopg2 gives bytea as memoryview: read in place, copied once into arrays the cache may grow.
            known = np.frombuffer(row["known_mask"], dtype=bool).copy()
            times = np.frombuffer(row["times"], dtype="<f8").reshape(len(known), 3).copy()
            tensor = np.frombuffer(row["tensor"], dtype=bool).reshape(len(known), 3).copy()
            out[row["key"]] = (times, tensor, known)
        return out

    def save(self, version: str, layers: dict[str, Stored]) -> None:
        """Store these layers (a failure is logged: the next process computes them again)."""
        rows = [
            (key, version, len(known), int(known.sum()), times.astype("<f8").tobytes(), tensor.tobytes(),
             known.tobytes())
            for key, (times, tensor, known) in sorted(layers.items())  # one order: concurrent writers never deadlock
        ]  # fmt: skip
        try:
            with transaction() as cur:
                psycopg2.extras.execute_values(cur, UPSERT_LAYERS, rows, page_size=500)
        except (psycopg2.Error, ServiceUnavailable) as exc:
            log.warning("reference conv predictions not stored (%s)", exc)


# Rows whose batch sizes 1..n are all known: known_mask is one byte per size from 0, and bytes 2..n+1 hold no zero.
SELECT_COMPLETE = """
SELECT key FROM reference_conv_times
WHERE key = ANY(%(keys)s) AND length(known_mask) > %(n)s
  AND position('\\x00'::bytea IN substring(known_mask FROM 2 FOR %(n)s)) = 0"""


def complete(keys: list[str], *, up_to: int) -> set[str]:
    """Those of these keys stored with a prediction at every batch size 1..up_to (none if PostgreSQL cannot be read)."""
    try:
        with transaction() as cur:
            cur.execute(SELECT_COMPLETE, {"keys": keys, "n": up_to})
            return {row["key"] for row in cur.fetchall()}
    except (psycopg2.Error, ServiceUnavailable) as exc:
        log.warning("reference conv predictions not read (%s)", exc)
        return set()


DELETE_OTHER_VERSIONS = "DELETE FROM reference_conv_times WHERE model_version <> %s"


def prune(*, version: str) -> int:
    """Delete the predictions of every other model version (a worker of this version reads none of them)."""
    try:
        with transaction() as cur:
            cur.execute(DELETE_OTHER_VERSIONS, (version,))
            return int(cur.rowcount)
    except (psycopg2.Error, ServiceUnavailable) as exc:
        log.warning("older reference conv predictions not deleted (%s)", exc)
        return 0


def attached(model: ReferenceModel) -> ReferenceModel:
    """The model, reading and keeping its conv predictions in PostgreSQL."""
    if model.store is None:
        model.store = PostgresLayers()
    return model
