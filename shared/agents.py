"""Benchmark agents as registered in PostgreSQL: their heartbeats and status, and who is alive."""

import uuid
from datetime import datetime
from typing import Any, cast

from typing_extensions import TypedDict  # pydantic reads typing's only from Python 3.12

from shared.core.db import Cursor, Json, jsonable, transaction
from shared.local_machine import LocalDevice
from shared.measurements import environments

# Alive: beat recently and did not say it stopped (every reader of "alive" uses this rule).
ALIVE = "(a.stopped_at IS NULL AND a.heartbeat_at > now() - make_interval(secs => %(alive_after)s))"
# Live agents first, then the most recent.
SELECT_AGENTS = f"""
SELECT a.id, a.machine_type, a.host, a.pid, a.device, a.environment_id,
       a.started_at, a.heartbeat_at, a.stopped_at, a.stop_reason, a.instance_id, a.current_work, a.last_error,
       a.last_error_at,
       {ALIVE} AS alive,
       extract(epoch FROM now() - a.heartbeat_at) AS heartbeat_age_s
FROM agents a
WHERE (%(machine_type)s::text IS NULL OR a.machine_type = %(machine_type)s)
ORDER BY alive DESC, a.heartbeat_at DESC
LIMIT %(limit)s"""
SELECT_ALIVE_COUNTS = f"SELECT a.machine_type, count(*) AS n FROM agents a WHERE {ALIVE} GROUP BY a.machine_type"
SELECT_BY_INSTANCE = f"""
SELECT a.instance_id, bool_or({ALIVE}) AS alive, bool_or({ALIVE} AND a.current_work IS NOT NULL) AS busy
FROM agents a WHERE a.instance_id = ANY(%(ids)s)
GROUP BY a.instance_id"""

# The agent's own writes. An upsert, so a heartbeat re-registers an agent whose row vanished (database restored).
# Inserting a row of `local` with a device description describes `local` in the catalog (migrations/0026).
UPSERT_AGENT = """
INSERT INTO agents (id, machine_type, host, pid, device, environment_id, started_at, instance_id, device_description)
VALUES (%(id)s, %(machine_type)s, %(host)s, %(pid)s, %(device)s, %(env)s, %(started_at)s, %(instance)s,
    %(description)s)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()"""
SET_WORK = "UPDATE agents SET current_work = %s, heartbeat_at = now() WHERE id = %s"
SET_ERROR = "UPDATE agents SET last_error = %s, last_error_at = now() WHERE id = %s"
MARK_STOPPED = "UPDATE agents SET stopped_at = now(), current_work = NULL, stop_reason = %s WHERE id = %s"


class AgentListed(TypedDict):
    """An agent as GET /v1/agents lists it: times as ISO 8601 text, its environment's details inlined."""

    id: str
    machine_type: str
    host: str
    pid: int
    device: str  # e.g. 'cuda:0 (NVIDIA A10G)' or 'cpu'
    environment_id: int
    environment: dict[str, Any] | None  # software, driver and device its timings are stored under
    started_at: str
    heartbeat_at: str
    heartbeat_age_s: float
    alive: bool  # beat within AGENT_ALIVE_AFTER_S and did not say it stopped
    stopped_at: str | None
    stop_reason: str | None
    instance_id: str | None  # the EC2 instance of a fleet agent
    current_work: dict[str, Any] | None  # what it measures now
    last_error: str | None
    last_error_at: str | None


def alive_counts(cur: Cursor, *, alive_after_s: float) -> dict[str, int]:
    """Live agents per machine type (types with none are left out)."""
    cur.execute(SELECT_ALIVE_COUNTS, {"alive_after": alive_after_s})
    return {r["machine_type"]: int(r["n"]) for r in cur.fetchall()}


def list_all(*, alive_after_s: float, machine_type: str | None = None, limit: int = 100) -> list[AgentListed]:
    """Registered agents, alive first, with environment, heartbeat age and current work."""
    params = {"alive_after": alive_after_s, "machine_type": machine_type, "limit": limit}
    with transaction() as cur:
        cur.execute(SELECT_AGENTS, params)
        rows = [dict(r) for r in cur.fetchall()]
        details = environments.details(cur, ids=[r["environment_id"] for r in rows])
    return [_plain(r | {"environment": details.get(r["environment_id"])}) for r in rows]


def by_instance(cur: Cursor, *, instance_ids: list[str], alive_after_s: float) -> dict[str, tuple[bool, bool]]:
    """Instance id → (an agent on it is alive, it is measuring something); instances with no agent are left out."""
    cur.execute(SELECT_BY_INSTANCE, {"ids": instance_ids, "alive_after": alive_after_s})
    return {r["instance_id"]: (bool(r["alive"]), bool(r["busy"])) for r in cur.fetchall()}


def beat(
    *, agent_id: uuid.UUID, machine_type: str, host: str, pid: int, device: str, environment_id: int,
    started_at: datetime, instance_id: str | None, device_description: LocalDevice | None = None,
) -> None:  # fmt: skip
    """Register an agent, or note its heartbeat; an agent of `local` registering with its device describes `local`."""
    params = {"id": agent_id, "machine_type": machine_type, "host": host, "pid": pid, "device": device}
    params |= {"env": environment_id, "started_at": started_at, "instance": instance_id}
    described = Json(device_description.model_dump()) if device_description is not None else None
    with transaction() as cur:
        cur.execute(UPSERT_AGENT, params | {"description": described})


def set_work(*, agent_id: uuid.UUID, work: dict[str, Any] | None) -> None:
    """Publish what an agent is measuring now (None: idle); counts as a heartbeat."""
    with transaction() as cur:
        cur.execute(SET_WORK, (Json(work) if work is not None else None, agent_id))


def set_error(*, agent_id: uuid.UUID, message: str) -> None:
    """Publish an agent's last task failure."""
    with transaction() as cur:
        cur.execute(SET_ERROR, (message[:2000], agent_id))


def mark_stopped(*, agent_id: uuid.UUID, reason: str) -> None:
    """Mark an agent stopped, with why."""
    with transaction() as cur:
        cur.execute(MARK_STOPPED, (reason, agent_id))


def _plain(row: dict[str, Any]) -> AgentListed:
    out = jsonable(row)
    out["id"] = str(row["id"])
    out["heartbeat_age_s"] = round(float(row["heartbeat_age_s"]), 1)
    return cast(AgentListed, out)
