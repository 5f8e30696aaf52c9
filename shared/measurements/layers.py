"""CNNs, their conv signatures and the layer benchmarks stored for them."""

import hashlib
import importlib.metadata
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple, TypedDict, cast

import psycopg2.extras

from shared.cnn import registry as cnns
from shared.cnn.signatures import ConvSignature
from shared.cnn.workload import WorkloadJson
from shared.core.db import Cursor, Json, insert_new, one, rows_of, transaction
from shared.measurements import environments, ops
from shared.measurements.members import Member


class LayerPhases(TypedDict):
    """One conv layer's stored timing at one batch size: its three phases in ms, or none when it ran out of memory."""

    signature_id: int
    oom: bool
    forward_ms: float | None
    backward_data_ms: float | None
    backward_weight_ms: float | None


class LayerTiming(LayerPhases):
    """A `layer_benchmarks` row as the worker reads it: the phases, where and in which environment measured."""

    batch_size: int
    environment_id: int
    machine_type: str


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
WHERE signature_id = ANY(%(sigs)s) AND machine_type = ANY(%(machine_types)s)
  AND batch_size = ANY(%(batch_sizes)s) AND precision = %(precision)s AND channels_last = %(channels_last)s"""
# The newest row per key: rows of another environment are never averaged in.
SELECT_BENCHMARKS = """
SELECT signature_id, batch_size, oom, forward_ms, backward_data_ms, backward_weight_ms, environment_id, machine_type
FROM layer_benchmarks
WHERE signature_id = ANY(%(sigs)s) AND machine_type = ANY(%(machine_types)s)
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


# Variants stored by this extractor: their conv layers (LEFT JOIN: a CNN may have none).
SELECT_REGISTERED_OF = """
SELECT w.cnn_name, m.signature_id, m.count FROM cnn_workloads w
LEFT JOIN cnn_layers m USING (cnn_name, image_size, num_classes)
WHERE w.image_size = %(image_size)s AND w.workload->>'extractor' = %(extractor)s
  AND (w.cnn_name, w.num_classes) IN (SELECT * FROM unnest(%(names)s::text[], %(classes)s::int[]))
ORDER BY w.cnn_name, m.signature_id"""
# What the readers (shared/cnn: zoo, flow, workload, signatures, onnx_reader, layer_list) produce, as a version: bump it
# when a change alters their output. tests/unit/test_extraction_version.py reads reference CNNs and compares a digest
# of the output with the one recorded for this version (tests/data/extraction.json), so an output change without a
# bump fails, and an edit that changes no output (a comment, a refactor) re-reads nothing.
EXTRACTION_VERSION = 2
EXTRACTOR_KEY = "extractor"


@cache
def extractor_version() -> str:
    """What stored extractions are made by: EXTRACTION_VERSION and the versions of torch, torchvision and onnx.

    A variant stored by another version is read again.
    """
    digest = hashlib.sha256(f"extraction-{EXTRACTION_VERSION}".encode())
    for package in ("torch", "torchvision", "onnx"):
        try:
            digest.update(f"{package}={importlib.metadata.version(package)}".encode())
        except importlib.metadata.PackageNotFoundError:
            digest.update(f"{package}=none".encode())
    return digest.hexdigest()[:16]


def register(*, name: str, image_size: int, num_classes: int | None = None) -> list[tuple[int, int]]:
    """A CNN's [(conv signature_id, count), …]: read and stored (with its other ops and workload) unless this
    extractor stored that variant already."""
    return register_all(names=[name], image_size=image_size, num_classes=num_classes)[name]


def register_all(
    *, names: list[str], image_size: int, num_classes: int | None = None
) -> dict[str, list[tuple[int, int]]]:
    """register() for several CNNs: those this extractor stored already are read in one query, the rest stored."""
    # num_classes on an uploaded CNN is refused by its reader (_store says so): only built-ins are looked up.
    lookup = {n: cnns.variant_classes(n, num_classes) for n in names if num_classes is None or cnns.is_builtin(n)}
    found = _stored(lookup, image_size) if lookup else {}
    return {n: found[n] if n in found else _store(n, image_size, num_classes) for n in names}


def registered(*, name: str, image_size: int, num_classes: int) -> list[tuple[int, int]] | None:
    """A variant's [(conv signature_id, count), …] if this extractor stored it already, else None."""
    return _stored({name: num_classes}, image_size).get(name)


def _stored(classes: dict[str, int], image_size: int) -> dict[str, list[tuple[int, int]]]:
    """The variants (CNN name → num_classes) this extractor stored: their [(conv signature_id, count), …]."""
    params = {
        "names": list(classes),
        "classes": list(classes.values()),
        "image_size": image_size,
        "extractor": extractor_version(),
    }
    found: dict[str, list[tuple[int, int]]] = {}
    with transaction() as cur:
        cur.execute(SELECT_REGISTERED_OF, params)
        for r in cur.fetchall():
            pairs = found.setdefault(r["cnn_name"], [])  # a CNN may have no conv: LEFT JOIN
            if r["signature_id"] is not None:
                pairs.append((r["signature_id"], r["count"]))
    return found


def _store(name: str, image_size: int, num_classes: int | None) -> list[tuple[int, int]]:
    """Read a CNN variant and store its conv signatures, ops and workload."""
    classes = cnns.variant_classes(name, num_classes)
    layers = cnns.read(name=name, image_size=image_size, num_classes=num_classes)
    out: list[tuple[int, int]] = []
    with transaction() as cur:
        cnns.ensure_row(cur, name=name)
        for sig, count in zip(layers.signatures, layers.counts, strict=True):
            cur.execute(UPSERT_SIGNATURE, (sig.hash, Json(sig.to_json())))
            sig_id = one(cur)["id"]
            cur.execute(UPSERT_MEMBERSHIP, (name, image_size, classes, sig_id, count))
            out.append((sig_id, count))
        stamped = layers.workload | {EXTRACTOR_KEY: extractor_version()}
        cur.execute(UPSERT_WORKLOAD, (name, image_size, classes, layers.total, Json(stamped)))
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
    *, signature_ids: list[int], machine_types: list[str], batch_sizes: list[int], precision: str,
    channels_last: bool = False,
) -> set[tuple[int, str, int]]:  # fmt: skip
    """The (signature, machine, batch size) triples that have a stored benchmark (OOM counts)."""
    params = {"sigs": signature_ids, "machine_types": machine_types, "batch_sizes": batch_sizes, "precision": precision}
    params["channels_last"] = channels_last
    with transaction() as cur:
        cur.execute(SELECT_DONE, params)
        return {(r["signature_id"], r["machine_type"], r["batch_size"]) for r in cur.fetchall()}


def newest(
    *, signature_ids: list[int], machine_types: list[str], batch_sizes: list[int], precision: str,
    channels_last: bool = False,
) -> dict[tuple[int, int], LayerTiming]:  # fmt: skip
    """(signature, batch size) → its benchmark row on machine types of one GPU, from one environment where possible.

    machines: the machine type and those with the same GPU model (machines.peers_of); an environment
    names the device, so rows of one environment come from one kind of GPU whichever type measured them.

    The environment holding most of the points (the newest of equals) supplies every point it has;
    only points it lacks come from another environment, newest first. So a CNN's layers are timed
    in one software and driver set-up whenever one has them all, and each row says which it is.
    """
    rows = newest_first(
        signature_ids=signature_ids, machine_types=machine_types, batch_sizes=batch_sizes, precision=precision,
        channels_last=channels_last,
    )  # fmt: skip
    return environments.one_environment(rows, "signature_id")


def newest_first(
    *, signature_ids: list[int], machine_types: list[str], batch_sizes: list[int], precision: str,
    channels_last: bool = False,
) -> list[LayerTiming]:  # fmt: skip
    """The benchmark rows of these signatures, newest first: one query for many CNNs, each then picking its
    rows' environment with environments.one_environment over its own signatures' rows (as newest() does)."""
    params = {"sigs": signature_ids, "machine_types": machine_types, "batch_sizes": batch_sizes, "precision": precision}
    with transaction() as cur:
        cur.execute(SELECT_BENCHMARKS, params | {"channels_last": channels_last})
        return cast(list[LayerTiming], cur.fetchall())


SELECT_MEMBERS = """
SELECT m.signature_id, m.count, s.spec FROM cnn_layers m JOIN conv_signatures s ON s.id = m.signature_id
WHERE m.cnn_name = %s AND m.image_size = %s AND m.num_classes = %s ORDER BY m.signature_id"""
SELECT_WORKLOAD = "SELECT workload FROM cnn_workloads WHERE cnn_name = %s AND image_size = %s AND num_classes = %s"


def members(*, name: str, image_size: int, num_classes: int) -> list[Member]:
    """A stored CNN variant's conv layers: (signature id, spec, count)."""
    with transaction() as cur:
        cur.execute(SELECT_MEMBERS, (name, image_size, num_classes))
        return [Member(r["signature_id"], r["spec"], r["count"]) for r in cur.fetchall()]


def workload(*, name: str, image_size: int, num_classes: int) -> WorkloadJson:
    """A stored CNN variant's workload (empty if it was never read)."""
    with transaction() as cur:
        cur.execute(SELECT_WORKLOAD, (name, image_size, num_classes))
        row = cur.fetchone()
    if not row:
        return {}
    work = dict(row["workload"])
    work.pop(EXTRACTOR_KEY, None)
    return cast(WorkloadJson, work)


# Many variants of one image size at once (a job's CNNs): (name, num_classes) pairs.
_VARIANTS = "(cnn_name, num_classes) IN (SELECT * FROM unnest(%(names)s::text[], %(classes)s::int[]))"
_M_VARIANTS = "(m.cnn_name, m.num_classes) IN (SELECT * FROM unnest(%(names)s::text[], %(classes)s::int[]))"
SELECT_MEMBERS_OF = f"""
SELECT m.cnn_name, m.signature_id, m.count, s.spec FROM cnn_layers m JOIN conv_signatures s ON s.id = m.signature_id
WHERE m.image_size = %(image_size)s AND {_M_VARIANTS} ORDER BY m.cnn_name, m.signature_id"""
SELECT_WORKLOADS_OF = f"""
SELECT cnn_name, workload FROM cnn_workloads WHERE image_size = %(image_size)s AND {_VARIANTS}"""


def variants(*, classes: dict[str, int], image_size: int) -> dict[str, tuple[list[Member], WorkloadJson]]:
    """Per CNN name (→ its num_classes key): its members() and workload(), in two queries for all of them."""
    params = {"names": list(classes), "classes": list(classes.values()), "image_size": image_size}
    out: dict[str, tuple[list[Member], WorkloadJson]] = {n: ([], {}) for n in classes}
    with transaction() as cur:
        cur.execute(SELECT_MEMBERS_OF, params)
        for r in cur.fetchall():
            out[r["cnn_name"]][0].append(Member(r["signature_id"], r["spec"], r["count"]))
        cur.execute(SELECT_WORKLOADS_OF, params)
        for r in cur.fetchall():
            work = dict(r["workload"])
            work.pop(EXTRACTOR_KEY, None)
            out[r["cnn_name"]] = (out[r["cnn_name"]][0], cast(WorkloadJson, work))
    return out


# The agent's side: resume where it stopped, store idempotently, record what raised.
SELECT_DONE_IN_ENVIRONMENT = """
SELECT batch_size FROM layer_benchmarks
WHERE signature_id = %s AND machine_type = %s AND precision = %s AND channels_last = %s AND environment_id = %s"""
INSERT_BENCHMARK = """
INSERT INTO layer_benchmarks (signature_id, machine_type, batch_size, precision, channels_last, environment_id, oom,
                              forward_ms, backward_data_ms, backward_weight_ms, stats)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (signature_id, machine_type, batch_size, precision, channels_last, environment_id) DO NOTHING"""
INSERT_BENCHMARKS = """
INSERT INTO layer_benchmarks (signature_id, machine_type, batch_size, precision, channels_last, environment_id, oom,
                              forward_ms, backward_data_ms, backward_weight_ms, stats)
VALUES %s
ON CONFLICT (signature_id, machine_type, batch_size, precision, channels_last, environment_id) DO NOTHING"""
SELECT_DONE_OF_SIGNATURES = """
SELECT signature_id, batch_size FROM layer_benchmarks
WHERE signature_id = ANY(%s) AND machine_type = %s AND precision = %s AND channels_last = %s AND environment_id = %s"""
INSERT_FAILURE = """
INSERT INTO layer_failures (signature_id, machine_type, precision, environment_id, batch_sizes, error)
VALUES (%s, %s, %s, %s, %s, %s)"""
# Failures since a job started of the signatures it waits for: re-sent work that fails the same way each time.
SELECT_FAILED_TOO_OFTEN = """
SELECT signature_id, machine_type, count(*) AS n, (array_agg(error ORDER BY failed_at DESC))[1] AS error
FROM layer_failures
WHERE signature_id = ANY(%(sigs)s) AND machine_type = ANY(%(machine_types)s) AND precision = %(precision)s
  AND failed_at >= %(since)s
GROUP BY signature_id, machine_type
HAVING count(*) >= %(limit)s
ORDER BY signature_id, machine_type
LIMIT 1"""
# Layer rows of a whole step's own environment: timings of two environments are never combined.
SELECT_IN_ENVIRONMENT = """
SELECT signature_id, oom, forward_ms, backward_data_ms, backward_weight_ms FROM layer_benchmarks
WHERE machine_type = %s AND batch_size = %s AND precision = %s AND channels_last = %s AND environment_id = %s
  AND signature_id = ANY(%s)"""
COUNT_BY_ENVIRONMENT = """
SELECT environment_id, count(DISTINCT (signature_id, batch_size)) AS n FROM layer_benchmarks
WHERE machine_type = %(machine_type)s AND precision = %(precision)s AND channels_last = %(channels_last)s
  AND signature_id = ANY(%(sigs)s) AND batch_size = ANY(%(batch_sizes)s)
GROUP BY environment_id"""


def batch_sizes_done(
    *, signature_id: int, machine_type: str, precision: str, environment_id: int, channels_last: bool = False
) -> set[int]:
    """Batch sizes already stored for a signature in this environment (resume, don't re-measure)."""
    with transaction() as cur:
        cur.execute(SELECT_DONE_IN_ENVIRONMENT, (signature_id, machine_type, precision, channels_last, environment_id))
        return {r["batch_size"] for r in cur.fetchall()}


def save(
    *, signature_id: int, machine_type: str, batch_size: int, precision: str, channels_last: bool, environment_id: int,
    oom: bool, ms: tuple[float | None, float | None, float | None], stats: dict[str, Any],
) -> None:  # fmt: skip
    """Store one layer benchmark (forward, backward-data, backward-weight ms) or its out of memory, idempotently."""
    row = (signature_id, machine_type, batch_size, precision, channels_last, environment_id, oom, *ms, Json(stats))
    with transaction() as cur:
        cur.execute(INSERT_BENCHMARK, row)


class LayerRow(NamedTuple):
    """One layer benchmark to store: a signature at a batch size, its phases' ms (none when out of memory), stats."""

    signature_id: int
    batch_size: int
    oom: bool
    ms: tuple[float | None, float | None, float | None]
    stats: dict[str, Any]


def batch_sizes_done_of(
    *, signature_ids: list[int], machine_type: str, precision: str, environment_id: int, channels_last: bool = False
) -> dict[int, set[int]]:
    """batch_sizes_done() of many signatures in one query: signature id → batch sizes stored (absent: none)."""
    out: dict[int, set[int]] = {}
    with transaction() as cur:
        cur.execute(SELECT_DONE_OF_SIGNATURES, (signature_ids, machine_type, precision, channels_last, environment_id))
        for r in cur.fetchall():
            out.setdefault(r["signature_id"], set()).add(r["batch_size"])
    return out


def save_many(
    *, machine_type: str, precision: str, channels_last: bool, environment_id: int, rows: Sequence[LayerRow]
) -> None:
    """Store layer benchmarks of one precision, layout and environment in one transaction, idempotently."""
    values = [
        (r.signature_id, machine_type, r.batch_size, precision, channels_last, environment_id, r.oom, *r.ms,
         Json(r.stats))
        for r in rows
    ]  # fmt: skip
    if values:
        with transaction() as cur:
            psycopg2.extras.execute_values(cur, INSERT_BENCHMARKS, values, page_size=500)


def save_failure(
    *, signature_id: int, machine_type: str, precision: str, environment_id: int, batch_sizes: list[int], error: str
) -> None:
    """Record that measuring a signature raised, so the worker can fail the jobs waiting for it."""
    with transaction() as cur:
        cur.execute(INSERT_FAILURE, (signature_id, machine_type, precision, environment_id, batch_sizes, error[:2000]))


def failed_too_often(
    *, signature_ids: list[int], machine_types: list[str], precision: str, since: datetime, limit: int
) -> dict[str, Any] | None:
    """The first signature whose failures on one of these machine types since `since` reached `limit`, if any."""
    params = {
        "sigs": signature_ids,
        "machine_types": machine_types,
        "precision": precision,
        "since": since,
        "limit": limit,
    }
    with transaction() as cur:
        cur.execute(SELECT_FAILED_TOO_OFTEN, params)
        row = cur.fetchone()
    return None if row is None else dict(row)


def in_environment(
    *,
    machine_type: str,
    batch_size: int,
    precision: str,
    channels_last: bool,
    environment_id: int,
    signature_ids: list[int],
) -> dict[int, LayerPhases]:
    """Signature id → its row at one batch size measured in one environment (a whole step's own)."""
    with transaction() as cur:
        cur.execute(
            SELECT_IN_ENVIRONMENT, (machine_type, batch_size, precision, channels_last, environment_id, signature_ids)
        )
        return {r["signature_id"]: cast(LayerPhases, r) for r in cur.fetchall()}


def count_by_environment(
    *, machine_type: str, precision: str, channels_last: bool, signature_ids: list[int], batch_sizes: list[int]
) -> dict[int, int]:
    """Environment id → (signature, batch size) points stored there."""
    params = {"machine_type": machine_type, "precision": precision, "channels_last": channels_last}
    with transaction() as cur:
        cur.execute(COUNT_BY_ENVIRONMENT, params | {"sigs": signature_ids, "batch_sizes": batch_sizes})
        return {r["environment_id"]: int(r["n"]) for r in cur.fetchall()}


# Bundles (shared/measurements/bundle.py): conv layer timings of machine types, oldest first; stored elsewhere
# with ids mapped to that installation's own, each once.
BUNDLE_COLUMNS = (
    "signature_id", "machine_type", "batch_size", "precision", "channels_last", "environment_id", "oom",
    "forward_ms", "backward_data_ms", "backward_weight_ms", "stats", "measured_at"
)  # fmt: skip
EXPORT_LAYER_BENCHMARKS = f"""
SELECT {", ".join(BUNDLE_COLUMNS)} FROM layer_benchmarks WHERE machine_type = ANY(%s) ORDER BY id"""
IMPORT_LAYER_BENCHMARKS = f"""
INSERT INTO layer_benchmarks ({", ".join(BUNDLE_COLUMNS)}) VALUES %s
ON CONFLICT (signature_id, machine_type, batch_size, precision, channels_last, environment_id) DO NOTHING RETURNING 1"""


def export_rows(cur: Cursor, *, machine_types: list[str]) -> list[dict[str, Any]]:
    """This table's rows of the machine types, as plain JSON values, in the caller's transaction."""
    return rows_of(cur, EXPORT_LAYER_BENCHMARKS, (machine_types,))


def import_rows(cur: Cursor, *, rows: list[dict[str, Any]]) -> int:
    """Store rows another installation exported (ids already mapped to this one's); how many were new."""
    return insert_new(cur, IMPORT_LAYER_BENCHMARKS, BUNDLE_COLUMNS, rows)


def signature_rows(cur: Cursor, *, ids: list[int]) -> list[dict[str, Any]]:
    """Conv signatures by id with their hashes and specs, in the caller's transaction."""
    return rows_of(cur, SELECT_SPECS, (sorted(set(ids)),))


def ensure_signatures(cur: Cursor, *, signatures: list[ConvSignature]) -> dict[str, int]:
    """Hash → id of each signature, stored when new, in the caller's transaction."""
    out = {}
    for sig in signatures:
        cur.execute(UPSERT_SIGNATURE, (sig.hash, Json(sig.to_json())))
        out[sig.hash] = int(one(cur)["id"])
    return out
