"""CNNs' non-conv op signatures (and optimizer steps) and the op benchmarks stored for them."""

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple, TypedDict, cast

import psycopg2.extras

from shared.cnn.op_signatures import OPTIMIZER, OpSignature
from shared.core.db import Cursor, Json, insert_new, one, rows_of, transaction
from shared.measurements import environments
from shared.measurements.members import Member
from shared.training import TrainConfig

# DO UPDATE (a no-op) rather than DO NOTHING so RETURNING also yields rows that existed.


class OpPhases(TypedDict):
    """One op's stored timing at one batch size (the optimizer's at batch size 0); none when it ran out of memory."""

    op_signature_id: int
    batch_size: int
    oom: bool
    forward_ms: float | None  # the optimizer: the whole step
    backward_ms: float | None  # the optimizer: 0


class OpTiming(OpPhases):
    """An `op_benchmarks` row as the worker reads it: the phases, where and in which environment they were measured."""

    environment_id: int
    machine_type: str


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
_KEY = """op_signature_id = ANY(%(sigs)s) AND machine_type = ANY(%(machine_types)s)
  AND ((batch_size = ANY(%(batch_sizes)s) AND variant = %(op_variant)s)
       OR (batch_size = 0 AND variant = %(optimizer_variant)s))"""
SELECT_DONE = f"SELECT DISTINCT op_signature_id, machine_type, batch_size FROM op_benchmarks WHERE {_KEY}"
# The newest row per key: rows of another environment are never averaged in.
SELECT_BENCHMARKS = f"""
SELECT op_signature_id, batch_size, oom, forward_ms, backward_ms, environment_id, machine_type FROM op_benchmarks
WHERE {_KEY} ORDER BY measured_at DESC, id DESC"""
SELECT_IN_ENVIRONMENT = """
SELECT op_signature_id, batch_size, oom, forward_ms, backward_ms FROM op_benchmarks
WHERE machine_type = %(machine_type)s AND environment_id = %(env)s AND op_signature_id = ANY(%(sigs)s)
  AND ((batch_size = %(batch_size)s AND variant = %(op_variant)s)
       OR (batch_size = 0 AND variant = %(optimizer_variant)s))"""


# A variant read again (a changed extraction) replaces its ops: one it no longer has must not stay counted.
DELETE_MEMBERSHIPS = "DELETE FROM cnn_ops WHERE cnn_name = %s AND image_size = %s AND num_classes = %s"


def store(cur: Any, *, name: str, image_size: int, num_classes: int, layers: Any) -> None:
    """Store a CNN variant's op signatures and counts, in the caller's transaction (shared/layers.register)."""
    cur.execute(DELETE_MEMBERSHIPS, (name, image_size, num_classes))
    for op, count in zip(layers.ops, layers.op_counts, strict=True):
        cur.execute(UPSERT_SIGNATURE, (op.hash, op.op, Json(op.to_json())))
        cur.execute(UPSERT_MEMBERSHIP, (name, image_size, num_classes, one(cur)["id"], count))


def members(*, name: str, image_size: int, num_classes: int) -> list[Member]:
    """A stored CNN variant's ops: (op signature id, spec, count); the optimizer step among them."""
    with transaction() as cur:
        cur.execute(SELECT_MEMBERS, (name, image_size, num_classes))
        return [Member(r["op_signature_id"], r["spec"], r["count"]) for r in cur.fetchall()]


SELECT_MEMBERS_OF = """
SELECT m.cnn_name, m.op_signature_id, m.count, s.spec FROM cnn_ops m JOIN op_signatures s ON s.id = m.op_signature_id
WHERE m.image_size = %(image_size)s
  AND (m.cnn_name, m.num_classes) IN (SELECT * FROM unnest(%(names)s::text[], %(classes)s::int[]))
ORDER BY m.cnn_name, m.op_signature_id"""


def members_of(*, classes: dict[str, int], image_size: int) -> dict[str, list[Member]]:
    """Per CNN name (→ its num_classes key): its members(), in one query for all of them."""
    out: dict[str, list[Member]] = {n: [] for n in classes}
    with transaction() as cur:
        cur.execute(SELECT_MEMBERS_OF, {"names": list(classes), "classes": list(classes.values()),
                                        "image_size": image_size})  # fmt: skip
        for r in cur.fetchall():
            out[r["cnn_name"]].append(Member(r["op_signature_id"], r["spec"], r["count"]))
    return out


# A plan's view of the ops: ids, counts and which are optimizer steps, without their specs' JSON.
SELECT_COUNTS_OF = """
SELECT m.cnn_name, m.op_signature_id, m.count, s.op = %(optimizer)s AS optimizer
FROM cnn_ops m JOIN op_signatures s ON s.id = m.op_signature_id
WHERE m.image_size = %(image_size)s
  AND (m.cnn_name, m.num_classes) IN (SELECT * FROM unnest(%(names)s::text[], %(classes)s::int[]))
ORDER BY m.cnn_name, m.op_signature_id"""


def counts_of(*, classes: dict[str, int], image_size: int) -> tuple[dict[str, list[tuple[int, int]]], list[int]]:
    """Per CNN name (→ its num_classes key): its (op signature id, count) as members_of orders them, and the ids
    of the optimizer steps among them; one query, no spec read (a large job's ~10^4 ops)."""
    out: dict[str, list[tuple[int, int]]] = {n: [] for n in classes}
    optimizers: set[int] = set()
    params = {"names": list(classes), "classes": list(classes.values()), "image_size": image_size}
    with transaction() as cur:
        cur.execute(SELECT_COUNTS_OF, params | {"optimizer": OPTIMIZER})
        for r in cur.fetchall():
            out[r["cnn_name"]].append((r["op_signature_id"], r["count"]))
            if r["optimizer"]:
                optimizers.add(r["op_signature_id"])
    return out, sorted(optimizers)


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


def _params(sigs: list[int], machine_types: list[str], batch_sizes: list[int], config: TrainConfig) -> dict[str, Any]:
    return {
        "sigs": sigs, "machine_types": machine_types, "batch_sizes": batch_sizes,
        "op_variant": config.op_variant, "optimizer_variant": config.optimizer_variant,
    }  # fmt: skip


def measured(
    *, signature_ids: list[int], machine_types: list[str], batch_sizes: list[int], config: TrainConfig
) -> set[tuple[int, str, int]]:
    """The (op signature, machine, batch size) triples with a stored benchmark (OOM and infeasible count)."""
    with transaction() as cur:
        cur.execute(SELECT_DONE, _params(signature_ids, machine_types, batch_sizes, config))
        return {(r["op_signature_id"], r["machine_type"], r["batch_size"]) for r in cur.fetchall()}


def newest(
    *, signature_ids: list[int], machine_types: list[str], batch_sizes: list[int], config: TrainConfig
) -> dict[tuple[int, int], OpTiming]:
    """(op signature, batch size) → its row, from one environment where possible (as shared/layers.newest)."""
    rows = newest_first(
        signature_ids=signature_ids, machine_types=machine_types, batch_sizes=batch_sizes, config=config
    )
    return environments.one_environment(rows, "op_signature_id")


def newest_first(
    *, signature_ids: list[int], machine_types: list[str], batch_sizes: list[int], config: TrainConfig
) -> list[OpTiming]:
    """The op benchmark rows of these signatures, newest first (one query for many CNNs; see layers.newest_first)."""
    with transaction() as cur:
        cur.execute(SELECT_BENCHMARKS, _params(signature_ids, machine_types, batch_sizes, config))
        return cast(list[OpTiming], cur.fetchall())


def in_environment(
    *, machine_type: str, environment_id: int, signature_ids: list[int], batch_size: int, config: TrainConfig
) -> dict[tuple[int, int], OpPhases]:
    """(op signature, batch size) → its row measured in one environment (a whole step's own)."""
    params = _params(signature_ids, [machine_type], [batch_size], config)
    with transaction() as cur:
        cur.execute(
            SELECT_IN_ENVIRONMENT,
            params | {"machine_type": machine_type, "env": environment_id, "batch_size": batch_size},
        )
        return {(r["op_signature_id"], r["batch_size"]): cast(OpPhases, r) for r in cur.fetchall()}


def signature(spec: dict[str, Any]) -> OpSignature:
    """The signature of a stored spec."""
    return OpSignature.from_json(spec)


# The agent's side: resume where it stopped, store idempotently, record what raised.
SELECT_DONE_IN_ENVIRONMENT = """
SELECT batch_size FROM op_benchmarks
WHERE op_signature_id = %s AND machine_type = %s AND variant = %s AND environment_id = %s"""
# An infeasible op is stored without timings: done, and learnt rather than measured.
INSERT_BENCHMARK = """
INSERT INTO op_benchmarks (op_signature_id, machine_type, batch_size, variant, environment_id, oom,
                           forward_ms, backward_ms, stats)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (op_signature_id, machine_type, batch_size, variant, environment_id) DO NOTHING"""
INSERT_BENCHMARKS = """
INSERT INTO op_benchmarks (op_signature_id, machine_type, batch_size, variant, environment_id, oom,
                           forward_ms, backward_ms, stats)
VALUES %s
ON CONFLICT (op_signature_id, machine_type, batch_size, variant, environment_id) DO NOTHING"""
SELECT_DONE_OF_SIGNATURES = """
SELECT op_signature_id, variant, batch_size FROM op_benchmarks
WHERE op_signature_id = ANY(%s) AND machine_type = %s AND variant = ANY(%s) AND environment_id = %s"""
INSERT_FAILURE = """
INSERT INTO op_failures (op_signature_id, machine_type, variant, environment_id, batch_sizes, error)
VALUES (%s, %s, %s, %s, %s, %s)"""
# An op signature is only ever measured in one of the two variants (an optimizer step in optimizer_variant).
SELECT_FAILED_TOO_OFTEN = """
SELECT op_signature_id AS signature_id, machine_type, count(*) AS n,
       (array_agg(error ORDER BY failed_at DESC))[1] AS error
FROM op_failures
WHERE op_signature_id = ANY(%(sigs)s) AND machine_type = ANY(%(machine_types)s)
  AND variant IN (%(op_variant)s, %(optimizer_variant)s) AND failed_at >= %(since)s
GROUP BY op_signature_id, machine_type
HAVING count(*) >= %(limit)s
ORDER BY op_signature_id, machine_type
LIMIT 1"""
COUNT_BY_ENVIRONMENT = f"""
SELECT environment_id, count(DISTINCT (op_signature_id, batch_size)) AS n FROM op_benchmarks
WHERE {_KEY}
GROUP BY environment_id"""


def batch_sizes_done(*, signature_id: int, machine_type: str, variant: str, environment_id: int) -> set[int]:
    """Batch sizes already stored for an op signature in this variant and environment."""
    with transaction() as cur:
        cur.execute(SELECT_DONE_IN_ENVIRONMENT, (signature_id, machine_type, variant, environment_id))
        return {r["batch_size"] for r in cur.fetchall()}


def save(
    *, signature_id: int, machine_type: str, batch_size: int, variant: str, environment_id: int, oom: bool,
    ms: tuple[float | None, float | None], stats: dict[str, Any],
) -> None:  # fmt: skip
    """Store one op benchmark (forward and backward ms; an optimizer step's as forward), OOM or infeasible."""
    with transaction() as cur:
        cur.execute(
            INSERT_BENCHMARK, (signature_id, machine_type, batch_size, variant, environment_id, oom, *ms, Json(stats))
        )


class OpRow(NamedTuple):
    """One op benchmark to store: a signature at a batch size in a variant, forward and backward ms, stats."""

    signature_id: int
    batch_size: int
    variant: str
    oom: bool
    ms: tuple[float | None, float | None]
    stats: dict[str, Any]


def batch_sizes_done_of(
    *, signature_ids: list[int], machine_type: str, variants: list[str], environment_id: int
) -> dict[tuple[int, str], set[int]]:
    """batch_sizes_done() of many signatures and variants in one query: (signature id, variant) → batch sizes."""
    out: dict[tuple[int, str], set[int]] = {}
    with transaction() as cur:
        cur.execute(SELECT_DONE_OF_SIGNATURES, (signature_ids, machine_type, variants, environment_id))
        for r in cur.fetchall():
            out.setdefault((r["op_signature_id"], r["variant"]), set()).add(r["batch_size"])
    return out


def save_many(*, machine_type: str, environment_id: int, rows: Sequence[OpRow]) -> None:
    """Store op benchmarks of one environment in one transaction, idempotently."""
    values = [
        (r.signature_id, machine_type, r.batch_size, r.variant, environment_id, r.oom, *r.ms, Json(r.stats))
        for r in rows
    ]
    if values:
        with transaction() as cur:
            psycopg2.extras.execute_values(cur, INSERT_BENCHMARKS, values, page_size=500)


def save_failure(
    *, signature_id: int, machine_type: str, variant: str, environment_id: int, batch_sizes: list[int], error: str
) -> None:
    """Record that measuring an op signature raised, so the worker can fail the jobs waiting for it."""
    with transaction() as cur:
        cur.execute(INSERT_FAILURE, (signature_id, machine_type, variant, environment_id, batch_sizes, error[:2000]))


def failed_too_often(
    *, signature_ids: list[int], machine_types: list[str], config: TrainConfig, since: datetime, limit: int
) -> dict[str, Any] | None:
    """The first op signature whose failures on one of these machine types since `since` reached `limit`, if any."""
    params = {"sigs": signature_ids, "machine_types": machine_types, "since": since, "limit": limit}
    params |= {"op_variant": config.op_variant, "optimizer_variant": config.optimizer_variant}
    with transaction() as cur:
        cur.execute(SELECT_FAILED_TOO_OFTEN, params)
        row = cur.fetchone()
    return None if row is None else dict(row)


def count_by_environment(
    *, machine_type: str, signature_ids: list[int], batch_sizes: list[int], config: TrainConfig
) -> dict[int, int]:
    """Environment id → (op signature, batch size) points stored there (the optimizer step at batch size 0)."""
    with transaction() as cur:
        cur.execute(COUNT_BY_ENVIRONMENT, _params(signature_ids, [machine_type], batch_sizes, config))
        return {r["environment_id"]: int(r["n"]) for r in cur.fetchall()}


# Bundles (shared/measurements/bundle.py): op and optimizer timings of machine types, oldest first; stored elsewhere
# with ids mapped to that installation's own, each once.
BUNDLE_COLUMNS = (
    "op_signature_id", "machine_type", "batch_size", "variant", "environment_id", "oom", "forward_ms",
    "backward_ms", "stats", "measured_at"
)  # fmt: skip
EXPORT_OP_BENCHMARKS = f"""
SELECT {", ".join(BUNDLE_COLUMNS)} FROM op_benchmarks WHERE machine_type = ANY(%s) ORDER BY id"""
IMPORT_OP_BENCHMARKS = f"""
INSERT INTO op_benchmarks ({", ".join(BUNDLE_COLUMNS)}) VALUES %s
ON CONFLICT (op_signature_id, machine_type, batch_size, variant, environment_id) DO NOTHING RETURNING 1"""


def export_rows(cur: Cursor, *, machine_types: list[str]) -> list[dict[str, Any]]:
    """This table's rows of the machine types, as plain JSON values, in the caller's transaction."""
    return rows_of(cur, EXPORT_OP_BENCHMARKS, (machine_types,))


def import_rows(cur: Cursor, *, rows: list[dict[str, Any]]) -> int:
    """Store rows another installation exported (ids already mapped to this one's); how many were new."""
    return insert_new(cur, IMPORT_OP_BENCHMARKS, BUNDLE_COLUMNS, rows)


def signature_rows(cur: Cursor, *, ids: list[int]) -> list[dict[str, Any]]:
    """Op signatures by id with their hashes and specs, in the caller's transaction."""
    return rows_of(cur, SELECT_SPECS, (sorted(set(ids)),))


def ensure_signatures(cur: Cursor, *, signatures: list[OpSignature]) -> dict[str, int]:
    """Hash → id of each signature, stored when new, in the caller's transaction."""
    out = {}
    for sig in signatures:
        cur.execute(UPSERT_SIGNATURE, (sig.hash, sig.op, Json(sig.to_json())))
        out[sig.hash] = int(one(cur)["id"])
    return out
