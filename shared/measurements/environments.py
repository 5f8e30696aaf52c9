"""Measurement environments (software, driver and device a timing ran in): their rows and the one-environment rule."""

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from shared.core.db import Cursor, Json, one, rows_of, transaction

# A timing row (layers.LayerTiming, ops.OpTiming): it names its signature, batch size and environment.
Row = TypeVar("Row", bound=Mapping[str, Any])

# DO NOTHING, not an upsert: the agent's role may insert environments but never rewrite one.
INSERT_ENVIRONMENT = """
INSERT INTO environments (hash, details) VALUES (%s, %s)
ON CONFLICT (hash) DO NOTHING
RETURNING id"""
SELECT_ENVIRONMENT = "SELECT id FROM environments WHERE hash = %s"


def store(*, details: dict[str, Any]) -> int:
    """Store an environment once by the hash of its details and return its id."""
    with transaction() as cur:
        return ensure(cur, details=details)


def details(cur: Cursor, *, ids: list[int]) -> dict[int, dict[str, Any]]:
    """Environment id → its details, in the caller's transaction."""
    return {r["id"]: r["details"] for r in rows(cur, ids=ids)}


def one_environment(rows: list[Row], sig_column: str) -> dict[tuple[int, int], Row]:
    """Rows (newest first) keyed by (signature, batch size): the environment holding most keys supplies all it has.

    Only keys it lacks come from another environment, newest first, so a CNN's timings come from one
    software and driver set-up whenever one has them all, and each row says which it is.
    """
    cover: dict[int, set[tuple[int, int]]] = {}
    for r in rows:
        cover.setdefault(r["environment_id"], set()).add((r[sig_column], r["batch_size"]))
    # dicts keep insertion order, which is newest first: max() keeps the first of equals.
    preferred = max(cover, key=lambda env: len(cover[env]), default=None)
    out: dict[tuple[int, int], Row] = {}
    for r in rows:
        key = (r[sig_column], r["batch_size"])
        if key not in out or (r["environment_id"] == preferred and out[key]["environment_id"] != preferred):
            out[key] = r
    return out


def most_complete(counts: Iterable[Mapping[int, int]]) -> int:
    """The most points stored in one environment, summing each kind's counts per environment (never across two)."""
    total: dict[int, int] = {}
    for per_env in counts:
        for env, n in per_env.items():
            total[env] = total.get(env, 0) + n
    return max(total.values(), default=0)


# Bundles (shared/measurements/bundle.py) carry environments by hash, the key every installation stores them under.
SELECT_ROWS = "SELECT id, hash, details FROM environments WHERE id = ANY(%s) ORDER BY id"


def digest(details: dict[str, Any]) -> str:
    """The hash an environment is stored under: the same details give the same hash on every installation."""
    return hashlib.sha256(json.dumps(details, sort_keys=True).encode()).hexdigest()[:32]


def rows(cur: Cursor, *, ids: list[int]) -> list[dict[str, Any]]:
    """Environments by id, with their hashes, in the caller's transaction."""
    return rows_of(cur, SELECT_ROWS, (sorted(set(ids)),))


def ensure(cur: Cursor, *, details: dict[str, Any]) -> int:
    """An environment's id in the caller's transaction, stored when new."""
    key = digest(details)
    cur.execute(INSERT_ENVIRONMENT, (key, Json(details)))
    inserted = cur.fetchone()
    if inserted is not None:
        return int(inserted["id"])
    # Stored before (or by a concurrent agent, whose row this statement now sees): read its id.
    cur.execute(SELECT_ENVIRONMENT, (key,))
    return int(one(cur)["id"])
