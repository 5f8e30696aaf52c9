"""CNNs' non-conv op signatures (and optimizer steps) and the op benchmarks stored for them."""

from typing import Any

from shared.db import Json, one, transaction
from shared.op_signatures import OPTIMIZER, OpSignature
from shared.training import TrainConfig

# DO UPDATE (a no-op) rather than DO NOTHING so RETURNING also yields rows that existed.
UPSERT_SIGNATURE = """
INSERT INTO op_signatures (hash, op, spec) VALUES (%s, %s, %s)
ON CONFLICT (hash) DO UPDATE SET hash = EXCLUDED.hash
RETURNING id"""
UPSERT_MEMBERSHIP = """
INSERT INTO cnn_ops (cnn_name, image_size, num_classes, op_signature_id, count) VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (cnn_name, image_size, num_classes, op_signature_id) DO UPDATE SET count = EXCLUDED.count"""
SELECT_MEMBERS = """
SELECT m.op_signature_id, m.count, s.op, s.spec FROM cnn_ops m JOIN op_signatures s ON s.id = m.op_signature_id
WHERE m.cnn_name = %s AND m.image_size = %s AND m.num_classes = %s ORDER BY m.op_signature_id"""
SELECT_SPECS = "SELECT id, hash, op, spec FROM op_signatures WHERE id = ANY(%s)"
# Operators at the job's batch sizes in its op variant; the optimizer at batch size 0 in its own variant.
_KEY = """op_signature_id = ANY(%(sigs)s) AND machine_type = ANY(%(machines)s)
  AND ((batch_size = ANY(%(batch_sizes)s) AND variant = %(op_variant)s)
       OR (batch_size = 0 AND variant = %(optimizer_variant)s))"""
SELECT_DONE = f"SELECT DISTINCT op_signature_id, machine_type, batch_size FROM op_benchmarks WHERE {_KEY}"
# The newest row per key: rows of another environment are never averaged in.
SELECT_BENCHMARKS = f"""
SELECT op_signature_id, batch_size, oom, forward_ms, backward_ms, environment_id, machine_type FROM op_benchmarks
WHERE {_KEY} ORDER BY measured_at DESC, id DESC"""
SELECT_IN_ENVIRONMENT = """
SELECT op_signature_id, batch_size, oom, forward_ms, backward_ms FROM op_benchmarks
WHERE machine_type = %(machine)s AND environment_id = %(env)s AND op_signature_id = ANY(%(sigs)s)
  AND ((batch_size = %(batch_size)s AND variant = %(op_variant)s)
       OR (batch_size = 0 AND variant = %(optimizer_variant)s))"""


def store(cur: Any, *, name: str, image_size: int, num_classes: int, layers: Any) -> None:
    """Store a CNN variant's op signatures and counts, in the caller's transaction (shared/layers.register)."""
    for op, count in zip(layers.ops, layers.op_counts, strict=True):
        cur.execute(UPSERT_SIGNATURE, (op.hash, op.op, Json(op.to_json())))
        cur.execute(UPSERT_MEMBERSHIP, (name, image_size, num_classes, one(cur)["id"], count))


def members(*, name: str, image_size: int, num_classes: int) -> list[tuple[int, dict[str, Any], int]]:
    """A stored CNN variant's ops: (op signature id, spec, count); the optimizer step among them."""
    with transaction() as cur:
        cur.execute(SELECT_MEMBERS, (name, image_size, num_classes))
        return [(r["op_signature_id"], r["spec"], r["count"]) for r in cur.fetchall()]


def specs(*, signature_ids: list[int]) -> dict[int, dict[str, Any]]:
    """Op signature id → {hash, spec}."""
    with transaction() as cur:
        cur.execute(SELECT_SPECS, (signature_ids,))
        return {r["id"]: {"hash": r["hash"], "spec": r["spec"]} for r in cur.fetchall()}


def is_optimizer(spec: dict[str, Any]) -> bool:
    """Whether an op spec is a CNN's optimizer step (measured once, batch size 0)."""
    return bool(spec.get("op") == OPTIMIZER)


def points(spec: dict[str, Any], batch_sizes: list[int]) -> list[int]:
    """The batch sizes an op is measured at: all of them, or 0 for the optimizer step."""
    return [0] if is_optimizer(spec) else list(batch_sizes)


def _params(sigs: list[int], machines: list[str], batch_sizes: list[int], config: TrainConfig) -> dict[str, Any]:
    return {
        "sigs": sigs, "machines": machines, "batch_sizes": batch_sizes,
        "op_variant": config.op_variant, "optimizer_variant": config.optimizer_variant,
    }  # fmt: skip


def measured(
    *, signature_ids: list[int], machines: list[str], batch_sizes: list[int], config: TrainConfig
) -> set[tuple[int, str, int]]:
    """The (op signature, machine, batch size) triples with a stored benchmark (OOM and infeasible count)."""
    with transaction() as cur:
        cur.execute(SELECT_DONE, _params(signature_ids, machines, batch_sizes, config))
        return {(r["op_signature_id"], r["machine_type"], r["batch_size"]) for r in cur.fetchall()}


def newest(
    *, signature_ids: list[int], machines: list[str], batch_sizes: list[int], config: TrainConfig
) -> dict[tuple[int, int], dict[str, Any]]:
    """(op signature, batch size) → its row, from one environment where possible (as shared/layers.newest)."""
    with transaction() as cur:
        cur.execute(SELECT_BENCHMARKS, _params(signature_ids, machines, batch_sizes, config))
        rows = [dict(r) for r in cur.fetchall()]  # newest first
    return one_environment(rows, "op_signature_id")


def in_environment(
    *, machine: str, environment_id: int, signature_ids: list[int], batch_size: int, config: TrainConfig
) -> dict[tuple[int, int], dict[str, Any]]:
    """(op signature, batch size) → its row measured in one environment (a whole step's own)."""
    params = _params(signature_ids, [machine], [batch_size], config)
    with transaction() as cur:
        cur.execute(
            SELECT_IN_ENVIRONMENT, params | {"machine": machine, "env": environment_id, "batch_size": batch_size}
        )
        return {(r["op_signature_id"], r["batch_size"]): dict(r) for r in cur.fetchall()}


def one_environment(rows: list[dict[str, Any]], sig_column: str) -> dict[tuple[int, int], dict[str, Any]]:
    """Rows (newest first) keyed by (signature, batch size): the environment holding most keys supplies all it has."""
    cover: dict[int, set[tuple[int, int]]] = {}
    for r in rows:
        cover.setdefault(r["environment_id"], set()).add((r[sig_column], r["batch_size"]))
    # dicts keep insertion order, which is newest first: max() keeps the first of equals.
    preferred = max(cover, key=lambda env: len(cover[env]), default=None)
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for r in rows:
        key = (r[sig_column], r["batch_size"])
        if key not in out or (r["environment_id"] == preferred and out[key]["environment_id"] != preferred):
            out[key] = r
    return out


def signature(spec: dict[str, Any]) -> OpSignature:
    """The signature of a stored spec."""
    return OpSignature.from_json(spec)
