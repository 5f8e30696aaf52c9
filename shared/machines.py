"""The machine type catalog."""

from typing import Any

from shared.db import floats, transaction
from shared.errors import NotFound

SELECT_ALL = "SELECT * FROM machine_types ORDER BY provider DESC, price_usd_per_hour, name"
SELECT_NAMES = "SELECT name FROM machine_types WHERE name = ANY(%s)"
SELECT_ONE = "SELECT * FROM machine_types WHERE name = %s"


def list_all() -> list[dict[str, Any]]:
    """Every machine type with its specs and price."""
    with transaction() as cur:
        cur.execute(SELECT_ALL)
        return [floats(r) for r in cur.fetchall()]


def get_by_name(*, name: str) -> dict[str, Any]:
    """One machine type."""
    with transaction() as cur:
        cur.execute(SELECT_ONE, (name,))
        row = cur.fetchone()
    if row is None:
        raise NotFound(f"unknown machine type {name!r}", machine=name)
    return floats(row)


def missing(*, names: list[str]) -> list[str]:
    """The names among `names` that are not in the catalog."""
    with transaction() as cur:
        cur.execute(SELECT_NAMES, (names,))
        known = {r["name"] for r in cur.fetchall()}
    return [n for n in names if n not in known]
