"""The machine type catalog: cloud GPU machine types from data/, and those users register by their specs."""

import csv
from datetime import date, datetime
from functools import cache
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

import psycopg2.errors
import psycopg2.extras

from shared import gpu_catalog
from shared.core.db import Cursor, floats, one, transaction
from shared.core.errors import Conflict, Forbidden, NotFound
from shared.machine_request import MachineCreate

DATA = Path(__file__).resolve().parent.parent / "data"
GPUS_CSV = gpu_catalog.GPUS_CSV
MACHINES_CSV = DATA / "cloud_gpu_machines.csv"
MEMORY_CSV = DATA / "gpu_memory.csv"
GPU_COLUMNS = gpu_catalog.COLUMNS


class MachineTypeInfo(TypedDict):
    """A `machine_types` row: what a machine type is (GPU figures, memory, vCPUs) and costs; numerics as floats."""

    name: str
    provider: str  # 'local', 'aws', 'gcp', 'azure', 'own', …
    gpu: str | None  # None: CPU only
    gpu_count: int
    gpu_memory_gib: float | None  # all the machine's GPUs together
    vcpus: int | None
    memory_gib: float | None
    price_usd_per_hour: float
    spot_price_usd_per_hour: float | None
    gpu_fp32_tflops: float | None
    gpu_tf32_tflops: float | None
    gpu_fp16_tflops: float | None
    gpu_fp16_acc16_tflops: float | None  # FP16 accumulate, where it differs (GeForce)
    gpu_mem_bandwidth_gbs: float | None
    gpu_sm_count: int | None
    gpu_l2_mib: float | None
    gpu_compute_capability: str | None
    gpu_bf16: bool | None
    gpu_tdp_watts: float | None
    region: str | None
    source: str
    specs_source: str | None
    price_source: str | None
    spot_price_source: str | None
    figures_read_on: date | None
    specs_read_at: datetime | None
    price_read_at: datetime | None
    spot_price_read_at: datetime | None
    registered_at: datetime | None
    described_at: datetime | None  # when its agent last described it (only `local`: shared/local_machine.py)
    owner_key_id: str | None  # the key that registered it (None: the catalog, or registered by an admin: shared)
    # Links of a registered type, as its owner gave them (None: not given; catalog types: data/interconnect.csv).
    gpu_link: NotRequired[str | None]
    gpu_link_gbs: NotRequired[float | None]
    nics: NotRequired[int | None]
    nic_gbps: NotRequired[float | None]
    network_rdma: NotRequired[bool | None]


def _info(row: Any) -> MachineTypeInfo:
    return cast(MachineTypeInfo, floats(row))


# Visibility: %(owner)s NULL sees every type (admin keys, workers); a key sees the shared ones (owner NULL: the
# catalog, `local`, types admins registered) and its own.
VISIBLE = "(%(owner)s::text IS NULL OR owner_key_id IS NULL OR owner_key_id = %(owner)s)"
SELECT_ALL = f"""SELECT * FROM machine_types WHERE {VISIBLE}
ORDER BY provider = 'local' DESC, provider, price_usd_per_hour, name"""
SELECT_NAMES = f"SELECT name FROM machine_types WHERE name = ANY(%(names)s) AND {VISIBLE}"
SELECT_ALL_NAMES = "SELECT name FROM machine_types ORDER BY name"
SELECT_ONE = f"SELECT * FROM machine_types WHERE name = %(name)s AND {VISIBLE}"
# The type whose name is this one's up to letter case (names are unique that way: migrations/0032).
SELECT_SAME_NAME = "SELECT name FROM machine_types WHERE lower(name) = lower(%s)"
DELETE_REGISTERED = """
DELETE FROM machine_types WHERE name = %(name)s AND registered_at IS NOT NULL
  AND (%(owner)s::text IS NULL OR owner_key_id = %(owner)s)
RETURNING name"""
SELECT_SOME = "SELECT * FROM machine_types WHERE name = ANY(%s)"
# GPU types without bf16: said so, or unknown on a GPU older than Ampere (compute capability < 8.0).
SELECT_WITHOUT_BF16 = """
SELECT name, gpu FROM machine_types
WHERE name = ANY(%s) AND gpu IS NOT NULL
  AND NOT COALESCE(gpu_bf16, COALESCE(substring(gpu_compute_capability from '^[0-9]+')::int, 0) >= 8)
ORDER BY name"""
# Machine types with the same GPU model: measurements of one serve the others. Itself first, then AWS
# types (the fleet can start those), then by name.
SELECT_PEERS = """
SELECT m.name, m.gpu,
       array_agg(p.name ORDER BY p.name = m.name DESC, p.provider = 'aws' DESC, p.name)
           FILTER (WHERE p.name IS NOT NULL) AS peers
FROM machine_types m LEFT JOIN machine_types p ON p.gpu = m.gpu
WHERE m.name = ANY(%s)
GROUP BY m.name, m.gpu"""
# New catalog rows are added; a row that exists keeps its prices (`catalog refresh` may have read newer
# ones) and only gains GPU figures it lacks, so seeding again never undoes a refresh or a user's edit.
SEED = """
INSERT INTO machine_types AS m (name, provider, gpu, gpu_count, gpu_memory_gib, vcpus, memory_gib,
    price_usd_per_hour, spot_price_usd_per_hour, gpu_fp32_tflops, gpu_tf32_tflops, gpu_fp16_tflops,
    gpu_fp16_acc16_tflops, gpu_mem_bandwidth_gbs, gpu_sm_count, gpu_l2_mib, gpu_compute_capability, gpu_bf16,
    gpu_tdp_watts, region, source, specs_source, price_source, spot_price_source, figures_read_on)
VALUES (%(name)s, %(provider)s, %(gpu)s, %(gpu_count)s, %(gpu_memory_gib_total)s, %(vcpus)s, %(memory_gib)s,
    %(price)s, %(spot_price)s, %(gpu_fp32_tflops)s, %(gpu_tf32_tflops)s, %(gpu_fp16_tflops)s,
    %(gpu_fp16_acc16_tflops)s, %(gpu_mem_bandwidth_gbs)s, %(gpu_sm_count)s, %(gpu_l2_mib)s,
    %(gpu_compute_capability)s, %(gpu_bf16)s,
    %(gpu_tdp_watts)s, %(region)s, %(source)s, %(specs_source)s, %(price_source)s, %(spot_price_source)s,
    %(read_on)s)
ON CONFLICT (name) DO UPDATE SET
    gpu_tf32_tflops = COALESCE(m.gpu_tf32_tflops, EXCLUDED.gpu_tf32_tflops),
    gpu_fp16_acc16_tflops = COALESCE(m.gpu_fp16_acc16_tflops, EXCLUDED.gpu_fp16_acc16_tflops),
    gpu_sm_count = COALESCE(m.gpu_sm_count, EXCLUDED.gpu_sm_count),
    gpu_l2_mib = COALESCE(m.gpu_l2_mib, EXCLUDED.gpu_l2_mib),
    gpu_compute_capability = COALESCE(m.gpu_compute_capability, EXCLUDED.gpu_compute_capability),
    gpu_bf16 = COALESCE(m.gpu_bf16, EXCLUDED.gpu_bf16),
    region = COALESCE(m.region, EXCLUDED.region),
    spot_price_usd_per_hour = COALESCE(m.spot_price_usd_per_hour, EXCLUDED.spot_price_usd_per_hour),
    spot_price_source = COALESCE(m.spot_price_source, EXCLUDED.spot_price_source)"""
INSERT_REGISTERED = """
INSERT INTO machine_types (name, provider, gpu, gpu_count, gpu_memory_gib, vcpus, memory_gib, price_usd_per_hour,
    gpu_fp32_tflops, gpu_tf32_tflops, gpu_fp16_tflops, gpu_fp16_acc16_tflops, gpu_mem_bandwidth_gbs, gpu_sm_count,
    gpu_l2_mib, gpu_compute_capability, gpu_bf16, gpu_tdp_watts, source, specs_source, price_source, registered_at,
    owner_key_id, gpu_link, gpu_link_gbs, nics, nic_gbps, network_rdma)
VALUES (%(name)s, %(provider)s, %(gpu)s, %(gpu_count)s, %(gpu_memory_gib_total)s, %(vcpus)s, %(memory_gib)s,
    %(price_usd_per_hour)s, %(gpu_fp32_tflops)s, %(gpu_tf32_tflops)s, %(gpu_fp16_tflops)s, %(gpu_fp16_acc16_tflops)s,
    %(gpu_mem_bandwidth_gbs)s, %(gpu_sm_count)s, %(gpu_l2_mib)s, %(gpu_compute_capability)s, %(gpu_bf16)s,
    %(gpu_tdp_watts)s,
    'registered by its specs (POST /v1/machines)', %(specs_source)s, 'given by the user', now(), %(owner)s,
    %(gpu_link)s, %(gpu_link_gbs)s, %(nics)s, %(nic_gbps)s, %(network_rdma)s)
RETURNING *"""


def reference_can_answer(info: MachineTypeInfo) -> bool:
    """Whether the reference predictor can answer a type: a GPU whose FP32 rate and memory bandwidth are known.

    A CPU cannot be; nor can a GPU an agent described that data/gpus.csv does not list, until its figures are added.
    """
    return info["gpu"] is not None and bool(info["gpu_fp32_tflops"]) and bool(info["gpu_mem_bandwidth_gbs"])


def list_all(*, owner: str | None = None) -> list[MachineTypeInfo]:
    """Every machine type with its specs and price (with `owner`: the shared ones and that key's)."""
    with transaction() as cur:
        cur.execute(SELECT_ALL, {"owner": owner})
        return [_info(r) for r in cur.fetchall()]


def by_names(*, names: list[str]) -> dict[str, MachineTypeInfo]:
    """These machine types (those in the catalog) by name, with their specs and price."""
    with transaction() as cur:
        cur.execute(SELECT_SOME, (names,))
        return {r["name"]: _info(r) for r in cur.fetchall()}


def names(cur: Cursor) -> list[str]:
    """Every machine type's name."""
    cur.execute(SELECT_ALL_NAMES)
    return [r["name"] for r in cur.fetchall()]


def get_by_name(*, name: str, owner: str | None = None) -> MachineTypeInfo:
    """One machine type (with `owner`: only if shared or that key's; another key's is unknown)."""
    with transaction() as cur:
        cur.execute(SELECT_ONE, {"name": name, "owner": owner})
        row = cur.fetchone()
    if row is None:
        raise NotFound(f"unknown machine type {name!r}", machine_type=name)
    return _info(row)


def missing(*, names: list[str], owner: str | None = None) -> list[str]:
    """The names among `names` that are not in the catalog (with `owner`: not visible to that key)."""
    with transaction() as cur:
        cur.execute(SELECT_NAMES, {"names": names, "owner": owner})
        known = {r["name"] for r in cur.fetchall()}
    return [n for n in names if n not in known]


def without_bf16(*, names: list[str]) -> list[dict[str, Any]]:
    """The GPU machine types among `names` whose GPU cannot compute in bf16 (name, gpu); a CPU can."""
    with transaction() as cur:
        cur.execute(SELECT_WITHOUT_BF16, (names,))
        return [dict(r) for r in cur.fetchall()]


def peers_of(*, names: list[str]) -> dict[str, list[str]]:
    """Per machine type, those with its GPU model (itself first, AWS next); just itself without a GPU."""
    with transaction() as cur:
        cur.execute(SELECT_PEERS, (names,))
        found = {r["name"]: list(r["peers"] or []) for r in cur.fetchall()}
    return {n: found.get(n) or [n] for n in names}


def create(*, figures: MachineCreate, owner_key_id: str | None = None) -> MachineTypeInfo:
    """Register a machine type from its GPU's figures (POST /v1/machines); owner None: shared with every key."""
    row = figures.model_dump()
    per_gpu = figures.gpu_memory_gib
    row["gpu_memory_gib_total"] = None if per_gpu is None else per_gpu * figures.gpu_count
    row["specs_source"] = figures.specs_source()
    row["provider"] = figures.provider or "own"
    row["owner"] = owner_key_id
    try:
        with transaction() as cur:
            cur.execute(INSERT_REGISTERED, row)
            return _info(one(cur))
    except psycopg2.errors.UniqueViolation as exc:
        with transaction() as cur:
            cur.execute(SELECT_SAME_NAME, (figures.name,))
            found = cur.fetchone()
        taken = found["name"] if found else figures.name
        if taken == figures.name:
            raise Conflict(f"machine type {figures.name!r} exists already", machine_type=figures.name) from exc
        # Shown whatever its owner: a name one key holds cannot be another's, and saying so tells nothing more.
        raise Conflict(
            f"machine type {figures.name!r} differs only in letter case from {taken!r}, which exists: names are "
            "unique whatever their case, so that one name never means two types",
            machine_type=figures.name,
        ) from exc


def delete(*, name: str, owner: str | None, using: list[str]) -> None:
    """Delete a registered machine type (with `owner`: only that key's); `using`: ids of unfinished jobs naming it.

    The catalog and `local` are not deleted; nor is a type with stored measurements or agents (they name it: deleting
    it would lose measurements), nor one an unfinished job names.
    """
    info = get_by_name(name=name, owner=owner)  # 404 for another key's type
    if info["registered_at"] is None:
        raise Conflict(f"machine type {name!r} is part of the catalog; only registered types can be deleted")
    if info["owner_key_id"] is None and owner is not None:
        raise Forbidden(f"machine type {name!r} was registered by an admin for every key; only an admin may delete it")
    if using:
        raise Conflict(f"machine type {name!r} is named by unfinished jobs {', '.join(using)}; cancel them first")
    try:
        with transaction() as cur:
            cur.execute(DELETE_REGISTERED, {"name": name, "owner": owner})
            gone = cur.fetchone()
    except psycopg2.errors.ForeignKeyViolation as exc:
        raise Conflict(
            f"machine type {name!r} has stored measurements, agents or fleet records: deleting it would lose them"
        ) from exc
    if gone is None:
        raise NotFound(f"unknown machine type {name!r}", machine_type=name)


def seed_catalog(cur: psycopg2.extras.RealDictCursor) -> int:
    """Add the machine types of data/cloud_gpu_machines.csv with their GPU's figures; returns rows seen."""
    gpus = {r["gpu"]: r for r in gpu_rows()}
    rows = _csv(MACHINES_CSV)
    for r in rows:
        cur.execute(SEED, _seed_row(r, gpus[r["gpu"]]))
    return len(rows)


def _seed_row(csv_row: dict[str, str], gpu: dict[str, str]) -> dict[str, Any]:
    count = int(csv_row["gpu_count"])
    figures: dict[str, Any] = {column: number(gpu.get(key, "")) for key, column in GPU_COLUMNS.items()}
    figures["gpu_bf16"] = gpu["bf16"].lower() == "true" if gpu.get("bf16") else None
    figures["gpu_compute_capability"] = gpu.get("compute_capability") or None
    per_gpu = figures.pop("gpu_memory_gib")
    total = number(csv_row.get("gpu_memory_gib", "")) or (per_gpu * count if per_gpu else None)
    region = csv_row.get("region") or None
    price_source = csv_row.get("price_source") or "data/cloud_gpu_machines.csv"
    return {
        **figures,
        "name": csv_row["name"],
        "provider": csv_row["provider"],
        "gpu": csv_row["gpu"],
        "gpu_count": count,
        "gpu_memory_gib_total": total,
        "vcpus": number(csv_row.get("vcpus", "")),
        "memory_gib": number(csv_row.get("memory_gib", "")),
        "price": number(csv_row["on_demand_usd_per_hour"]) or 0,
        "spot_price": number(csv_row.get("spot_usd_per_hour", "")),
        "region": region,
        "source": f"data/cloud_gpu_machines.csv ({csv_row['provider']}{', ' + region if region else ''})",
        "specs_source": f"data/gpus.csv: {gpu.get('source', '')}".strip(),
        "price_source": price_source,
        "spot_price_source": price_source if csv_row.get("spot_usd_per_hour") else None,
        "read_on": date.fromisoformat(csv_row["price_read_on"]) if csv_row.get("price_read_on") else None,
    }


def number(text: str) -> float | None:
    """A CSV cell as a number; None when empty."""
    text = (text or "").strip()
    return float(text) if text else None


@cache
def usable_memory() -> dict[str, tuple[float, str]]:
    """GPU (data/gpus.csv's name) → the share of its memory PyTorch gets by default, and why (data/gpu_memory.csv):
    GDDR boards shipped with ECC on give up 1/16 of it; HBM keeps its check bits apart; GeForce ships ECC off."""
    return {r["gpu"]: (float(r["usable_fraction"]), r["why"]) for r in _csv(MEMORY_CSV)}


def gpu_rows() -> list[dict[str, str]]:
    """data/gpus.csv: each GPU's figures, aliases and source."""
    return gpu_catalog.rows()


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return [{k: (v or "").strip() for k, v in r.items()} for r in csv.DictReader(f)]


# AWS types (the fleet's launch prices and quotas, `traincast catalog refresh`).
SELECT_AWS_PRICES = "SELECT name, price_usd_per_hour FROM machine_types WHERE provider = 'aws' ORDER BY name"
SELECT_VCPUS = "SELECT vcpus FROM machine_types WHERE name = %s"
SELECT_NOT_AWS = "SELECT name, provider FROM machine_types WHERE name = ANY(%s) AND provider <> 'aws'"
SELECT_FOR_UPDATE = "SELECT * FROM machine_types WHERE name = ANY(%s) FOR UPDATE"
SELECT_BOARD_POWER = "SELECT DISTINCT gpu, gpu_tdp_watts FROM machine_types WHERE gpu_tdp_watts IS NOT NULL"
UPSERT_AWS = """
INSERT INTO machine_types AS m (name, provider, gpu, gpu_count, gpu_memory_gib, vcpus, memory_gib,
    price_usd_per_hour, spot_price_usd_per_hour, gpu_tdp_watts, source, specs_source, price_source,
    spot_price_source, specs_read_at, price_read_at, spot_price_read_at, figures_read_on)
VALUES (%(name)s, 'aws', %(gpu)s, %(gpu_count)s, %(gpu_memory_gib)s, %(vcpus)s, %(memory_gib)s,
    %(price_usd_per_hour)s, %(spot_price_usd_per_hour)s, %(gpu_tdp_watts)s, %(source)s, %(specs_source)s,
    %(price_source)s, %(spot_price_source)s, %(specs_read_at)s, %(price_read_at)s, %(spot_price_read_at)s,
    %(figures_read_on)s)
ON CONFLICT (name) DO UPDATE SET
    gpu = EXCLUDED.gpu, gpu_count = EXCLUDED.gpu_count, gpu_memory_gib = EXCLUDED.gpu_memory_gib,
    vcpus = EXCLUDED.vcpus, memory_gib = EXCLUDED.memory_gib, price_usd_per_hour = EXCLUDED.price_usd_per_hour,
    spot_price_usd_per_hour = EXCLUDED.spot_price_usd_per_hour, source = EXCLUDED.source,
    specs_source = EXCLUDED.specs_source, price_source = EXCLUDED.price_source,
    spot_price_source = EXCLUDED.spot_price_source, specs_read_at = EXCLUDED.specs_read_at,
    price_read_at = EXCLUDED.price_read_at, spot_price_read_at = EXCLUDED.spot_price_read_at,
    figures_read_on = EXCLUDED.figures_read_on
WHERE m.provider = 'aws'
RETURNING *"""


def aws_prices() -> dict[str, float]:
    """AWS machine types of the catalog (by name) and their on-demand price per hour."""
    with transaction() as cur:
        cur.execute(SELECT_AWS_PRICES)
        return {r["name"]: float(r["price_usd_per_hour"]) for r in cur.fetchall()}


def vcpus(*, name: str) -> int | None:
    """A type's vCPUs (what its quota counts), None if unknown."""
    with transaction() as cur:
        cur.execute(SELECT_VCPUS, (name,))
        row = cur.fetchone()
    return int(row["vcpus"]) if row and row["vcpus"] is not None else None


def not_aws(*, names: list[str]) -> list[dict[str, Any]]:
    """Those of these types that belong to another provider: name and provider."""
    with transaction() as cur:
        cur.execute(SELECT_NOT_AWS, (names,))
        return [dict(r) for r in cur.fetchall()]


def lock(cur: Cursor, *, names: list[str]) -> dict[str, MachineTypeInfo]:
    """The stored rows of these types by name, locked until the caller's transaction ends."""
    cur.execute(SELECT_FOR_UPDATE, (names,))
    return {r["name"]: _info(r) for r in cur.fetchall()}


def board_powers(cur: Cursor) -> list[tuple[str, Any]]:
    """(GPU, board power in watts) known from any stored type."""
    cur.execute(SELECT_BOARD_POWER)
    return [(r["gpu"], r["gpu_tdp_watts"]) for r in cur.fetchall()]


def upsert_aws(cur: Cursor, *, row: dict[str, Any]) -> MachineTypeInfo:
    """Add or update an AWS type from its figures as read (never another provider's row); returns the stored row."""
    cur.execute(UPSERT_AWS, row)
    return _info(one(cur))
