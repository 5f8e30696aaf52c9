"""CNNs, their conv signatures and the layer benchmarks stored for them."""

from typing import Any

from shared import cnns, ops
from shared.db import Cursor, Json, one, transaction

UPSERT_CNN = """
INSERT INTO cnns (name, source, definition) VALUES (%s, 'torchvision', %s)
ON CONFLICT (name) DO NOTHING"""
# DO UPDATE (a no-op) rather than DO NOTHING so RETURNING also yields rows that existed.
UPSERT_SIGNATURE = """
INSERT INTO conv_signatures (hash, spec) VALUES (%s, %s)
ON CONFLICT (hash) DO UPDATE SET hash = EXCLUDED.hash
RETURNING id"""
UPSERT_MEMBERSHIP = """
INSERT INTO cnn_layers (cnn_name, image_size, num_classes, signature_id, count) VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (cnn_name, image_size, num_classes, signature_id) DO UPDATE SET count = EXCLUDED.count"""
UPSERT_WORKLOAD = """
INSERT INTO cnn_workloads (cnn_name, image_size, num_classes, conv_count, workload) VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (cnn_name, image_size, num_classes) DO UPDATE
SET conv_count = EXCLUDED.conv_count, workload = EXCLUDED.workload"""
SELECT_SPECS = "SELECT id, hash, spec FROM conv_signatures WHERE id = ANY(%s)"
SELECT_DONE = """
SELECT DISTINCT signature_id, machine_type, batch_size FROM layer_benchmarks
WHERE signature_id = ANY(%(sigs)s) AND machine_type = ANY(%(machines)s)
  AND batch_size = ANY(%(batch_sizes)s) AND precision = %(precision)s AND channels_last = %(channels_last)s"""
# The newest row per key: rows of another environment are never averaged in.
SELECT_BENCHMARKS = """
SELECT signature_id, batch_size, oom, forward_ms, backward_data_ms, backward_weight_ms, environment_id, machine_type
FROM layer_benchmarks
WHERE signature_id = ANY(%(sigs)s) AND machine_type = ANY(%(machines)s)
  AND batch_size = ANY(%(batch_sizes)s) AND precision = %(precision)s AND channels_last = %(channels_last)s
ORDER BY measured_at DESC, id DESC"""

# Metrics (api/metrics.py): rows stored per machine type, and the seconds agents spent in their timed runs
# (measured_s, migrations/0020_metrics.sql); an index-only scan of layer_benchmarks_machine_measured.
SELECT_TOTALS = """
SELECT machine_type, count(*) AS n, COALESCE(sum(measured_s), 0) AS seconds
FROM layer_benchmarks GROUP BY machine_type"""


def benchmark_totals(cur: Cursor) -> list[dict[str, Any]]:
    """Per machine type: layer benchmark rows stored and their timed seconds."""
    cur.execute(SELECT_TOTALS)
    return [dict(r) for r in cur.fetchall()]


def register(*, name: str, image_size: int, num_classes: int | None = None) -> list[tuple[int, int]]:
    """Read a CNN's conv layers, other ops and workload and store them; returns [(conv signature_id, count), …]."""
    layers = cnns.read(name=name, image_size=image_size, num_classes=num_classes)
    classes = cnns.variant_classes(name, num_classes)
    out: list[tuple[int, int]] = []
    with transaction() as cur:
        if cnns.is_builtin(name):
            cur.execute(UPSERT_CNN, (name, Json({"torchvision": name})))
        for sig, count in zip(layers.signatures, layers.counts, strict=True):
            cur.execute(UPSERT_SIGNATURE, (sig.hash, Json(sig.to_json())))
            sig_id = one(cur)["id"]
            cur.execute(UPSERT_MEMBERSHIP, (name, image_size, classes, sig_id, count))
            out.append((sig_id, count))
        cur.execute(UPSERT_WORKLOAD, (name, image_size, classes, layers.total, Json(layers.workload)))
        ops.store(cur, name=name, image_size=image_size, num_classes=classes, layers=layers)
    return out


def register_builtin(*, name: str, image_size: int) -> list[tuple[int, int]]:
    """Register a built-in CNN with its default 1000 classes (as calibration measures it)."""
    return register(name=name, image_size=image_size)


def specs(*, signature_ids: list[int]) -> dict[int, dict[str, Any]]:
    """Signature id → {hash, spec}."""
    with transaction() as cur:
        cur.execute(SELECT_SPECS, (signature_ids,))
        return {r["id"]: {"hash": r["hash"], "spec": r["spec"]} for r in cur.fetchall()}


def measured(
    *, signature_ids: list[int], machines: list[str], batch_sizes: list[int], precision: str,
    channels_last: bool = False,
) -> set[tuple[int, str, int]]:  # fmt: skip
    """The (signature, machine, batch size) triples that have a stored benchmark (OOM counts)."""
    params = {"sigs": signature_ids, "machines": machines, "batch_sizes": batch_sizes, "precision": precision}
    params["channels_last"] = channels_last
    with transaction() as cur:
        cur.execute(SELECT_DONE, params)
        return {(r["signature_id"], r["machine_type"], r["batch_size"]) for r in cur.fetchall()}


def newest(
    *, signature_ids: list[int], machines: list[str], batch_sizes: list[int], precision: str,
    channels_last: bool = False,
) -> dict[tuple[int, int], dict[str, Any]]:  # fmt: skip
    """(signature, batch size) → its benchmark row on machine types of one GPU, from one environment where possible.

    machines: the machine type and those with the same GPU model (machines.peers_of); an environment
    names the device, so rows of one environment come from one kind of GPU whichever type measured them.

    The environment holding most of the points (the newest of equals) supplies every point it has;
    only points it lacks come from another environment, newest first. So a CNN's layers are timed
    in one software and driver set-up whenever one has them all, and each row says which it is.
    """
    params = {"sigs": signature_ids, "machines": machines, "batch_sizes": batch_sizes, "precision": precision}
    with transaction() as cur:
        cur.execute(SELECT_BENCHMARKS, params | {"channels_last": channels_last})
        rows = [dict(r) for r in cur.fetchall()]  # newest first
    return ops.one_environment(rows, "signature_id")


SELECT_MEMBERS = """
SELECT m.signature_id, m.count, s.spec FROM cnn_layers m JOIN conv_signatures s ON s.id = m.signature_id
WHERE m.cnn_name = %s AND m.image_size = %s AND m.num_classes = %s ORDER BY m.signature_id"""
SELECT_WORKLOAD = "SELECT workload FROM cnn_workloads WHERE cnn_name = %s AND image_size = %s AND num_classes = %s"


def members(*, name: str, image_size: int, num_classes: int) -> list[tuple[int, dict[str, Any], int]]:
    """A stored CNN variant's conv layers: (signature id, spec, count)."""
    with transaction() as cur:
        cur.execute(SELECT_MEMBERS, (name, image_size, num_classes))
        return [(r["signature_id"], r["spec"], r["count"]) for r in cur.fetchall()]


def workload(*, name: str, image_size: int, num_classes: int) -> dict[str, Any]:
    """A stored CNN variant's workload (empty if it was never read)."""
    with transaction() as cur:
        cur.execute(SELECT_WORKLOAD, (name, image_size, num_classes))
        row = cur.fetchone()
    return dict(row["workload"]) if row else {}
