"""Benchmark agents as registered in PostgreSQL: the read side the API uses."""

from typing import Any

from shared.db import Cursor, jsonable, transaction

# Alive: beat recently and did not say it stopped (every reader of "alive" uses this rule).
ALIVE = "(a.stopped_at IS NULL AND a.heartbeat_at > now() - make_interval(secs => %(alive_after)s))"
# Live agents first, then the most recent.
SELECT_AGENTS = f"""
SELECT a.id, a.machine_type, a.host, a.pid, a.device, a.environment_id, e.details AS environment,
       a.started_at, a.heartbeat_at, a.stopped_at, a.stop_reason, a.instance_id, a.current_work, a.last_error,
       a.last_error_at,
       {ALIVE} AS alive,
       extract(epoch FROM now() - a.heartbeat_at) AS heartbeat_age_s
FROM agents a JOIN environments e ON e.id = a.environment_id
WHERE (%(machine)s::text IS NULL OR a.machine_type = %(machine)s)
ORDER BY alive DESC, a.heartbeat_at DESC
LIMIT %(limit)s"""


SELECT_ALIVE_COUNTS = f"SELECT a.machine_type, count(*) AS n FROM agents a WHERE {ALIVE} GROUP BY a.machine_type"


def alive_counts(cur: Cursor, *, alive_after_s: float) -> dict[str, int]:
    """Live agents per machine type (types with none are left out)."""
    cur.execute(SELECT_ALIVE_COUNTS, {"alive_after": alive_after_s})
    return {r["machine_type"]: int(r["n"]) for r in cur.fetchall()}


def list_all(*, alive_after_s: float, machine: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """Registered agents, alive first, with environment, heartbeat age and current work."""
    params = {"alive_after": alive_after_s, "machine": machine, "limit": limit}
    with transaction() as cur:
        cur.execute(SELECT_AGENTS, params)
        return [_plain(dict(r)) for r in cur.fetchall()]


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    out = jsonable(row)
    out["id"] = str(row["id"])
    out["heartbeat_age_s"] = round(float(row["heartbeat_age_s"]), 1)
    return out
